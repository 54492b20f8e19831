"""The daemon's view of the cluster: the fields we read, an indexed store, and its feeds."""
