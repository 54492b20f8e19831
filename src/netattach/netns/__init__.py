"""The only package that touches netlink (pyroute2): namespaces by name, links and addresses
read or changed through sockets bound to a namespace by path, never by switching a thread."""
