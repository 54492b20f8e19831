"""The addresses and default gateways of the namespace this process runs in: the node's, for a
daemon (or the thin plugin) in the host network namespace. SEC-NODE reads them at ADD.

Two rtnetlink dumps (addresses, the main table's routes) on a plain `AF_NETLINK` socket, parsed
here: ~1 ms, blocking, and no pyroute2, whose import alone costs the thin plugin 0.2-0.5 s at
every ADD that needs the node (pyroute2 is kept off its path). Only what SEC-NODE reads is
decoded: each address with its interface, each default route's gateways (multipath too).
"""

import os
import socket
import struct
from collections.abc import Iterator

_NETLINK_ROUTE = 0
_NLMSG_ERROR = 2
_NLMSG_DONE = 3
_RTM_NEWADDR = 20
_RTM_GETADDR = 22
_RTM_NEWROUTE = 24
_RTM_GETROUTE = 26
_NLM_F_REQUEST = 0x1
_NLM_F_DUMP = 0x300
_IFA_ADDRESS = 1
_IFA_LOCAL = 2
_RTA_GATEWAY = 5
_RTA_MULTIPATH = 9
_RTA_TABLE = 15
_MAIN_TABLE = 254
_HEADER = struct.Struct("=LHHLL")  # nlmsghdr: length, type, flags, sequence, port
_IFADDRMSG = struct.Struct("=BBBBI")  # family, prefix length, flags, scope, interface index
_RTMSG = struct.Struct("=BBBBBBBBI")  # family, dst_len, src_len, tos, table, protocol, ...
_RTATTR = struct.Struct("=HH")  # length, type
_RTNEXTHOP = struct.Struct("=HBBi")  # length, flags, hops, interface index


def read_addresses() -> tuple[list[tuple[str, str]], list[str]]:
    """(interface name, address) of every address here, and every default route's gateway."""
    addresses: list[tuple[str, str]] = []
    for body in _dump(_RTM_GETADDR, _RTM_NEWADDR, _IFADDRMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)):
        family, _, _, _, index = _IFADDRMSG.unpack_from(body)
        attrs = dict(_attributes(body[_IFADDRMSG.size :]))
        # IFA_LOCAL is the address itself; IFA_ADDRESS is the peer's on a point-to-point link.
        raw = attrs.get(_IFA_LOCAL, attrs.get(_IFA_ADDRESS))
        if raw is not None and family in (socket.AF_INET, socket.AF_INET6):
            addresses.append((_name(index), socket.inet_ntop(family, raw)))
    gateways: list[str] = []
    request = _RTMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0, 0, 0, 0, 0)
    for body in _dump(_RTM_GETROUTE, _RTM_NEWROUTE, request):
        family, dst_len, _, _, table, _, _, _, _ = _RTMSG.unpack_from(body)
        attrs = dict(_attributes(body[_RTMSG.size :]))
        if _RTA_TABLE in attrs:
            table = struct.unpack_from("=I", attrs[_RTA_TABLE])[0]
        if dst_len != 0 or table != _MAIN_TABLE or family not in (socket.AF_INET, socket.AF_INET6):
            continue
        if _RTA_GATEWAY in attrs:
            gateways.append(socket.inet_ntop(family, attrs[_RTA_GATEWAY]))
        for hop in _next_hops(attrs.get(_RTA_MULTIPATH, b"")):
            gateways.append(socket.inet_ntop(family, hop))
    return addresses, gateways


def _dump(request: int, reply: int, payload: bytes) -> Iterator[bytes]:
    """The bodies of the `reply` messages a dump `request` gets back."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_ROUTE) as sock:
        sock.bind((0, 0))
        header = _HEADER.pack(
            _HEADER.size + len(payload), request, _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0
        )
        sock.send(header + payload)
        while True:
            data = sock.recv(1 << 16)
            offset = 0
            while offset + _HEADER.size <= len(data):
                length, kind, _, _, _ = _HEADER.unpack_from(data, offset)
                if length < _HEADER.size:
                    return
                body = data[offset + _HEADER.size : offset + length]
                if kind == _NLMSG_DONE:
                    return
                if kind == _NLMSG_ERROR:
                    code = -struct.unpack_from("=i", body)[0]
                    raise OSError(code, f"rtnetlink dump {request}: {os.strerror(code)}")
                if kind == reply:
                    yield body
                offset += (length + 3) & ~3
            if not data:
                return


def _attributes(data: bytes) -> Iterator[tuple[int, bytes]]:
    offset = 0
    while offset + _RTATTR.size <= len(data):
        length, kind = _RTATTR.unpack_from(data, offset)
        if length < _RTATTR.size:
            return
        yield kind & 0x3FFF, data[offset + _RTATTR.size : offset + length]  # flags cleared
        offset += (length + 3) & ~3


def _next_hops(data: bytes) -> Iterator[bytes]:
    """The gateways of a multipath route's next hops."""
    offset = 0
    while offset + _RTNEXTHOP.size <= len(data):
        length = _RTNEXTHOP.unpack_from(data, offset)[0]
        if length < _RTNEXTHOP.size:
            return
        attrs = dict(_attributes(data[offset + _RTNEXTHOP.size : offset + length]))
        if _RTA_GATEWAY in attrs:
            yield attrs[_RTA_GATEWAY]
        offset += (length + 3) & ~3


def _name(index: int) -> str:
    try:
        return socket.if_indextoname(index)
    except OSError:
        return f"if{index}"  # gone since the dump
