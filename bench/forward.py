"""A TCP forwarder from the host's loopback into the benchmark's node namespace.

    nsenter --net=<node> -- python -m bench.forward --fd N --port P

The real API server of `bench.side_by_side` listens on 127.0.0.1:P *inside* the node namespace,
where the contenders run and dial it directly, as a node's components dial theirs: no hop of ours
sits in what is timed. The harness itself (creating the namespace, NADs and pods, the control
plane's readiness checks) runs in the host namespace; its socket, listening on the host's
127.0.0.1:P, is handed to this process as descriptor N. The process runs in the node namespace,
so each connection it accepts there is joined to a new connection to 127.0.0.1:P of the node:
no `setns` anywhere, one process, and the same kubeconfig (server https://127.0.0.1:P) works on
both sides. TLS passes through untouched. The process ends with its parent (PR_SET_PDEATHSIG, set
by `guard.Guard.spawn`) or on SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import sys
import threading

CHUNK = 65536
CONNECT_TIMEOUT = 10.0


def pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy until `source` ends, then end `sink`'s writing side (the other way goes on)."""
    try:
        while data := source.recv(CHUNK):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def join(client: socket.socket, port: int) -> None:
    """One accepted connection, joined to the node's 127.0.0.1:`port` until both ends close."""
    with client:
        try:
            upstream = socket.create_connection(("127.0.0.1", port), timeout=CONNECT_TIMEOUT)
        except OSError:
            return
        with upstream:
            upstream.settimeout(None)
            back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
            back.start()
            pump(client, upstream)
            back.join()


def serve(listener: socket.socket, port: int) -> None:
    while True:
        client, _ = listener.accept()
        threading.Thread(target=join, args=(client, port), daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.forward", description=__doc__)
    parser.add_argument("--fd", type=int, required=True, help="the listening socket, inherited")
    parser.add_argument("--port", type=int, required=True, help="the node's 127.0.0.1 port")
    args = parser.parse_args(argv)
    listener = socket.socket(fileno=args.fd)
    try:
        serve(listener, args.port)
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
