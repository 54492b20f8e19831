"""The only package that touches netlink: namespaces by name, links and addresses read or
changed through sockets bound to a namespace by path (pyroute2's; `routes` and `host` open plain
rtnetlink sockets, which keep pyroute2 off the thin plugin's path), never by switching a thread
that lives on: `routes` opens its socket in a thread of its own that enters the namespace and
ends."""
