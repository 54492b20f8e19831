"""End-to-end tests: the thin plugin executable, run as a container runtime runs it.

Every test drives `netattach-thin` as `netattach install-cni` installs it (RT-INSTALLED) through
`nsenter --net=<node>` with the CNI environment and config on stdin, against a manifest directory,
on-disk networks and the reference plugins, and then inspects the kernel, host-local's data dir,
netattach's records and the status file. The harness is in `tests/e2e/harness.py`.
"""
