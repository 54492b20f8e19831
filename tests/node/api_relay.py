"""A TCP relay from a node's network namespace to the API server on the host's loopback.

The real node of tests/node (tests/node/real_node.py) runs its kubelet, containerd and the
DaemonSet's host-network pod in a network namespace of its own, while the control plane listens
on 127.0.0.1 of the host's. This process plays the two paths a node has to the API server:

- the kubelet's kubeconfig names `https://127.0.0.1:PORT`: the relay listens there in the node's
  namespace, the same port as the server's, so one kubeconfig (and the server certificate's
  127.0.0.1) serves both sides;
- a pod's in-cluster config names the `kubernetes` Service (`KUBERNETES_SERVICE_HOST` = its
  ClusterIP, port 443, which the server certificate also names): where kube-proxy would DNAT it,
  the relay listens on that address, held by a dummy link of the node.

    python -m tests.node.api_relay --netns PATH --to 127.0.0.1:PORT --listen ADDR:PORT ...

The listening sockets are made with the process's only thread in the node's namespace, then the
thread returns to the host's namespace (where every connection to the server is made); "ready"
on stdout says they are listening. Bytes are copied both ways, one thread per direction; SIGTERM
ends the process.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import socket
import sys
import threading
from collections.abc import Sequence

CLONE_NEWNET = 0x40000000
BUFFER = 65536


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


def listen_in(netns: str, addresses: Sequence[tuple[str, int]]) -> list[socket.socket]:
    """Listening sockets bound in the namespace at `netns` (a socket keeps the namespace it
    was made in); the calling thread is back in its own namespace on return. Only for a
    process's single thread, before it starts others."""
    assert threading.active_count() == 1, "setns would move a thread others share"
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(netns, os.O_RDONLY)
    try:
        _setns(target)
        try:
            listeners = []
            for host, port in addresses:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, port))
                sock.listen(128)
                listeners.append(sock)
            return listeners
        finally:
            _setns(home)
    finally:
        os.close(target)
        os.close(home)


def _copy(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(BUFFER):
            sink.sendall(data)
    except OSError:
        pass  # a reset: the other side is shut below
    finally:
        for sock, how in ((sink, socket.SHUT_WR), (source, socket.SHUT_RD)):
            with contextlib.suppress(OSError):
                sock.shutdown(how)


def _serve_one(client: socket.socket, target: tuple[str, int]) -> None:
    try:
        upstream = socket.create_connection(target, timeout=10)
    except OSError:
        client.close()
        return
    upstream.settimeout(None)
    for sock in (client, upstream):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    back = threading.Thread(target=_copy, args=(upstream, client), daemon=True)
    back.start()
    _copy(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _accept(listener: socket.socket, target: tuple[str, int]) -> None:
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_serve_one, args=(client, target), daemon=True).start()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--netns", required=True, help="the node's network namespace (a path)")
    parser.add_argument("--to", required=True, type=_address, help="the server: HOST:PORT")
    parser.add_argument("--listen", required=True, action="append", type=_address)
    args = parser.parse_args(argv)
    listeners = listen_in(args.netns, args.listen)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    for listener in listeners:
        threading.Thread(target=_accept, args=(listener, args.to), daemon=True).start()
    print("ready", flush=True)
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
