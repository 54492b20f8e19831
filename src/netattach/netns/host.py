"""The addresses, default gateways, links and forwarding switches of the namespace this process
runs in: the node's, for a daemon (or the thin plugin) in the host network namespace. SEC-NODE
and SEC-VALUES read them at ADD.

Three rtnetlink dumps (addresses, the main table's routes, links) through `rtnetlink`: ~1 ms,
blocking, and no pyroute2 (`rtnetlink` says why). Only what the node guard reads is decoded:
each address with its interface, each default route's gateways (multipath too), each link's
name, alternative names, kind, MTU and up/promiscuous flags; sysctls are read from /proc/sys.
"""

import socket
import struct
from collections.abc import Iterator

from netattach.netns import rtnetlink
from netattach.values import NamedTuple

_IFA_ADDRESS = 1
_IFA_LOCAL = 2
_IFADDRMSG = struct.Struct("=BBBBI")  # family, prefix length, flags, scope, interface index
_RTNEXTHOP = struct.Struct("=HBBi")  # length, flags, hops, interface index
_IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change mask
_IFLA_IFNAME = 3
_IFLA_MTU = 4
_IFLA_LINKINFO = 18
_IFLA_INFO_KIND = 1
_IFLA_PROP_LIST = 52
_IFLA_ALT_IFNAME = 53
_IFF_UP = 0x1
_IFF_PROMISC = 0x100
SYSCTL_ROOT = "/proc/sys"


class Link(NamedTuple):
    """A link of this namespace as the node guard judges it."""

    name: str
    altnames: tuple[str, ...] = ()
    kind: str = ""  # IFLA_INFO_KIND: "bridge", "veth", ...; "" for a physical NIC
    mtu: int = 0
    up: bool = False
    promisc: bool = False


def read_links() -> list[Link]:
    """Every link of this namespace, with its alternative names (`ip link property add`)."""
    found: list[Link] = []
    with rtnetlink.open_socket() as sock:
        request = _IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
        for body in rtnetlink.dump(sock, rtnetlink.RTM_GETLINK, rtnetlink.RTM_NEWLINK, request, 3):
            _, _, _, flags, _ = _IFINFOMSG.unpack_from(body)
            attrs = list(rtnetlink.attributes(body[_IFINFOMSG.size :]))
            name, kind, mtu, altnames = "", "", 0, []
            for attr, value in attrs:
                if attr == _IFLA_IFNAME:
                    name = _text(value)
                elif attr == _IFLA_MTU and len(value) >= 4:
                    mtu = struct.unpack_from("=I", value)[0]
                elif attr == _IFLA_LINKINFO:
                    for info, data in rtnetlink.attributes(value):
                        if info == _IFLA_INFO_KIND:
                            kind = _text(data)
                elif attr == _IFLA_PROP_LIST:
                    altnames += [
                        _text(v) for a, v in rtnetlink.attributes(value) if a == _IFLA_ALT_IFNAME
                    ]
            found.append(
                Link(
                    name=name,
                    altnames=tuple(altnames),
                    kind=kind,
                    mtu=mtu,
                    up=bool(flags & _IFF_UP),
                    promisc=bool(flags & _IFF_PROMISC),
                )
            )
    return found


def read_sysctl(name: str) -> str | None:
    """The value of the sysctl `name` (`net/ipv4/ip_forward`) in this namespace; None when
    there is no such file (IPv6 off, a link that is gone)."""
    try:
        with open(f"{SYSCTL_ROOT}/{name}", encoding="ascii", errors="replace") as file:
            return file.read().strip()
    except OSError:
        return None


def _text(value: bytes) -> str:
    return value.partition(b"\0")[0].decode("utf-8", "surrogateescape")


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
