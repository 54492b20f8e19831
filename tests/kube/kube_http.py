"""A small stdlib HTTP client for the API server (fake or real): requests and watch streams.

The tests of the fake talk HTTP through this, so that they exercise exactly what a client sees and
run unchanged against a real API server (TLS and credentials come from `api.Connection`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import queue
import socket
import threading
from collections.abc import Mapping
from types import TracebackType
from typing import Any
from urllib.parse import urlencode, urlsplit

from tests.kube.api import Connection, Obj

_USE_CONNECTION_TOKEN: Any = object()


@dataclasses.dataclass
class HttpResponse:
    status: int
    headers: dict[str, str]
    """Header names in lower case."""
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclasses.dataclass(frozen=True)
class WatchEvent:
    type: str
    object: Obj

    @property
    def name(self) -> str:
        return str(self.object.get("metadata", {}).get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.object.get("metadata", {}).get("namespace", ""))

    @property
    def resource_version(self) -> str:
        return str(self.object.get("metadata", {}).get("resourceVersion", ""))


class KubeHttp:
    """Requests to one API server. `token` overrides the connection's bearer token per call
    (None: send no Authorization header)."""

    def __init__(self, conn: Connection, *, timeout: float = 10.0) -> None:
        self.conn = conn
        self.timeout = timeout
        split = urlsplit(conn.base_url)
        self._https = split.scheme == "https"
        self._host = split.hostname or "127.0.0.1"
        self._port = split.port or (443 if self._https else 80)
        self._base_path = split.path.rstrip("/")

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=timeout, context=self.conn.ssl_context
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _headers(
        self, token: Any, content_type: str | None, extra: Mapping[str, str] | None
    ) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "netattach-tests"}
        token = self.conn.token if token is _USE_CONNECTION_TOKEN else token
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        if content_type is not None:
            headers["Content-Type"] = content_type
        headers.update(extra or {})
        return headers

    def url(self, path: str, query: Mapping[str, str] | None = None) -> str:
        target = self._base_path + path
        if query:
            target += "?" + urlencode(dict(query))
        return target

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str | None = None,
        token: Any = _USE_CONNECTION_TOKEN,
        headers: Mapping[str, str] | None = None,
    ) -> HttpResponse:
        data: bytes | None = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            content_type = content_type or "application/json"
        conn = self._connect(self.timeout)
        try:
            conn.request(
                method,
                self.url(path, query),
                body=data,
                headers=self._headers(token, content_type, headers),
            )
            response = conn.getresponse()
            payload = response.read()
            return HttpResponse(
                response.status, {k.lower(): v for k, v in response.getheaders()}, payload
            )
        finally:
            conn.close()

    def get(self, path: str, **query: str) -> HttpResponse:
        return self.request("GET", path, query=query or None)

    def post(self, path: str, body: Any) -> HttpResponse:
        return self.request("POST", path, body=body)

    def put(self, path: str, body: Any) -> HttpResponse:
        return self.request("PUT", path, body=body)

    def patch(self, path: str, body: Any, content_type: str) -> HttpResponse:
        return self.request("PATCH", path, body=body, content_type=content_type)

    def delete(self, path: str, body: Any = None) -> HttpResponse:
        return self.request("DELETE", path, body=body)

    def watch(
        self,
        path: str,
        query: Mapping[str, str] | None = None,
        *,
        token: Any = _USE_CONNECTION_TOKEN,
    ) -> WatchStream:
        """Open `path?watch=true&...`; the stream reads events in a background thread."""
        conn = self._connect(self.timeout)
        params = {"watch": "true", **(query or {})}
        conn.request("GET", self.url(path, params), headers=self._headers(token, None, None))
        response = conn.getresponse()
        return WatchStream(conn, response)


class WatchStream:
    """An open watch. `status` is the HTTP status; when it is not 200, `error` holds the body.
    `ended` becomes "closed" (the server ended the stream with its terminating chunk) or "cut"
    (the connection broke mid-stream) once the stream is over."""

    def __init__(
        self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse
    ) -> None:
        self._conn = conn
        self._response = response
        self.status = response.status
        self.headers = {k.lower(): v for k, v in response.getheaders()}
        self.error: Any = None
        self.ended: str | None = None
        self._events: queue.Queue[WatchEvent | None] = queue.Queue()
        self._done = threading.Event()
        if self.status != 200:
            body = response.read()
            self.error = json.loads(body) if body else None
            self.ended = "closed"
            self._done.set()
            self._events.put(None)
            conn.close()
            return
        if conn.sock is not None:
            conn.sock.settimeout(None)
        if response.getheader("Transfer-Encoding", "").lower() != "chunked":
            raise AssertionError("a watch response must use chunked transfer encoding")
        self._thread = threading.Thread(target=self._read, name="watch-reader", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        """Decode the chunked body by hand, to tell a clean end from a cut connection."""
        ended = "cut"
        fp = self._response.fp
        buffer = b""
        try:
            while True:
                size_line = fp.readline()
                if not size_line:
                    break  # EOF before the terminating chunk
                size = int(size_line.split(b";")[0].strip(), 16)
                if size == 0:
                    while fp.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    ended = "closed"
                    break
                data = fp.read(size)
                if len(data) < size:
                    break
                fp.readline()  # the CRLF after the chunk
                buffer += data
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        doc = json.loads(line)
                        self._events.put(WatchEvent(doc["type"], doc["object"]))
        except (OSError, ValueError):
            ended = "cut"
        self.ended = ended
        self._done.set()
        self._events.put(None)

    def next(self, timeout: float = 5.0) -> WatchEvent | None:
        """The next event, or None on timeout or at the end of the stream."""
        try:
            event = self._events.get(timeout=timeout)
        except queue.Empty:
            return None
        if event is None:
            self._events.put(None)  # keep reporting the end
        return event

    def expect(self, timeout: float = 5.0) -> WatchEvent:
        event = self.next(timeout)
        if event is None:
            raise AssertionError(
                f"no watch event within {timeout}s (stream {self.ended or 'open'})"
            )
        return event

    def take(self, count: int, timeout: float = 5.0) -> list[WatchEvent]:
        return [self.expect(timeout) for _ in range(count)]

    def drain(self, quiet: float = 0.3) -> list[WatchEvent]:
        """The events that arrive until none has for `quiet` seconds."""
        events = []
        while (event := self.next(quiet)) is not None:
            events.append(event)
        return events

    def wait_ended(self, timeout: float = 5.0) -> str | None:
        """Wait for the end of the stream; "closed", "cut", or None if still open."""
        self._done.wait(timeout)
        return self.ended

    def close(self) -> None:
        sock = self._conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._conn.close()

    def __enter__(self) -> WatchStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
