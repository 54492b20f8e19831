"""The daemon's UNIX-socket server: HTTP/1.1, one CNI call per request (see `netattach.wire`).

Hand-rolled on asyncio streams because the protocol is one fixed request shape: a parser that
accepts exactly it, bounded at every step (request line, headers, body, time), answers anything
else with a 4xx that still carries a CNI error, and never lets one bad client take the daemon
down.
"""

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from netattach import wire
from netattach.cni import errors, spec
from netattach.daemon import dispatch

log = logging.getLogger("netattach.server")

Handler = Callable[[Mapping[str, str], bytes], Awaitable[dispatch.Reply]]

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


async def _read_request(reader: asyncio.StreamReader) -> tuple[dict[str, str], bytes]:
    method, target, headers = await _read_head(reader)
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
    if length > wire.MAX_REQUEST_BYTES:
        raise BadRequestError(413, f"request of {length} bytes, more than {wire.MAX_REQUEST_BYTES}")
    body = await reader.readexactly(length)
    try:
        return wire.decode_request(body)
    except wire.WireError as exc:
        raise BadRequestError(400, str(exc)) from exc


def _response(status: int, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
        f"Content-Type: {wire.CONTENT_TYPE}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


class CNIServer:
    def __init__(self, handler: Handler, *, read_timeout: float = READ_TIMEOUT) -> None:
        self.handler = handler
        self.read_timeout = read_timeout
        self._server: asyncio.base_events.Server | None = None
        self.path: Path | None = None
        self._inflight: set[asyncio.Task[dispatch.Reply]] = set()

    async def start(self, path: Path) -> None:
        # The directory holds the socket alone, readable by root only: whoever can connect
        # can attach networks to any pod.
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(path.parent, 0o700)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # noqa: ASYNC240 (start-up) -- a socket left by a daemon that died
        self._server = await asyncio.start_unix_server(
            self._serve, path=str(path), limit=MAX_HEADER_LINE * 2
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
                environ, stdin = await asyncio.wait_for(_read_request(reader), self.read_timeout)
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
            # The call runs as a task of its own, shielded: closing the server waits for it
            # (bounded) instead of cancelling a delegate half-way.
            call = asyncio.ensure_future(self.handler(environ, stdin))
            self._inflight.add(call)
            call.add_done_callback(self._inflight.discard)
            reply = await asyncio.shield(call)
            writer.write(_response(200, wire.encode_reply(reply.exit_code, reply.stdout)))
        except asyncio.CancelledError:
            return  # shutting down: the client gets no reply and retries (the shim says 11)
        except Exception:  # one client's trouble never reaches the others
            log.exception("error serving a CNI request")
        finally:
            with contextlib.suppress(Exception):
                await writer.drain()
                writer.close()
                await writer.wait_closed()
