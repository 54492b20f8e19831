"""MultiNetworkPolicy for the additional networks of pods (requirements POL-*).

Pure code: `model` parses policies, `compile` turns them into rules per pod and interface,
`render` writes those rules as an nftables script. Applying the script is elsewhere.
"""
