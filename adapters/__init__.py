"""One package per framework (torch, tf, jax, ort) that builds the IR and times its steps;
``base`` is the contract, ``registry.toml`` the list. Importing ``adapters`` imports no framework."""
