"""The `netattach` command."""
