"""The API writes on a pod's critical path (its network-status, its Events), over lean
keep-alive HTTP/1.1 connections of their own.

Everything else the daemon asks of the API goes through lightkube and httpx. These writes are
one small request each, at every pod start and end, and they come after an idle moment: a
client's cost then grows with the code a request runs through, caches being cold. Measured on
this project's 2-core machine, a status PATCH to the in-repo API server every 0.2 s, medians
(`make bench-api-writes`): through httpx 6.0-8.0 ms of wall clock and 4.5-5.7 ms of the
daemon's CPU (its client, auth, pool, h11 and anyio layers); here 3.1-4.5 ms and 1.5-1.6 ms.
`make bench` shows it on a pod's ADD: thick mode on the Kubernetes feed, default network only,
+11.2 ms over the floor before, +8.4 after (`python -m bench.ab`, 60 rounds).

What it speaks: HTTP/1.1, a request sent whole in one write, the reply read by Content-Length,
chunked or to the connection's end; connections kept for the next write (at most
`max_connections` at once); TLS with the context lightkube made from the kubeconfig. The
credentials are lightkube's auth for the user: the header it sets is asked of it once and kept,
and a 401 is told to it as httpx would tell it, so it may offer others (a token read again
from its file, an exec plugin run again), tried once. A kept connection the server closed is
replaced once, when no byte of the reply came. Where the environment names a proxy for the
server, every write goes through `fallback` (the httpx client), which uses it.

Failures are raised as httpx's would be, so callers classify them alike: a transport failure
as `httpx2.TransportError`, an error reply as `lightkube.ApiError` (built by `error_reply`).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Final

import httpx2

log = logging.getLogger(__name__)

HEAD_MAX: Final = 64 * 1024  # a reply's status line and headers
BODY_MAX: Final = 16 * 1024 * 1024  # a reply's body
USER_AGENT: Final = "netattach"

ErrorReply = Callable[[int, list[tuple[str, str]], bytes, httpx2.Request], Exception]


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.used = False  # has carried a request: a failure before any reply may be its age

    def usable(self) -> bool:
        """Still open, and nothing unasked-for waiting (a server closing it says so first)."""
        return not self.writer.is_closing() and not self.reader.at_eof()

    def close(self) -> None:
        self.writer.close()


class _StaleConnectionError(Exception):
    """A kept connection failed before any byte of the reply: the server had closed it."""


class Reply:
    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body


class ApiWriter:
    """Writes to one API server; `send` is safe to call from many tasks at once."""

    def __init__(
        self,
        server: str,
        *,
        ssl_context: ssl.SSLContext | None,
        auth: httpx2.Auth | None,
        fallback: httpx2.AsyncClient,
        error_reply: ErrorReply,
        max_connections: int,
    ) -> None:
        url = urllib.parse.urlsplit(server)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"not an http(s) server URL: {server!r}")
        tls = url.scheme == "https"
        self._tls = (ssl_context or ssl.create_default_context()) if tls else None
        default_port = 443 if tls else 80
        self._host = url.hostname
        self._port = url.port or default_port
        host = f"[{self._host}]" if ":" in self._host else self._host
        self._host_header = host if self._port == default_port else f"{host}:{self._port}"
        self._prefix = url.path.rstrip("/")
        self._base = f"{url.scheme}://{self._host_header}{self._prefix}"
        self._auth = auth
        self._authorization: str | None = None  # what the auth last set
        self._fallback = fallback
        self._error_reply = error_reply
        self._max_connections = max_connections
        # Connections and their limit, of the event loop that made them (`_exchange`).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(max_connections)
        # A proxy the environment names for this server: httpx would use it, so this does not
        # go around it; every write then goes through httpx.
        self._proxied = _proxied(url.scheme, self._host)

    async def send(self, method: str, path: str, body: bytes, content_type: str) -> Reply:
        """One request (`path` from the API root, query included); the reply when it is a
        success, else the failure raised as described in the module doc."""
        if self._proxied:
            return await self._send_fallback(method, path, body, content_type)
        if not log.isEnabledFor(logging.DEBUG):
            return await self._send_direct(method, path, body, content_type)
        started = time.perf_counter()
        try:
            reply = await self._send_direct(method, path, body, content_type)
        except Exception as exc:
            log.debug("%s %s: %s", method, path, type(exc).__name__)
            raise
        took = (time.perf_counter() - started) * 1e3
        log.debug("%s %s: %d in %.1f ms", method, path, reply.status, took)
        return reply

    async def _send_direct(self, method: str, path: str, body: bytes, content_type: str) -> Reply:
        if self._auth is not None and self._authorization is None:
            self._authorization = await self._ask_auth(method, path, refused=False)
        reply = await self._send(method, path, body, content_type)
        if reply.status == 401 and self._auth is not None:
            # As httpx would: the auth is told of the refusal and may offer other credentials
            # (a token read again from its file, an exec plugin run again), tried once.
            self._authorization = await self._ask_auth(method, path, refused=True)
            if self._authorization is not None:
                reply = await self._send(method, path, body, content_type)
        if reply.status >= 400:
            request = httpx2.Request(method, self._base + path)
            raise self._error_reply(reply.status, reply.headers, reply.body, request)
        return reply

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    # -- internals ----------------------------------------------------------------------------

    async def _send(self, method: str, path: str, body: bytes, content_type: str) -> Reply:
        head = _head(
            method,
            self._prefix + path,
            host=self._host_header,
            authorization=self._authorization,
            content_type=content_type,
            length=len(body),
        )
        return await self._exchange(head + body)

    async def _ask_auth(self, method: str, path: str, *, refused: bool) -> str | None:
        """The Authorization header the auth sets on a request (`refused`: the one it sets
        after that request was answered 401; None when it has no other)."""
        assert self._auth is not None
        request = httpx2.Request(method, self._base + path)
        flow = self._auth.async_auth_flow(request)
        try:
            sent = await flow.__anext__()
            if refused:
                sent = await flow.asend(httpx2.Response(401, request=sent))
        except StopAsyncIteration:
            return None
        finally:
            await flow.aclose()
        return sent.headers.get("Authorization")

    async def _send_fallback(self, method: str, path: str, body: bytes, content_type: str) -> Reply:
        response = await self._fallback.request(
            method, self._base + path, content=body, headers={"Content-Type": content_type}
        )
        content = await response.aread()
        headers = list(response.headers.items())
        if response.status_code >= 400:
            raise self._error_reply(response.status_code, headers, content, response.request)
        return Reply(response.status_code, headers, content)

    async def _exchange(self, request: bytes) -> Reply:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            if self._loop is not None:
                # Another loop (a new `asyncio.run`) starts afresh; the old loop's connections
                # are left to it.
                self._idle = []
                self._slots = asyncio.Semaphore(self._max_connections)
            self._loop = loop
        async with self._slots:
            for _ in range(2):
                connection = await self._connection()
                try:
                    reply, keep = await _round_trip(connection, request)
                except _StaleConnectionError:
                    connection.close()
                    continue  # once more, on a new connection
                except BaseException:
                    connection.close()  # mid-exchange (a failure, a cancellation): unusable
                    raise
                if keep:
                    connection.used = True
                    self._idle.append(connection)
                else:
                    connection.close()
                return reply
            raise httpx2.RemoteProtocolError("the server closed two connections without a reply")

    async def _connection(self) -> _Connection:
        while self._idle:
            connection = self._idle.pop()
            if connection.usable():
                return connection
            connection.close()
        try:
            reader, writer = await asyncio.open_connection(
                self._host,
                self._port,
                ssl=self._tls,
                server_hostname=self._host if self._tls is not None else None,
                limit=HEAD_MAX,
            )
        except (OSError, ssl.SSLError) as exc:
            raise httpx2.ConnectError(
                f"cannot connect to {self._host_header}: {exc.strerror or exc}"
                if isinstance(exc, OSError)
                else f"cannot connect to {self._host_header}: {exc}"
            ) from exc
        return _Connection(reader, writer)


def _proxied(scheme: str, host: str) -> bool:
    proxies = urllib.request.getproxies()
    return bool(proxies.get(scheme) or proxies.get("all")) and not urllib.request.proxy_bypass(host)


def _head(
    method: str,
    target: str,
    *,
    host: str,
    authorization: str | None,
    content_type: str,
    length: int,
) -> bytes:
    lines = [
        f"{method} {target} HTTP/1.1",
        f"Host: {host}",
        f"User-Agent: {USER_AGENT}",
        "Accept: application/json",
        f"Content-Type: {content_type}",
        f"Content-Length: {length}",
    ]
    if authorization:
        lines.append(f"Authorization: {authorization}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _round_trip(connection: _Connection, request: bytes) -> tuple[Reply, bool]:
    """Send `request` whole and read the reply: (reply, whether the connection can carry
    another request)."""
    reader, writer = connection.reader, connection.writer
    try:
        writer.write(request)
        await writer.drain()
        status_line = await reader.readuntil(b"\r\n")
    except (OSError, asyncio.IncompleteReadError) as exc:
        if connection.used:
            raise _StaleConnectionError from exc
        raise httpx2.ReadError(f"the connection failed before the reply: {exc}") from exc
    except asyncio.LimitOverrunError as exc:
        raise httpx2.RemoteProtocolError("a reply's status line is too long") from exc
    try:
        status, keep = _status(status_line)
        headers = await _headers(reader)
        body, keep_body = await _body(reader, headers, status)
    except (OSError, asyncio.IncompleteReadError) as exc:
        raise httpx2.ReadError(f"the connection failed during the reply: {exc}") from exc
    except asyncio.LimitOverrunError as exc:
        raise httpx2.RemoteProtocolError("a reply's headers are too long") from exc
    if any(k == "connection" and "close" in v.lower() for k, v in headers):
        keep = False
    return Reply(status, headers, body), keep and keep_body


def _status(line: bytes) -> tuple[int, bool]:
    """The status code of a status line, and whether its HTTP version keeps connections."""
    parts = line.decode("latin-1").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise httpx2.RemoteProtocolError(f"not an HTTP/1.x status line: {line[:80]!r}")
    return int(parts[1]), parts[0] == "HTTP/1.1"


async def _headers(reader: asyncio.StreamReader) -> list[tuple[str, str]]:
    headers = []
    size = 0
    while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
        size += len(line)
        if size > HEAD_MAX:
            raise httpx2.RemoteProtocolError(f"a reply's headers over {HEAD_MAX} bytes")
        name, colon, value = line.decode("latin-1").partition(":")
        if not colon:
            raise httpx2.RemoteProtocolError(f"a malformed header line: {line[:80]!r}")
        headers.append((name.strip().lower(), value.strip()))
    return headers


async def _body(
    reader: asyncio.StreamReader, headers: list[tuple[str, str]], status: int
) -> tuple[bytes, bool]:
    """The body, and whether the connection is left at a request boundary."""
    if status in (204, 304) or 100 <= status < 200:
        return b"", True
    fields = dict(headers)
    if "chunked" in fields.get("transfer-encoding", "").lower():
        return await _chunked(reader), True
    length = fields.get("content-length")
    if length is None:
        return await _until_close(reader), False  # the body ends with the connection
    if not length.isdigit() or int(length) > BODY_MAX:
        raise httpx2.RemoteProtocolError(f"a bad Content-Length: {length[:40]!r}")
    return await reader.readexactly(int(length)), True


async def _chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    size_total = 0
    while True:
        line = await reader.readuntil(b"\r\n")
        size_text = line.split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise httpx2.RemoteProtocolError(f"a bad chunk size: {size_text[:40]!r}") from None
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":
                pass  # trailers
            return b"".join(parts)
        size_total += size
        if size_total > BODY_MAX:
            raise httpx2.RemoteProtocolError(f"a reply body over {BODY_MAX} bytes")
        parts.append(await reader.readexactly(size))
        if await reader.readexactly(2) != b"\r\n":
            raise httpx2.RemoteProtocolError("a chunk not ended by CRLF")


async def _until_close(reader: asyncio.StreamReader) -> bytes:
    chunks = []
    size = 0
    while chunk := await reader.read(HEAD_MAX):
        size += len(chunk)
        if size > BODY_MAX:
            raise httpx2.RemoteProtocolError(f"a reply body over {BODY_MAX} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


__all__ = ["ApiWriter", "Reply"]
