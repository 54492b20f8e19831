"""The standard as pure functions: selections, delegate configs,
network-status."""
