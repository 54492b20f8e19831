"""MultiNetworkPolicy for the additional networks of pods (requirements POL-*).

Pure code: `model` parses policies; `views` reads pods as compile needs them; `selection` and
`ranges` hold what a rule's peers resolve to; `compile` turns policies into rules per pod and
interface (`ir`), incrementally, through `cluster_index`, `peers`, `named_ports` and `targets`;
`render` makes a pod's nftables table of them; `update` the one transaction taking a netns from
the table it holds to the one it should hold. `apply` runs nft.
"""
