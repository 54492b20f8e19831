"""The pod's default route, changed inside the pod's namespace only (SEL-DEFROUTE).

An rtnetlink socket opened in the pod's namespace by a thread of its own, which enters the
namespace, opens the socket and ends (the socket stays bound to that namespace; no shared thread
ever changes its own); then one dump of the family's routes, one delete per default route of the
main table (the dumped message sent back, as `ip route flush` does) and one create, each
acknowledged, through `rtnetlink`: with pyroute2 (its import alone ~115 ms, `ssl` among it) a
thin-plugin ADD with `default-route` took ~0.2 s more (370-400 ms, now 115-190 ms on 2 cores).

Errors: `LookupError` when `ifname` is not in the namespace; `OSError` with the kernel's errno
when it refuses a request (ENETUNREACH for a gateway on no subnet of the interface).
"""

import ipaddress
import os
import socket
import struct
import threading
from collections.abc import Sequence

from netattach.netns import rtnetlink

_CLONE_NEWNET = 0x40000000
_RTPROT_BOOT = 3  # what `ip route add` sets
_RT_SCOPE_UNIVERSE = 0
_RTN_UNICAST = 1


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
                rtnetlink.acknowledged(
                    sock, rtnetlink.RTM_DELROUTE, rtnetlink.NLM_F_ACK, route, seq + offset
                )
            body = rtnetlink.RTMSG.pack(
                family,
                0,
                0,
                0,
                rtnetlink.MAIN_TABLE,
                _RTPROT_BOOT,
                _RT_SCOPE_UNIVERSE,
                _RTN_UNICAST,
                0,
            )
            body += rtnetlink.attribute(rtnetlink.RTA_GATEWAY, address.packed)
            body += rtnetlink.attribute(rtnetlink.RTA_OIF, struct.pack("=I", index))
            flags = rtnetlink.NLM_F_ACK | rtnetlink.NLM_F_CREATE | rtnetlink.NLM_F_EXCL
            rtnetlink.acknowledged(sock, rtnetlink.RTM_NEWROUTE, flags, body, seq + 999)


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
            found.append((rtnetlink.open_socket(), index))
        except BaseException as exc:  # handed to the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=inside, name="netattach-netns-route")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return found[0]


def _default_routes(sock: socket.socket, family: int, seq: int) -> list[bytes]:
    """The main table's default routes of `family`, each as its message body."""
    request = rtnetlink.RTMSG.pack(family, 0, 0, 0, 0, 0, 0, 0, 0)
    dumped = rtnetlink.dump(sock, rtnetlink.RTM_GETROUTE, rtnetlink.RTM_NEWROUTE, request, seq)
    found: list[bytes] = []
    for body in list(dumped):
        route = rtnetlink.main_default_route(body)
        if route is not None and route[0] == family:
            found.append(body)
    return found
