"""The addresses and default gateways of the namespace this process runs in: the node's, for a
daemon (or the thin plugin) in the host network namespace. SEC-NODE reads them at ADD.

Two rtnetlink dumps (addresses, the main table's routes) through `rtnetlink`: ~1 ms, blocking,
and no pyroute2 (`rtnetlink` says why). Only what SEC-NODE reads is decoded: each address with
its interface, each default route's gateways (multipath too).
"""

import socket
import struct
from collections.abc import Iterator

from netattach.netns import rtnetlink

_IFA_ADDRESS = 1
_IFA_LOCAL = 2
_IFADDRMSG = struct.Struct("=BBBBI")  # family, prefix length, flags, scope, interface index
_RTNEXTHOP = struct.Struct("=HBBi")  # length, flags, hops, interface index


def read_addresses() -> tuple[list[tuple[str, str]], list[str]]:
    """(interface name, address) of every address here, and every default route's gateway."""
    addresses: list[tuple[str, str]] = []
    gateways: list[str] = []
    with rtnetlink.open_socket() as sock:
        request = _IFADDRMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
        for body in rtnetlink.dump(sock, rtnetlink.RTM_GETADDR, rtnetlink.RTM_NEWADDR, request, 1):
            family, _, _, _, index = _IFADDRMSG.unpack_from(body)
            attrs = dict(rtnetlink.attributes(body[_IFADDRMSG.size :]))
            # IFA_LOCAL is the address itself; IFA_ADDRESS is the peer's on a point-to-point link.
            raw = attrs.get(_IFA_LOCAL, attrs.get(_IFA_ADDRESS))
            if raw is not None and family in (socket.AF_INET, socket.AF_INET6):
                addresses.append((_name(index), socket.inet_ntop(family, raw)))
        request = rtnetlink.RTMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0, 0, 0, 0, 0)
        for body in rtnetlink.dump(
            sock, rtnetlink.RTM_GETROUTE, rtnetlink.RTM_NEWROUTE, request, 2
        ):
            route = rtnetlink.main_default_route(body)
            if route is None:
                continue
            family, attrs = route
            if rtnetlink.RTA_GATEWAY in attrs:
                gateways.append(socket.inet_ntop(family, attrs[rtnetlink.RTA_GATEWAY]))
            for hop in _next_hops(attrs.get(rtnetlink.RTA_MULTIPATH, b"")):
                gateways.append(socket.inet_ntop(family, hop))
    return addresses, gateways


def _next_hops(data: bytes) -> Iterator[bytes]:
    """The gateways of a multipath route's next hops."""
    offset = 0
    while offset + _RTNEXTHOP.size <= len(data):
        length = _RTNEXTHOP.unpack_from(data, offset)[0]
        if length < _RTNEXTHOP.size:
            return
        attrs = dict(rtnetlink.attributes(data[offset + _RTNEXTHOP.size : offset + length]))
        if rtnetlink.RTA_GATEWAY in attrs:
            yield attrs[rtnetlink.RTA_GATEWAY]
        offset += (length + 3) & ~3


def _name(index: int) -> str:
    try:
        return socket.if_indextoname(index)
    except OSError:
        return f"if{index}"  # gone since the dump
