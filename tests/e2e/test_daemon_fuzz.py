"""Whatever reaches the daemon's socket, the daemon stays up and goes on attaching pods."""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor

import pytest

from netattach import wire
from netattach.shim.main import parse_http_reply
from tests.e2e.daemon_harness import DaemonNode, HttpReply, daemon, native_shim
from tests.e2e.harness import DEFAULT_NETWORK, NOTHING
from tests.e2e.socket_harness import STATUSES, request, send

pytestmark = pytest.mark.netns

__all__ = ["daemon", "native_shim"]  # the fixtures this module uses

SEED = 20261122
PAYLOADS = 200
COMMANDS = ["ADD", "DEL", "CHECK", "VERSION", "GC", "STATUS", "add", "", "BOGUS", "ADD\0"]
# Never a real namespace: a fuzzed ADD must not reach the host's or the node's.
NETNS = ["", "/nonexistent/na-fuzz", "relative/ns", "/proc/self/fd/999", "\udcff", "/" * 300]


def noise(rng: random.Random, most: int) -> bytes:
    return rng.randbytes(rng.randint(0, most))


def wire_call(rng: random.Random) -> bytes:
    """A request the server decodes, with a fuzzed CNI environment and config: half of them
    plausible enough to reach the orchestrator (a valid container ID and ifname, a netns that
    does not exist), the rest with any value in any variable."""
    if rng.random() < 0.5:
        env = {
            "CNI_COMMAND": rng.choice(["ADD", "DEL", "CHECK", "GC", "STATUS"]),
            "CNI_CONTAINERID": "na-fuzz-" + rng.randbytes(4).hex(),
            "CNI_NETNS": "/nonexistent/na-fuzz",
            "CNI_IFNAME": "eth0",
            "CNI_ARGS": rng.choice(
                ["", "IgnoreUnknown=1;K8S_POD_NAMESPACE=blue;K8S_POD_NAME=nope", "X=1"]
            ),
            "CNI_PATH": "/usr/lib/cni",
        }
    else:
        env = {
            "CNI_COMMAND": rng.choice(COMMANDS),
            "CNI_CONTAINERID": rng.choice(
                ["", "na-fuzz-" + rng.randbytes(4).hex(), "../x", "a" * 300]
            ),
            "CNI_NETNS": rng.choice(NETNS),
            "CNI_IFNAME": rng.choice(["", "eth0", "x" * 40, "a/b", "lo"]),
            "CNI_ARGS": rng.choice(
                ["", "K8S_POD_NAMESPACE=blue;K8S_POD_NAME=nope", "=;;=", "IgnoreUnknown=1;A", "\0"]
            ),
            "CNI_PATH": rng.choice(["", "/usr/lib/cni", ":::"]),
        }
        for name in rng.sample(sorted(env), rng.randint(0, len(env))):
            del env[name]
    stdin = rng.choice(
        [
            "",
            "{}",
            "[]",
            "null",
            '{"cniVersion": "1.0.0", "name": "netattach", "type": "netattach"}',
            '{"cniVersion": "9.9.9"}',
            '{"cniVersion": 1, "runtimeConfig": []}',
            '{"cniVersion": "1.1.0", "cni.dev/valid-attachments": "no"}',
            "[" * 5000,
            rng.randbytes(64).decode("latin-1"),
        ]
    )
    return request(json.dumps({"env": env, "stdin": stdin}).encode())


