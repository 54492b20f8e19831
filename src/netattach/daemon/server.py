"""The daemon's UNIX-socket server: HTTP/1.1, one CNI call per request (see `netattach.wire`).

Hand-rolled on asyncio streams because the protocol is one fixed request shape: a parser that
accepts exactly it, bounded at every step (request line, headers, body, time), answers anything
else with a 4xx that still carries a CNI error, and never lets one bad client take the daemon
down.

One read-only route sits beside it for operators (`netattach status`):

    GET /v1/pods[?namespace=NS&name=POD]   →   200 {JSON the `pods` callback returns}

answered by a callback the daemon gives; a query it refuses (`ValueError`) is a 400 with
`{"error": ...}`. Without the callback the route does not exist (404).
"""

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import socket
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from netattach import wire
from netattach.cni import errors, spec
from netattach.pods import dispatch

log = logging.getLogger("netattach.server")

Handler = Callable[[Mapping[str, str], bytes], Awaitable[dispatch.Reply]]
# A read-only query: its parameters in, a JSON-serialisable answer out.
ReadHandler = Callable[[Mapping[str, str]], Awaitable[object]]

PODS_PATH = "/v1/pods"
MAX_QUERY_PARAMS = 8

MAX_HEADER_LINE = 8192
MAX_HEADERS = 64
READ_TIMEOUT = 30.0

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    411: "Length Required",
    413: "Content Too Large",
    500: "Internal Server Error",
}


class BadRequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str]]:
    line = await reader.readline()
    if not line:
        raise ConnectionResetError("closed before a request line")
    if len(line) > MAX_HEADER_LINE or not line.endswith(b"\n"):
        raise BadRequestError(400, "request line too long")
    parts = line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequestError(400, f"malformed request line {line[:80]!r}")
    method, target = parts[0], parts[1]
    headers: dict[str, str] = {}
    for _ in range(MAX_HEADERS + 1):
        raw = await reader.readline()
        if len(raw) > MAX_HEADER_LINE or not raw.endswith(b"\n"):
            raise BadRequestError(400, "header line too long or truncated")
        if raw in (b"\r\n", b"\n"):
            return method, target, headers
        name, sep, value = raw.decode("latin-1").partition(":")
        if not sep:
            raise BadRequestError(400, f"malformed header {raw[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    raise BadRequestError(400, f"more than {MAX_HEADERS} headers")


@dataclasses.dataclass(frozen=True, slots=True)
class _Read:
    """A GET of a read-only route: which route, and its query parameters."""

    path: str
    query: dict[str, str]


def _parse_query(text: str) -> dict[str, str]:
    try:
        pairs = urllib.parse.parse_qsl(
            text, keep_blank_values=True, strict_parsing=bool(text), max_num_fields=MAX_QUERY_PARAMS
        )
    except ValueError as exc:
        raise BadRequestError(400, f"malformed query {text[:80]!r}: {exc}") from exc
    query: dict[str, str] = {}
    for key, value in pairs:
        if key in query:
            raise BadRequestError(400, f"query parameter {key[:40]!r} given twice")
        query[key] = value
    return query


async def _read_request(
    reader: asyncio.StreamReader, reads: Mapping[str, ReadHandler]
) -> tuple[dict[str, str], bytes] | _Read:
    method, target, headers = await _read_head(reader)
    path, _, query = target.partition("?")
    if method == "GET" and path in reads:
        if headers.get("content-length", "0") != "0" or "transfer-encoding" in headers:
            raise BadRequestError(400, f"a GET of {path} carries no body")
        return _Read(path, _parse_query(query))
    if target != wire.PATH:
        raise BadRequestError(
            404, f"no such endpoint {target[:80]!r} (the CNI endpoint is {wire.PATH})"
        )
    if method != "POST":
        raise BadRequestError(405, f"{method[:16]} is not allowed, POST a CNI call")
    length_text = headers.get("content-length")
    if length_text is None:
        raise BadRequestError(411, "Content-Length is required")
    if not length_text.isdigit():
        raise BadRequestError(400, f"invalid Content-Length {length_text[:20]!r}")
    length = int(length_text)
    if wire.too_large(length):
        raise BadRequestError(413, f"request of {length} bytes, more than {wire.MAX_REQUEST_BYTES}")
    body = await reader.readexactly(length)
    try:
        return wire.decode_request(body)
    except wire.WireError as exc:
        raise BadRequestError(400, str(exc)) from exc


def _json_body(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _response(status: int, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
        f"Content-Type: {wire.CONTENT_TYPE}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


class CNIServer:
    def __init__(
        self,
        handler: Handler,
        *,
        read_timeout: float = READ_TIMEOUT,
        pods: ReadHandler | None = None,
    ) -> None:
        self.handler = handler
        self.read_timeout = read_timeout
        self.reads: dict[str, ReadHandler] = {} if pods is None else {PODS_PATH: pods}
        self._server: asyncio.base_events.Server | None = None
        self.path: Path | None = None
        self._inflight: set[asyncio.Task[dispatch.Reply]] = set()
        self.idle = asyncio.Event()  # set while no call is under way
        self.idle.set()

    async def start(self, path: Path) -> None:
        # The directory holds the socket alone, readable by root only: whoever can connect
        # can attach networks to any pod.
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(path.parent, 0o700)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # noqa: ASYNC240 (start-up) -- a socket left by a daemon that died
        # The kernel's largest accept queue (net.core.somaxconn), not asyncio's 100: after a
        # node reboot hundreds of pods' shims connect at once, and a full queue refuses at once.
        self._server = await asyncio.start_unix_server(
            self._serve, path=str(path), limit=MAX_HEADER_LINE * 2, backlog=socket.SOMAXCONN
        )
        os.chmod(path, 0o600)
        self.path = path

    async def close(self, *, grace: float = 0.0) -> None:
        """Stop listening; give calls in flight up to `grace` seconds, then cancel the rest."""
        if self._server is not None:
            self._server.close()
        if self._inflight:
            _, pending = await asyncio.wait(set(self._inflight), timeout=grace or None)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5)
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 5)
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                request = await asyncio.wait_for(
                    _read_request(reader, self.reads), self.read_timeout
                )
            except BadRequestError as exc:
                failure: errors.CNIError = errors.DecodingFailureError(
                    f"bad request to the netattach daemon: {exc.message}"
                )
                reply = dispatch.error_reply(failure, spec.CURRENT_VERSION)
                writer.write(
                    _response(exc.status, wire.encode_reply(reply.exit_code, reply.stdout))
                )
                return
            except TimeoutError:
                failure = errors.TryAgainLaterError("request not received in time")
                reply = dispatch.error_reply(failure, spec.CURRENT_VERSION)
                writer.write(_response(408, wire.encode_reply(reply.exit_code, reply.stdout)))
                return
            except (
                asyncio.IncompleteReadError,
                ConnectionError,
                asyncio.LimitOverrunError,
                ValueError,
            ):
                return  # the client went away or sent a line past the limit: nobody to answer
            if isinstance(request, _Read):
                writer.write(await self._answer_read(request))
                return
            environ, stdin = request
            # The call runs as a task of its own, shielded: closing the server waits for it
            # (bounded) instead of cancelling a delegate half-way.
            call = asyncio.ensure_future(self._call(environ, stdin, writer))
            self._inflight.add(call)
            self.idle.clear()
            call.add_done_callback(self._call_done)
            await asyncio.shield(call)
        except asyncio.CancelledError:
            return  # shutting down: the client gets no reply and retries (the shim says 11)
        except Exception:  # one client's trouble never reaches the others
            log.exception("error serving a CNI request")
        finally:
            with contextlib.suppress(Exception):
                await writer.drain()
                writer.close()
                await writer.wait_closed()

    async def _call(
        self, environ: Mapping[str, str], stdin: bytes, writer: asyncio.StreamWriter
    ) -> dispatch.Reply:
        """Run the handler and write its reply in the same step of the same task. Handed back
        to `_serve` instead, the reply waited two turns of the event loop, behind whatever else
        had become ready meanwhile: on the Kubernetes feed, the watch event of the status patch
        the call had just made (~0.3 ms on the pod's start)."""
        reply = await self.handler(environ, stdin)
        if not writer.is_closing():  # closed: `_serve` was cancelled, there is nobody to tell
            writer.write(_response(200, wire.encode_reply(reply.exit_code, reply.stdout)))
        return reply

    def _call_done(self, call: asyncio.Task[dispatch.Reply]) -> None:
        self._inflight.discard(call)
        if not self._inflight:
            self.idle.set()

    async def _answer_read(self, request: _Read) -> bytes:
        try:
            answer = await self.reads[request.path](request.query)
        except ValueError as exc:
            return _response(400, _json_body({"error": str(exc)}))
        except Exception:
            log.exception("error answering GET %s", request.path)
            return _response(500, _json_body({"error": "internal error (see the daemon's log)"}))
        return _response(200, _json_body(answer))
