"""The daemon's socket server: one fixed request shape, everything else refused, never down."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netattach import wire
from netattach.daemon import server
from netattach.pods import dispatch


async def echo(environ: Mapping[str, str], stdin: bytes) -> dispatch.Reply:
    return dispatch.Reply(exit_code=0, stdout=json.dumps({"env": dict(environ)}).encode() + stdin)


async def exchange(path: Path, raw: bytes) -> tuple[int, dict[str, object] | None]:
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(raw)
    await writer.drain()
    writer.write_eof()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    if not data:
        return 0, None
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    return status, json.loads(body)


def request(body: bytes, *, path: str = "/cni", method: str = "POST") -> bytes:
    return (
        f"{method} {path} HTTP/1.1\r\nHost: netattach\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


T = TypeVar("T")


async def with_server(tmp: Path, work: Callable[[Path], Awaitable[T]]) -> T:
    srv = server.CNIServer(echo, read_timeout=1.0)
    sock = tmp / "run" / "netattach.sock"
    await srv.start(sock)
    try:
        return await work(sock)
    finally:
        await srv.close()


def test_a_cni_call_round_trips_and_the_socket_is_private(tmp_path: Path) -> None:
    body = wire.encode_request({"CNI_COMMAND": "ADD", "PATH": "/x"}, b'{"cniVersion":"1.0.0"}')

    async def work(sock: Path) -> tuple[int, dict[str, object] | None, int, int]:
        status, reply = await exchange(sock, request(body))
        return status, reply, sock.stat().st_mode & 0o777, sock.parent.stat().st_mode & 0o777

    status, reply, sock_mode, dir_mode = asyncio.run(with_server(tmp_path, work))
    assert status == 200
    assert reply is not None
    code, stdout = wire.decode_reply(json.dumps(reply).encode())
    assert code == 0
    assert stdout == b'{"env": {"CNI_COMMAND": "ADD"}}{"cniVersion":"1.0.0"}'
    assert (sock_mode, dir_mode) == (0o600, 0o700)


@pytest.mark.req("KUBE-EVENTS")
def test_idle_is_clear_exactly_while_a_call_is_under_way(tmp_path: Path) -> None:
    """What Events wait on (`KubeFeed.idle`): a pod's ADD goes before its Events."""
    release = asyncio.Event()
    seen: list[bool] = []

    async def handler(environ: Mapping[str, str], stdin: bytes) -> dispatch.Reply:
        await release.wait()
        return await echo(environ, stdin)

    async def main() -> None:
        srv = server.CNIServer(handler, read_timeout=1.0)
        sock = tmp_path / "run" / "netattach.sock"
        await srv.start(sock)
        try:
            seen.append(srv.idle.is_set())
            call = asyncio.create_task(exchange(sock, request(wire.encode_request({}, b"{}"))))
            for _ in range(200):
                if not srv.idle.is_set():
                    break
                await asyncio.sleep(0.01)
            seen.append(srv.idle.is_set())
            release.set()
            status, _ = await call
            assert status == 200
            seen.append(srv.idle.is_set())
        finally:
            await srv.close()

    asyncio.run(main())
    assert seen == [True, False, True]


@pytest.mark.parametrize(
    ("raw", "status", "says"),
    [
        (request(b"{}", path="/other"), 404, "no such endpoint"),
        (request(b"{}", method="GET"), 405, "GET is not allowed"),
        (b"POST /cni HTTP/1.1\r\nHost: x\r\n\r\n", 411, "Content-Length is required"),
        (b"POST /cni HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n", 413, "more than"),
        (request(b"not json"), 400, "not JSON"),
        (request(b'{"env": {"A": 1}}'), 400, "'env' must map names to strings"),
        (b"garbage\r\n\r\n", 400, "malformed request line"),
        (b"POST /cni HTTP/1.1\r\nno colon here\r\n\r\n", 400, "malformed header"),
    ],
)
def test_a_bad_request_gets_a_4xx_that_still_carries_a_cni_error(
    tmp_path: Path, raw: bytes, status: int, says: str
) -> None:
    async def work(sock: Path) -> tuple[int, dict[str, object] | None]:
        return await exchange(sock, raw)

    got_status, reply = asyncio.run(with_server(tmp_path, work))
    assert got_status == status
    assert reply is not None
    code, stdout = wire.decode_reply(json.dumps(reply).encode())
    error = json.loads(stdout)
    assert code == 1
    assert error["code"] == 6
    assert says in error["msg"]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(noise=st.binary(max_size=3000))
def test_fuzzed_requests_never_take_the_server_down(tmp_path: Path, noise: bytes) -> None:
    body = wire.encode_request({"CNI_COMMAND": "VERSION"}, b"{}")

    async def work(sock: Path) -> int:
        await exchange(sock, noise)
        status, _ = await exchange(sock, request(body))  # the next client is served
        return status

    assert asyncio.run(with_server(tmp_path, work)) == 200
