"""Framework adapters: ``base`` defines the protocol, ``registry.toml`` lists the
frameworks, and one subpackage per framework realises the IR. Framework modules are
imported lazily, so importing ``adapters`` imports no framework."""
