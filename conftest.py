"""Repository-wide pytest settings: the conformance kit's ``--framework`` option."""


def pytest_addoption(parser):
    parser.addoption("--framework", action="store", default="torch",
                     help="adapter under test (a name from adapters/registry.toml)")
