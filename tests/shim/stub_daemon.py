"""A stub netattach daemon: a real UNIX socket server in a thread that records each request.

It speaks just enough HTTP/1.1 to read what the shim sends (headers, then `Content-Length` body)
and then does what the test chose: send `answer` as raw bytes, close without replying, or hang.
"""

import dataclasses
import socket
import threading
from pathlib import Path
from typing import Literal

from netattach import wire

Behaviour = Literal["answer", "close", "close-at-accept", "hang"]


@dataclasses.dataclass(frozen=True)
class Request:
    request_line: bytes
    headers: dict[str, str]
    body: bytes

    def decoded(self) -> tuple[dict[str, str], bytes]:
        return wire.decode_request(self.body)


def http_reply(body: bytes, status: str = "200 OK", *, chunked: bool = False) -> bytes:
    if chunked:
        half = len(body) // 2
        coded = b"".join(
            b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:half], body[half:]) if part
        )
        return (
            (
                f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                "Transfer-Encoding: chunked\r\n\r\n"
            ).encode()
            + coded
            + b"0\r\n\r\n"
        )
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


def wire_reply(exit_code: int, stdout: bytes, status: str = "200 OK") -> bytes:
    return http_reply(wire.encode_reply(exit_code, stdout), status)


class StubDaemon:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.behaviour: Behaviour = "answer"
        self.answer = wire_reply(0, b"{}")
        self.requests: list[Request] = []
        self._stop = threading.Event()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(path))
        self._server.listen(8)
        self._server.settimeout(0.05)
        self._thread = threading.Thread(target=self._serve, name="stub-daemon", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._server.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(10)
                if self.behaviour == "close-at-accept":
                    continue
                self.requests.append(self._read_request(conn))
                if self.behaviour == "answer":
                    conn.sendall(self.answer)
                elif self.behaviour == "hang":
                    self._stop.wait(30)

    @staticmethod
    def _read_request(conn: socket.socket) -> Request:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                raise AssertionError(f"the shim closed inside the headers: {data!r}")
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        request_line, *lines = head.split(b"\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers["content-length"])
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                break
            body += chunk
        return Request(request_line, headers, body)
