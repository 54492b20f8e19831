"""netattach's settings: the node's settings file as groups of small frozen values, one module
a concern (settings.settings says which), and the thin plugin's path from its CNI config."""
