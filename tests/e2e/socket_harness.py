"""Raw requests on the daemon's UNIX socket, for the tests that write to it byte by byte."""

from __future__ import annotations

import socket
from pathlib import Path

# What the server answers a request it can read at all (daemon/server.py).
STATUSES = {200, 400, 404, 405, 408, 411, 413}


def request(body: bytes, *, method: str = "POST", target: str = "/cni", extra: str = "") -> bytes:
    """An HTTP/1.1 request of `body` as the shim sends it, `extra` header lines added."""
    head = f"{method} {target} HTTP/1.1\r\nHost: netattach\r\n{extra}"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode("utf-8", "surrogateescape") + body


def send(path: Path, payload: bytes) -> bytes:
    """`payload` on a fresh connection, then EOF; everything the daemon answers."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(20)
        sock.connect(str(path))
        try:
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # it answered early (413, 400) and closed: its answer is still there to read
        chunks: list[bytes] = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except ConnectionResetError:
            pass
        return b"".join(chunks)
