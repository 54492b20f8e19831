"""The CNI runtime (netattach's libcni): find and run delegate plugins, chain config lists,
and keep the on-disk record of every attachment."""
