"""`cluster.api_writes`: the lean HTTP/1.1 writes, against small scripted servers (a request
in, the bytes a server would answer out), and over real TLS with a certificate made here.
The writes through the daemon's feed against the API server are tests/kube's."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import ssl
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
import lightkube
import pytest

from netattach.cluster import api_writes, kube_client
from tests import builders


@dataclass
class Received:
    line: str
    headers: dict[str, str]
    body: bytes
    connection: int


Answer = Callable[[Received], bytes | None]  # None: close the connection without a reply
SILENCE = b"<no reply; the connection stays open>"


@dataclass
class Server:
    answer: Answer
    received: list[Received] = field(default_factory=list)
    connections: int = 0
    url: str = ""
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        self.writers.append(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
                    return  # the client went, or the test ended
                line, *rest = head.decode("latin-1").split("\r\n")
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (h.partition(":") for h in rest if h)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                got = Received(line, headers, body, number)
                self.received.append(got)
                out = self.answer(got)
                if out is None:
                    return
                if out is SILENCE:
                    await reader.read()  # until the client goes
                    return
                writer.write(out)
                await writer.drain()
                if isinstance(out, _Closing):
                    return
        finally:
            writer.close()

    def drop_connections(self) -> None:
        for writer in self.writers:
            writer.close()


@asynccontextmanager
async def serving(answer: Answer, tls: ssl.SSLContext | None = None) -> AsyncIterator[Server]:
    server = Server(answer)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=tls)
    port = listener.sockets[0].getsockname()[1]
    server.url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    try:
        yield server
    finally:
        server.drop_connections()
        listener.close()
        await listener.wait_closed()


def reply(status: int, body: bytes = b"{}", *, headers: str = "", reason: str = "X") -> bytes:
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{headers}\r\n"
    ).encode() + body


def ok(_: Received) -> bytes:
    return reply(200, b'{"kind":"Pod"}')


def writer_for(
    url: str,
    *,
    auth: httpx2.Auth | None = None,
    ssl_context: ssl.SSLContext | None = None,
    fallback: httpx2.AsyncClient | None = None,
) -> api_writes.ApiWriter:
    return api_writes.ApiWriter(
        url,
        ssl_context=ssl_context,
        auth=auth,
        fallback=fallback or httpx2.AsyncClient(auth=auth, verify=ssl_context or True),
        error_reply=kube_client.api_error,
        max_connections=2,
    )


def run(body: Callable[[], object]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(20):
            await body()  # type: ignore[misc]

    asyncio.run(bounded())


def test_a_write_is_one_request_with_its_length_credentials_and_path_prefix() -> None:
    async def body() -> None:
        async with serving(ok) as server:
            auth = lightkube_bearer("s3cret")
            writer = writer_for(server.url + "/prefix/", auth=auth)
            got = await writer.send(
                "PATCH", "/api/v1/namespaces/a/pods/b?fieldManager=x", b'{"k":1}', "t/json"
            )
            await writer.aclose()
        assert got.status == 200
        assert got.body == b'{"kind":"Pod"}'
        (request,) = server.received
        assert request.line == "PATCH /prefix/api/v1/namespaces/a/pods/b?fieldManager=x HTTP/1.1"
        assert request.headers["authorization"] == "Bearer s3cret"
        assert request.headers["content-type"] == "t/json"
        assert request.headers["content-length"] == "7"
        assert request.headers["host"] == server.url.removeprefix("http://")
        assert request.body == b'{"k":1}'

    run(body)


def lightkube_bearer(token: str) -> httpx2.Auth:
    from lightkube.config import client_adapter

    return client_adapter.BearerAuth(token)


def test_writes_keep_their_connection_and_read_chunked_replies() -> None:
    chunked = (
        b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
        b'Transfer-Encoding: chunked\r\n\r\n4;ext=1\r\n{"a"\r\n3\r\n:1}\r\n0\r\nX-T: 1\r\n\r\n'
    )

    async def body() -> None:
        async with serving(lambda _: chunked) as server:
            writer = writer_for(server.url)
            bodies = [(await writer.send("POST", f"/e{i}", b"{}", "a/json")).body for i in range(3)]
            await writer.aclose()
        assert bodies == [b'{"a":1}'] * 3
        assert server.connections == 1
        assert [r.line.split()[1] for r in server.received] == ["/e0", "/e1", "/e2"]

    run(body)


def test_a_reply_ended_by_closing_is_read_whole_and_its_connection_not_kept() -> None:
    def answer(_: Received) -> bytes | None:
        return b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + b"x" * 100_000

    async def body() -> None:
        async with serving(lambda got: _then_close(answer(got))) as server:
            writer = writer_for(server.url)
            first = await writer.send("PATCH", "/a", b"{}", "a/json")
            second = await writer.send("PATCH", "/b", b"{}", "a/json")
            await writer.aclose()
        assert len(first.body) == len(second.body) == 100_000
        assert server.connections == 2

    run(body)


class _Closing(bytes):
    """An answer after which the scripted server closes the connection."""


def _then_close(data: bytes | None) -> bytes | None:
    return None if data is None else _Closing(data)


@pytest.mark.req("KUBE-STATUS")
def test_a_kept_connection_the_server_closed_is_replaced_once_without_a_lost_write() -> None:
    async def body() -> None:
        async with serving(ok) as server:
            writer = writer_for(server.url)
            await writer.send("PATCH", "/a", b"{}", "a/json")
            server.drop_connections()
            await asyncio.sleep(0.05)
            got = await writer.send("PATCH", "/b", b"{}", "a/json")
            await writer.aclose()
        assert got.status == 200
        assert [r.line.split()[1] for r in server.received] == ["/a", "/b"]
        assert server.connections == 2

    run(body)


@pytest.mark.req("KUBE-STATUS")
def test_error_replies_are_api_errors_with_the_servers_status() -> None:
    status = builders.failure_status(
        422, "Invalid", 'Pod "web" is invalid: metadata.uid: field is immutable'
    )

    def answer(got: Received) -> bytes:
        if got.line.startswith("PATCH /plain"):
            return (
                b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\n"
                b"Content-Length: 18\r\n\r\n404 page not found"
            )
        return reply(422, json.dumps(status).encode(), headers="Retry-After: 3\r\n")

    async def body() -> None:
        async with serving(answer) as server:
            writer = writer_for(server.url)
            with pytest.raises(lightkube.ApiError) as plain:
                await writer.send("PATCH", "/plain", b"{}", "a/json")
            with pytest.raises(lightkube.ApiError) as invalid:
                await writer.send("PATCH", "/pods/web", b"{}", "a/json")
            await writer.aclose()
        assert plain.value.status.code == 404
        assert plain.value.status.message == "404 page not found"
        assert plain.value.status.reason == "NotFound"
        assert invalid.value.status.code == 422
        assert invalid.value.status.reason == "Invalid"
        assert invalid.value.status.message == status["message"]
        assert kube_client.retry_after(invalid.value) == 3.0

    run(body)


@pytest.mark.req("KUBE-STATUS")
@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", httpx2.RemoteProtocolError),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", httpx2.RemoteProtocolError),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n", httpx2.RemoteProtocolError),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            httpx2.RemoteProtocolError,
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", httpx2.ReadError),
        (None, httpx2.ReadError),
    ],
    ids=["not-http", "bad-header", "bad-length", "bad-chunk", "cut-body", "no-reply"],
)
def test_a_broken_reply_is_a_transport_error_and_its_connection_is_dropped(
    answer: bytes | None, error: type[Exception]
) -> None:
    async def body() -> None:
        async with serving(lambda _: _then_close(answer)) as server:
            writer = writer_for(server.url)
            with pytest.raises(error):
                await writer.send("PATCH", "/a", b"{}", "a/json")
            server.answer = ok
            got = await writer.send("PATCH", "/b", b"{}", "a/json")
            await writer.aclose()
        assert got.status == 200
        assert server.connections == 2
        assert kube_client.is_transient(error("x"))

    run(body)


def test_no_server_is_a_connect_error() -> None:
    async def body() -> None:
        async with serving(ok) as server:
            url = server.url
        writer = writer_for(url)
        with pytest.raises(httpx2.ConnectError, match=r"cannot connect to 127\.0\.0\.1"):
            await writer.send("PATCH", "/a", b"{}", "a/json")

    run(body)


def test_a_cancelled_write_drops_its_connection() -> None:
    release = asyncio.Event()

    async def body() -> None:
        def answer(got: Received) -> bytes | None:
            return ok(got) if got.line.startswith("PATCH /b") else None

        async with serving(lambda got: answer(got) if release.is_set() else SILENCE) as server:
            writer = writer_for(server.url)
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2):
                    await writer.send("PATCH", "/a", b"{}", "a/json")
            release.set()
            got = await writer.send("PATCH", "/b", b"{}", "a/json")
            await writer.aclose()
        assert got.status == 200
        assert server.connections == 2

    run(body)


@pytest.mark.req("KUBE-STATUS")
def test_a_refused_token_is_read_again_from_its_file_and_sent_once_more(tmp_path: Path) -> None:
    from lightkube.config import client_adapter

    token = tmp_path / "token"
    token.write_text("old\n")
    wanted = ["old"]

    def answer(got: Received) -> bytes:
        good = got.headers.get("authorization") == f"Bearer {wanted[0]}"
        return ok(got) if good else reply(401, b"Unauthorized", reason="Unauthorized")

    async def body() -> None:
        async with serving(answer) as server:
            writer = writer_for(server.url, auth=client_adapter.BearerTokenFileAuth(str(token)))
            await writer.send("PATCH", "/a", b"{}", "a/json")
            wanted[0] = "new"
            token.write_text("new\n")
            await writer.send("PATCH", "/b", b"{}", "a/json")
            await writer.send("PATCH", "/c", b"{}", "a/json")
            await writer.aclose()
        sent = [(r.line.split()[1], r.headers["authorization"]) for r in server.received]
        assert sent == [
            ("/a", "Bearer old"),
            ("/b", "Bearer old"),
            ("/b", "Bearer new"),
            ("/c", "Bearer new"),
        ]

    run(body)


def test_a_refused_static_token_is_an_error_after_one_request() -> None:
    async def body() -> None:
        async with serving(lambda _: reply(401, b"{}", reason="Unauthorized")) as server:
            writer = writer_for(server.url, auth=lightkube_bearer("wrong"))
            with pytest.raises(lightkube.ApiError) as refused:
                await writer.send("PATCH", "/a", b"{}", "a/json")
            await writer.aclose()
        assert kube_client.status_code(refused.value) == 401
        assert len(server.received) == 1

    run(body)


def test_writes_go_through_a_proxy_the_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    async def body() -> None:
        async with serving(ok) as proxy:
            monkeypatch.setenv("HTTP_PROXY", proxy.url)
            monkeypatch.delenv("NO_PROXY", raising=False)
            monkeypatch.delenv("no_proxy", raising=False)
            writer = writer_for("http://api.example.invalid:6443")
            got = await writer.send("PATCH", "/a", b'{"x":1}', "a/json")
            await writer.aclose()
        assert got.status == 200
        (request,) = proxy.received
        assert request.line == "PATCH http://api.example.invalid:6443/a HTTP/1.1"
        assert request.body == b'{"x":1}'

    run(body)


def test_writes_over_tls_verify_the_server_with_the_context_given(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)
    trusting = ssl.create_default_context(cafile=str(cert))

    async def body() -> None:
        async with serving(ok, tls=served) as server:
            good = writer_for(server.url, ssl_context=trusting)
            got = await good.send("PATCH", "/a", b"{}", "a/json")
            await good.aclose()
            stranger = writer_for(server.url, ssl_context=ssl.create_default_context())
            with pytest.raises(httpx2.ConnectError, match="certificate verify failed"):
                await stranger.send("PATCH", "/b", b"{}", "a/json")
        assert got.status == 200
        assert [r.line.split()[1] for r in server.received] == ["/a"]

    run(body)


def test_each_write_is_a_debug_line_with_its_outcome(caplog: pytest.LogCaptureFixture) -> None:
    async def body() -> None:
        async with serving(lambda got: ok(got) if "/a" in got.line else reply(404)) as server:
            writer = writer_for(server.url)
            await writer.send("PATCH", "/a", b"{}", "a/json")
            with pytest.raises(lightkube.ApiError):
                await writer.send("POST", "/b", b"{}", "a/json")
            await writer.aclose()

    with caplog.at_level(logging.DEBUG, logger="netattach.cluster.api_writes"):
        run(body)
    lines = [r.getMessage() for r in caplog.records if r.name == "netattach.cluster.api_writes"]
    assert len(lines) == 2
    assert re.fullmatch(r"PATCH /a: 200 in [\d.]+ ms", lines[0])
    assert lines[1] == "POST /b: ApiError"


def test_a_writer_used_under_a_new_event_loop_makes_new_connections() -> None:
    """A loop's connections cannot serve another: a second `asyncio.run` (a restarted loop)
    writes on a connection of its own, and both writes arrive."""
    import threading

    received: list[str] = []
    ready = threading.Event()
    stop = threading.Event()
    url: list[str] = []

    def serve() -> None:
        async def main() -> None:
            async with serving(ok) as server:
                url.append(server.url)
                ready.set()
                await asyncio.to_thread(stop.wait)
                received.extend(f"{r.connection} {r.line.split()[1]}" for r in server.received)

        asyncio.run(main())

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        assert ready.wait(10)
        writer = writer_for(url[0])
        for path in ("/first", "/second"):
            asyncio.run(writer.send("PATCH", path, b"{}", "a/json"))
    finally:
        stop.set()
        thread.join(10)
    assert received == ["1 /first", "2 /second"]
