"""The few rtnetlink messages netattach sends itself, on a plain `AF_NETLINK` socket.

pyroute2 is the netlink library of the rest of `netns/`; these two jobs stay off it because they
run on the thin plugin's path, where its import alone (~115 ms, `ssl` among it) cost 0.2-0.5 s
at every ADD: reading the node's addresses and default gateways (`host`, SEC-NODE) and setting a
pod's default route (`routes`, SEL-DEFROUTE). Only what they need is encoded and decoded here:
message headers, route and address messages, attributes, dumps and acknowledged requests.
"""

import os
import socket
import struct
from collections.abc import Iterator

NETLINK_ROUTE = 0
NLMSG_ERROR = 2
NLMSG_DONE = 3
RTM_NEWLINK = 16
RTM_GETLINK = 18
RTM_NEWADDR = 20
RTM_GETADDR = 22
RTM_NEWROUTE = 24
RTM_DELROUTE = 25
RTM_GETROUTE = 26
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
NLM_F_DUMP = 0x300
RTA_OIF = 4
RTA_GATEWAY = 5
RTA_MULTIPATH = 9
RTA_TABLE = 15
MAIN_TABLE = 254
HEADER = struct.Struct("=LHHLL")  # nlmsghdr: length, type, flags, sequence, port
# rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags
RTMSG = struct.Struct("=BBBBBBBBI")
RTATTR = struct.Struct("=HH")  # length, type
_RECV_SIZE = 1 << 16


def open_socket() -> socket.socket:
    """An rtnetlink socket of the calling thread's network namespace, bound."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
    sock.bind((0, 0))
    return sock


def attributes(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(type, value) of each attribute packed in `data`, the type's flag bits cleared."""
    offset = 0
    while offset + RTATTR.size <= len(data):
        length, kind = RTATTR.unpack_from(data, offset)
        if length < RTATTR.size:
            return
        yield kind & 0x3FFF, data[offset + RTATTR.size : offset + length]
        offset += (length + 3) & ~3


def attribute(kind: int, value: bytes) -> bytes:
    length = RTATTR.size + len(value)
    return RTATTR.pack(length, kind) + value + b"\0" * (-length % 4)


def send(sock: socket.socket, kind: int, flags: int, body: bytes, seq: int) -> None:
    sock.send(HEADER.pack(HEADER.size + len(body), kind, NLM_F_REQUEST | flags, seq, 0) + body)


def replies(sock: socket.socket, seq: int) -> Iterator[tuple[int, bytes]]:
    """(type, body) of each reply to request `seq`, up to its end (DONE, or an error/ack)."""
    while True:
        data = sock.recv(_RECV_SIZE)
        if not data:
            return
        offset = 0
        while offset + HEADER.size <= len(data):
            length, kind, _, sequence, _ = HEADER.unpack_from(data, offset)
            if length < HEADER.size:
                return
            body = data[offset + HEADER.size : offset + length]
            offset += (length + 3) & ~3
            if sequence != seq:
                continue  # a late reply to an earlier request
            if kind == NLMSG_DONE:
                return
            yield kind, body
            if kind == NLMSG_ERROR:
                return


def _error(body: bytes) -> int:
    return int(-struct.unpack_from("=i", body)[0])


def dump(sock: socket.socket, request: int, reply: int, body: bytes, seq: int) -> Iterator[bytes]:
    """The bodies of the `reply` messages a dump `request` gets; the kernel's refusal as
    OSError."""
    send(sock, request, NLM_F_DUMP, body, seq)
    for kind, answer in replies(sock, seq):
        if kind == NLMSG_ERROR:
            code = _error(answer)
            raise OSError(code, f"rtnetlink dump {request}: {os.strerror(code)}")
        if kind == reply:
            yield answer


def acknowledged(sock: socket.socket, kind: int, flags: int, body: bytes, seq: int) -> None:
    """Send a request and wait for its acknowledgement; the kernel's refusal as OSError."""
    send(sock, kind, flags, body, seq)
    for reply, answer in replies(sock, seq):
        if reply == NLMSG_ERROR:
            code = _error(answer)
            if code:
                raise OSError(code, os.strerror(code))
            return


def main_default_route(body: bytes) -> tuple[int, dict[int, bytes]] | None:
    """(family, attributes) of a route message that is a default route of the main table (IPv4
    or IPv6); None for any other route."""
    family, dst_len, _, _, table, *_ = RTMSG.unpack_from(body)
    attrs = dict(attributes(body[RTMSG.size :]))
    if RTA_TABLE in attrs:
        table = struct.unpack_from("=I", attrs[RTA_TABLE])[0]
    if dst_len != 0 or table != MAIN_TABLE or family not in (socket.AF_INET, socket.AF_INET6):
        return None
    return family, attrs