def corpus() -> list[bytes]:
    """PAYLOADS byte strings: noise, HTTP-shaped noise, bad requests and fuzzed CNI calls."""
    rng = random.Random(SEED)
    fixed = [
        b"",
        b"\r\n\r\n",
        b"GET / HTTP/1.1\r\n\r\n",
        b"POST /cni HTTP/1.1\r\n",  # headers never end
        b"POST /cni HTTP/1.1\r\nContent-Length: 10\r\n\r\n{}",  # body cut short
        b"POST /cni HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        b"POST /cni HTTP/1.1\r\nContent-Length: +2\r\n\r\n{}",
        b"POST /cni HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
        b"POST /cni HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        b"POST /cni HTTP/1.1\r\nNoColon\r\n\r\n",
        b"POST /cni HTTP/2\r\n\r\n",
        b"POST /cni HTTP/1.1 extra\r\n\r\n",
        b"POST " + b"/" * 20000 + b" HTTP/1.1\r\n\r\n",  # past the line limit
        b"POST /cni HTTP/1.1\r\n" + b"X: y\r\n" * 100 + b"\r\n",  # too many headers
        b"POST /cni HTTP/1.1\r\nX: " + b"y" * 9000 + b"\r\n\r\n",  # one header too long
        request(b"[" * 100000),  # nesting past the recursion limit
        request(b'{"env": {"CNI_COMMAND": "ADD"}, "stdin": "\\udcff"}'),
        request(b"\xff\xfe\x00\x00" * 10),
        request(b'{"env": [], "stdin": 3}'),
        request(b"{}", method="DELETE"),
        request(b"{}", target="/metrics"),
        request(b"{}", target="/cni?x=1"),
        request(b"{}", extra="Content-Length: 1\r\n"),  # two lengths: the last one wins
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS ClientHello
    ]
    payloads = list(fixed)
    while len(payloads) < PAYLOADS:
        kind = len(payloads) % 4
        if kind == 0:
            payloads.append(noise(rng, 4000))
        elif kind == 1:
            method = rng.choice(["POST", "GET", "PUT", "", "P\0ST", "POST POST"])
            target = rng.choice(["/cni", "/", "*", "/cni/../cni", "\xff"])
            payloads.append(request(noise(rng, 300), method=method, target=target))
        elif kind == 2:
            raw = bytearray(wire_call(rng))
            for _ in range(rng.randint(1, 8)):  # flip a few bytes anywhere
                raw[rng.randrange(len(raw))] = rng.randrange(256)
            payloads.append(bytes(raw))
        else:
            payloads.append(wire_call(rng))
    return payloads


def check_answer(payload: bytes, answer: bytes) -> None:
    """No answer (the request never ended), or one the shim reads as a CNI outcome."""
    if not answer:
        return
    status, body = parse_http_reply(answer)
    assert status in STATUSES, (payload[:200], answer[:300])
    code, stdout = wire.decode_reply(body)
    if status != 200 or code != 0:
        error = json.loads(stdout)
        assert code == 1, (payload[:200], answer[:300])
        assert isinstance(error["code"], int), answer[:300]
        assert isinstance(error["msg"], str), answer[:300]


def test_fuzzed_socket_requests_never_take_the_daemon_down(daemon: DaemonNode) -> None:
    cluster = daemon.cluster
    pod = cluster.pod("blue", "web", None)
    daemon.start()
    payloads = corpus()
    assert len(payloads) == PAYLOADS
    assert len(set(payloads)) == PAYLOADS

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda p: send(daemon.socket, p), payloads))

    for payload, answer in zip(payloads, answers, strict=True):
        check_answer(payload, answer)
    assert sum(1 for a in answers if a) > PAYLOADS // 2  # most were answered, not just dropped
    assert daemon.alive()
    assert daemon.http("/healthz") == HttpReply(200, "ok\n")
    assert daemon.metrics()  # still scrapes, whatever label values the fuzzing left
    assert "Traceback" not in daemon.log_text()

    added = daemon.shim("ADD", pod)
    assert added.rc == 0, (added, daemon.log_text())
    assert [e["name"] for e in cluster.status("blue", "web") or []] == [DEFAULT_NETWORK]
    deleted = daemon.shim("DEL", pod)
    assert (deleted.rc, deleted.out) == (0, None), deleted
    assert cluster.leftovers() == NOTHING
    assert daemon.alive()
    assert daemon.stop() == 0


CNI_COMMANDS = {"ADD", "DEL", "CHECK", "VERSION", "GC", "STATUS"}


def test_invalid_commands_do_not_grow_the_metrics_without_bound(daemon: DaemonNode) -> None:
    daemon.start()
    for n in range(50):
        call = wire.encode_request({"CNI_COMMAND": f"BOGUS{n}"}, b"{}")
        answer = send(daemon.socket, request(call))
        status, body = parse_http_reply(answer)
        assert status == 200
        assert json.loads(wire.decode_reply(body)[1])["code"] == 4  # invalid CNI_COMMAND

    commands = {
        dict(labels)["command"]
        for name, labels in daemon.metrics()
        if name == "netattach_cni_requests_total"
    }
    # The known commands, and at most one value standing for every other.
    assert len(commands - CNI_COMMANDS) <= 1, sorted(commands)
