"""The pod's default route, changed inside the pod's namespace only (SEL-DEFROUTE).

An rtnetlink socket opened in the pod's namespace by a thread of its own, which enters the
namespace, opens the socket and ends (the socket stays bound to that namespace; no shared thread
ever changes its own); then one dump of the family's routes, one delete per default route of the
main table (the dumped message sent back, as `ip route flush` does) and one create, each
acknowledged. Standard library only: with pyroute2 (its import alone ~115 ms, `ssl` among it) a
thin-plugin ADD with `default-route` took ~0.2 s more (370-400 ms, now 115-190 ms on 2 cores).

Errors: `LookupError` when `ifname` is not in the namespace; `OSError` with the kernel's errno
when it refuses a request (ENETUNREACH for a gateway on no subnet of the interface).
"""

import ipaddress
import os
import socket
import struct
import threading
from collections.abc import Iterator, Sequence

_NETLINK_ROUTE = 0
_CLONE_NEWNET = 0x40000000
_NLMSG_ERROR = 2
_NLMSG_DONE = 3
_RTM_NEWROUTE = 24
_RTM_DELROUTE = 25
_RTM_GETROUTE = 26
_NLM_F_REQUEST = 0x1
_NLM_F_ACK = 0x4
_NLM_F_EXCL = 0x200
_NLM_F_CREATE = 0x400
_NLM_F_DUMP = 0x300
_RTA_OIF = 4
_RTA_GATEWAY = 5
_RTA_TABLE = 15
_MAIN_TABLE = 254
_RTPROT_BOOT = 3  # what `ip route add` sets
_RT_SCOPE_UNIVERSE = 0
_RTN_UNICAST = 1
_HEADER = struct.Struct("=LHHLL")  # nlmsghdr: length, type, flags, sequence, port
_RTMSG = struct.Struct("=BBBBBBBBI")  # family, dst_len, src_len, tos, table, protocol, scope,
# type, flags
_RTATTR = struct.Struct("=HH")  # length, type
_RECV_SIZE = 1 << 16


def apply_default_route(netns_path: str, ifname: str, gateways: Sequence[str]) -> None:
    """Make each gateway the default route of its family, via `ifname`, dropping the others.

    Standard v1.1 `default-route`: the selected attachment's gateway becomes the pod's default
    route and the default network's default route is removed. Families with no gateway given
    keep their routes. Blocking: call from async code through `offload.to_thread`.
    """
    sock, index = _open_in(netns_path, ifname)
    with sock:
        for sequence, gateway in enumerate(gateways, start=1):
            address = ipaddress.ip_address(gateway)
            family = socket.AF_INET if address.version == 4 else socket.AF_INET6
            seq = sequence * 1000
            for offset, route in enumerate(_default_routes(sock, family, seq), start=1):
                _acknowledged(sock, _RTM_DELROUTE, _NLM_F_ACK, route, seq + offset)
            body = _RTMSG.pack(
                family,
                0,
                0,
                0,
                _MAIN_TABLE,
                _RTPROT_BOOT,
                _RT_SCOPE_UNIVERSE,
                _RTN_UNICAST,
                0,
            )
            body += _attribute(_RTA_GATEWAY, address.packed)
            body += _attribute(_RTA_OIF, struct.pack("=I", index))
            flags = _NLM_F_ACK | _NLM_F_CREATE | _NLM_F_EXCL
            _acknowledged(sock, _RTM_NEWROUTE, flags, body, seq + 999)


def _open_in(netns_path: str, ifname: str) -> tuple[socket.socket, int]:
    """An rtnetlink socket of the namespace at `netns_path`, and `ifname`'s index there: made
    by a thread that enters the namespace and ends, so no thread that lives on changes its own."""
    found: list[tuple[socket.socket, int]] = []
    failed: list[BaseException] = []

    def inside() -> None:
        import ctypes  # here: only a pod asking for default-route pays it

        libc = ctypes.CDLL(None, use_errno=True)
        try:
            fd = os.open(netns_path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if libc.setns(fd, _CLONE_NEWNET) != 0:
                    code = ctypes.get_errno()
                    raise OSError(code, f"setns {netns_path}: {os.strerror(code)}")
            finally:
                os.close(fd)
            try:
                index = socket.if_nametoindex(ifname)
            except OSError as exc:
                raise LookupError(f"no interface {ifname!r} in {netns_path}") from exc
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_ROUTE)
            sock.bind((0, 0))
            found.append((sock, index))
        except BaseException as exc:  # handed to the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=inside, name="netattach-netns-route")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return found[0]


def _attribute(kind: int, value: bytes) -> bytes:
    length = _RTATTR.size + len(value)
    return _RTATTR.pack(length, kind) + value + b"\0" * (-length % 4)


def _attributes(data: bytes) -> Iterator[tuple[int, bytes]]:
    offset = 0
    while offset + _RTATTR.size <= len(data):
        length, kind = _RTATTR.unpack_from(data, offset)
        if length < _RTATTR.size:
            return
        yield kind & 0x3FFF, data[offset + _RTATTR.size : offset + length]
        offset += (length + 3) & ~3


def _send(sock: socket.socket, kind: int, flags: int, body: bytes, seq: int) -> None:
    sock.send(_HEADER.pack(_HEADER.size + len(body), kind, _NLM_F_REQUEST | flags, seq, 0) + body)


def _replies(sock: socket.socket, seq: int) -> Iterator[tuple[int, bytes]]:
    """(type, body) of each reply to request `seq`, up to its end (DONE, or an error/ack)."""
    while True:
        data = sock.recv(_RECV_SIZE)
        if not data:
            return
        offset = 0
        while offset + _HEADER.size <= len(data):
            length, kind, _, sequence, _ = _HEADER.unpack_from(data, offset)
            if length < _HEADER.size:
                return
            body = data[offset + _HEADER.size : offset + length]
            offset += (length + 3) & ~3
            if sequence != seq:
                continue  # a late reply to an earlier request
            if kind == _NLMSG_DONE:
                return
            yield kind, body
            if kind == _NLMSG_ERROR:
                return


def _acknowledged(sock: socket.socket, kind: int, flags: int, body: bytes, seq: int) -> None:
    """Send a request and wait for its acknowledgement; the kernel's refusal as OSError."""
    _send(sock, kind, flags, body, seq)
    for reply, answer in _replies(sock, seq):
        if reply == _NLMSG_ERROR:
            code = -struct.unpack_from("=i", answer)[0]
            if code:
                raise OSError(code, os.strerror(code))
            return


def _default_routes(sock: socket.socket, family: int, seq: int) -> list[bytes]:
    """The main table's default routes of `family`, each as its message body."""
    request = _RTMSG.pack(family, 0, 0, 0, 0, 0, 0, 0, 0)
    _send(sock, _RTM_GETROUTE, _NLM_F_DUMP, request, seq)
    found: list[bytes] = []
    for reply, body in _replies(sock, seq):
        if reply == _NLMSG_ERROR:
            code = -struct.unpack_from("=i", body)[0]
            raise OSError(code, f"route dump: {os.strerror(code)}")
        if reply != _RTM_NEWROUTE:
            continue
        route_family, dst_len, _, _, table, *_ = _RTMSG.unpack_from(body)
        attrs = dict(_attributes(body[_RTMSG.size :]))
        if _RTA_TABLE in attrs:
            table = struct.unpack_from("=I", attrs[_RTA_TABLE])[0]
        if route_family == family and dst_len == 0 and table == _MAIN_TABLE:
            found.append(body)
    return found
