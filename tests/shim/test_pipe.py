"""The shim is a pipe: the CNI call goes to the daemon as it came, the reply comes back as it was.

Every test runs against each form the shim ships in (source, zipapp, self-contained executable).
"""

import json
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from netattach import wire
from netattach.cni import spec
from tests.shim.conftest import Shim
from tests.shim.stub_daemon import Behaviour, StubDaemon, http_reply, wire_reply

CNI_ENV = {
    "CNI_CONTAINERID": "c0ffee",
    "CNI_NETNS": "/var/run/netns/cni-1234",
    "CNI_IFNAME": "eth0",
    "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_UID=u1",
    "CNI_PATH": "/opt/cni/bin",
}
RESULT = (
    b'{\n  "cniVersion": "1.0.0",\n  "interfaces": [{"name": "eth0"}],\n  "x": "\xc3\xa9\xff"\n}\n'
)
ERROR = b'{"cniVersion": "1.0.0", "code": 3, "msg": "pod default/web not found"}'
DEFAULT_SOCKET = "/run/netattach/netattach.sock"


def config(socket_path: Path | str | None, **fields: object) -> bytes:
    raw: dict[str, object] = {"cniVersion": "1.0.0", "name": "netattach", "type": "netattach"}
    if socket_path is not None:
        raw["daemonSocket"] = str(socket_path)
    raw.update(fields)
    return json.dumps(raw).encode()


def error_of(stdout: bytes) -> dict[str, object]:
    raw = json.loads(stdout)
    assert isinstance(raw, dict)
    return raw


def try_again_later(
    done: subprocess.CompletedProcess[bytes], daemon_socket: object
) -> dict[str, object]:
    """The shim's error reply: exit 1, CNI code 11 (try again later), its message naming the
    daemon's socket."""
    assert done.returncode == 1, done.stderr
    error = error_of(done.stdout)
    assert error["code"] == 11
    assert str(daemon_socket) in str(error["msg"])
    return error


@pytest.mark.parametrize(("exit_code", "stdout"), [(0, RESULT), (1, ERROR)])
def test_add_is_forwarded_and_the_reply_printed_byte_for_byte(
    shim: Shim, daemon: StubDaemon, exit_code: int, stdout: bytes
) -> None:
    daemon.answer = wire_reply(exit_code, stdout)
    stdin = config(daemon.path)
    done = shim.run(
        "ADD", stdin, {**CNI_ENV, "HOME": "/root", "SECRET_TOKEN": "s3cr3t", "CNIX": "no"}
    )

    assert (done.returncode, done.stdout) == (exit_code, stdout), done.stderr
    [request] = daemon.requests
    assert request.request_line == b"POST /cni HTTP/1.1"
    assert request.headers["content-type"] == wire.CONTENT_TYPE
    assert request.headers["connection"] == "close"
    assert request.headers["host"]
    assert int(request.headers["content-length"]) == len(request.body)
    env, forwarded_stdin = request.decoded()
    # Only CNI_* travels: not HOME, not secrets, not the shim's own NETATTACH_SHIM_TIMEOUT.
    assert env == {**CNI_ENV, "CNI_COMMAND": "ADD"}
    assert forwarded_stdin == stdin


@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK", "GC", "STATUS"])
def test_every_command_but_version_goes_to_the_daemon(
    shim: Shim, daemon: StubDaemon, command: str
) -> None:
    daemon.answer = wire_reply(0, b"")
    done = shim.run(command, config(daemon.path), CNI_ENV)

    assert (done.returncode, done.stdout) == (0, b""), done.stderr
    [request] = daemon.requests
    assert request.decoded()[0]["CNI_COMMAND"] == command


@pytest.mark.req("CNI-VERSION")
@pytest.mark.parametrize(
    ("stdin", "cni_version"),
    [
        (b'{"cniVersion": "0.4.0"}', "0.4.0"),
        (b'{"cniVersion": "1.1.0", "daemonSocket": "relative"}', "1.1.0"),
        (b"", spec.CURRENT_VERSION),
        (b"not json", spec.CURRENT_VERSION),
    ],
)
def test_version_is_answered_without_a_daemon(
    shim: Shim, socket_dir: Path, stdin: bytes, cni_version: str
) -> None:
    done = shim.run("VERSION", stdin)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "cniVersion": cni_version,
        "supportedVersions": list(spec.VERSIONS),
    }


@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK"])
def test_no_daemon_is_try_again_later_naming_the_socket(
    shim: Shim, socket_dir: Path, command: str
) -> None:
    # DEL too: the runtime retries a failed DEL; a DEL reported done when nothing was deleted
    # would leak the pod's attachments.
    missing = socket_dir / "netattach.sock"
    done = shim.run(command, config(missing), CNI_ENV)

    assert done.returncode == 1, done.stderr
    error = error_of(done.stdout)
    assert error["code"] == 11
    assert error["cniVersion"] == "1.0.0"
    assert str(missing) in str(error["msg"])
    assert "connect" in str(error["msg"])


def test_a_socket_nobody_listens_on_is_try_again_later(shim: Shim, socket_dir: Path) -> None:
    path = socket_dir / "netattach.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as bound_not_listening:
        bound_not_listening.bind(str(path))
        done = shim.run("DEL", config(path), CNI_ENV)

    try_again_later(done, path)


@pytest.mark.req("CLU-NODES")
@pytest.mark.parametrize("left", ["no socket", "a socket nobody listens on"])
def test_a_daemon_restarting_is_waited_for(shim: Shim, socket_dir: Path, left: str) -> None:
    """A rolling update of the DaemonSet: the old daemon is gone (SIGTERM removes its socket;
    SIGKILL leaves it with nobody listening) and the new one binds the socket a moment later.
    A call in between waits for it, and is answered by it."""
    path = socket_dir / "netattach.sock"
    old = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if left != "no socket":
        old.bind(str(path))
    started: list[StubDaemon] = []

    def restart() -> None:
        time.sleep(0.4)
        old.close()
        path.unlink(missing_ok=True)
        started.append(StubDaemon(path))

    restarting = threading.Thread(target=restart)
    restarting.start()
    try:
        done = shim.run("ADD", config(path), {**CNI_ENV, "NETATTACH_SHIM_DAEMON_WAIT": "10"})
    finally:
        restarting.join()
    (daemon,) = started
    try:
        assert (done.returncode, done.stdout) == (0, b"{}"), done.stdout + done.stderr
        [request] = daemon.requests
        assert request.decoded()[0]["CNI_COMMAND"] == "ADD"
    finally:
        daemon.close()


@pytest.mark.parametrize(
    ("wait", "why"),
    [
        ("0.3", "connect failed: No such file or directory"),  # waited, then the reason
        # Not a wait: the default (30 s), cut by the exchange's 0.5 s timeout.
        ("soon", "connect failed: timed out"),
        ("-1", "connect failed: timed out"),
    ],
)
def test_the_wait_for_a_daemon_is_bounded(
    shim: Shim, socket_dir: Path, wait: str, why: str
) -> None:
    missing = socket_dir / "netattach.sock"
    env = {**CNI_ENV, "NETATTACH_SHIM_DAEMON_WAIT": wait, "NETATTACH_SHIM_TIMEOUT": "0.5"}
    error = try_again_later(shim.run("DEL", config(missing), env), missing)
    assert why in str(error["msg"]), error


@pytest.mark.parametrize("behaviour", ["close", "close-at-accept"])
def test_daemon_closing_without_a_reply_is_try_again_later(
    shim: Shim, daemon: StubDaemon, behaviour: Behaviour
) -> None:
    daemon.behaviour = behaviour
    try_again_later(shim.run("DEL", config(daemon.path), CNI_ENV), daemon.path)


def test_daemon_not_answering_in_time_is_try_again_later(shim: Shim, daemon: StubDaemon) -> None:
    daemon.behaviour = "hang"
    done = shim.run("ADD", config(daemon.path), {**CNI_ENV, "NETATTACH_SHIM_TIMEOUT": "0.5"})

    error = try_again_later(done, daemon.path)
    assert "timed out" in str(error["msg"])


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(b"SSH-2.0-OpenSSH_9.2\r\n", id="not-http"),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n", id="cut-in-headers"),
        pytest.param(http_reply(b"hello"), id="body-not-json"),
        pytest.param(http_reply(b"[0, 1]"), id="body-not-an-object"),
        pytest.param(http_reply(b'{"exitCode": "0", "stdout": ""}'), id="body-not-a-reply"),
        pytest.param(http_reply(wire.encode_reply(0, RESULT))[:-5], id="body-cut-short"),
        pytest.param(
            http_reply(wire.encode_reply(0, RESULT)).replace(
                b"Content-Length: ", b"Content-Length: 1"
            ),
            id="body-shorter-than-content-length",
        ),
        pytest.param(
            http_reply(wire.encode_reply(0, RESULT), chunked=True)[:-9], id="chunked-cut-short"
        ),
        pytest.param(
            http_reply(b"<html>Bad Gateway</html>", "502 Bad Gateway"), id="502-not-a-reply"
        ),
    ],
)
def test_garbage_from_the_daemon_is_try_again_later(
    shim: Shim, daemon: StubDaemon, answer: bytes
) -> None:
    daemon.answer = answer
    try_again_later(shim.run("ADD", config(daemon.path), CNI_ENV), daemon.path)


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(http_reply(wire.encode_reply(1, ERROR), chunked=True), id="chunked"),
        pytest.param(wire_reply(1, ERROR, "503 Service Unavailable"), id="503"),
        pytest.param(wire_reply(1, ERROR, "400 Bad Request"), id="400"),
        pytest.param(wire_reply(1, ERROR) + b"HTTP/1.1 200 OK", id="bytes-after-content-length"),
    ],
)
def test_every_reply_carrying_a_wire_body_is_passed_through(
    shim: Shim, daemon: StubDaemon, answer: bytes
) -> None:
    # wire: 200, 4xx and 503 all carry {exitCode, stdout}; the shim prints it whatever the status.
    daemon.answer = answer
    done = shim.run("ADD", config(daemon.path), CNI_ENV)

    assert (done.returncode, done.stdout) == (1, ERROR), done.stderr


@pytest.mark.parametrize(
    "socket_value",
    [
        pytest.param("run/netattach/netattach.sock", id="relative"),
        pytest.param("", id="empty"),
        pytest.param(42, id="not-a-string"),
        pytest.param("/" + "x" * 120, id="longer-than-sun-path"),
    ],
)
def test_a_daemon_socket_that_is_not_an_absolute_path_is_invalid_config(
    shim: Shim, socket_dir: Path, socket_value: object
) -> None:
    stdin = json.dumps({"cniVersion": "0.4.0", "name": "n", "daemonSocket": socket_value})
    done = shim.run("ADD", stdin.encode(), CNI_ENV)

    assert done.returncode == 1, done.stderr
    error = error_of(done.stdout)
    assert error["code"] == 7
    assert error["cniVersion"] == "0.4.0"
    assert "daemonSocket" in str(error["msg"])


@pytest.mark.skipif(
    os.path.exists(DEFAULT_SOCKET), reason=f"a daemon may be listening on {DEFAULT_SOCKET}"
)
@pytest.mark.parametrize("stdin", [b"{not json", b'["a list"]', b'{"cniVersion": "1.0.0"}'])
def test_a_config_naming_no_socket_goes_to_the_default_one(shim: Shim, stdin: bytes) -> None:
    # A config that is not JSON names no socket; the daemon, reached at the default one, would
    # report it as code 6. Here there is none, so the shim says so, naming the default socket.
    done = shim.run("ADD", stdin, CNI_ENV)

    try_again_later(done, DEFAULT_SOCKET)


def test_a_200_kib_config_and_reply_pass_through_intact(shim: Shim, daemon: StubDaemon) -> None:
    big_reply = json.dumps({"cniVersion": "1.0.0", "dns": {"search": ["d"] * 50_000}}).encode()
    daemon.answer = wire_reply(0, big_reply)
    stdin = config(daemon.path, padding="é" * 100 * 1024, nested={"k": list(range(1000))})
    assert len(stdin) > 200 * 1024

    done = shim.run("ADD", stdin, CNI_ENV)

    assert (done.returncode, done.stdout) == (0, big_reply), done.stderr
    [request] = daemon.requests
    assert request.decoded()[1] == stdin


def oldest_supported_python() -> str | None:
    """A python3.9 to run the zipapp with: $NETATTACH_TEST_PYTHON39, on PATH, or from pyenv."""
    candidates = [os.environ.get("NETATTACH_TEST_PYTHON39", ""), shutil.which("python3.9") or ""]
    candidates += sorted(str(p) for p in Path.home().glob(".pyenv/versions/3.9*/bin/python3.9"))
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [candidate, "-c", "import sys; assert sys.version_info[:2] == (3, 9)"],
            capture_output=True,
            check=False,
        )
        if probe.returncode == 0:
            return candidate
    return None


@pytest.mark.parametrize(
    ("exit_code", "stdout"), [(0, RESULT), (1, ERROR)], ids=["result", "error"]
)
def test_the_zipapp_runs_on_python_3_9(
    zipapp_path: Path, daemon: StubDaemon, exit_code: int, stdout: bytes
) -> None:
    python39 = oldest_supported_python()
    if python39 is None:
        pytest.skip("no python3.9 here (set NETATTACH_TEST_PYTHON39 to one)")
    shim = Shim("zipapp-3.9", (python39, str(zipapp_path)))
    daemon.answer = http_reply(wire.encode_reply(exit_code, stdout), chunked=True)

    done = shim.run("ADD", config(daemon.path), CNI_ENV)
    missing = shim.run("DEL", config(daemon.path.with_name("missing.sock")), CNI_ENV)

    assert (done.returncode, done.stdout) == (exit_code, stdout), done.stderr
    assert daemon.requests[0].decoded() == ({**CNI_ENV, "CNI_COMMAND": "ADD"}, config(daemon.path))
    assert missing.returncode == 1, missing.stderr
    assert error_of(missing.stdout)["code"] == 11


def test_a_full_accept_queue_is_waited_out(shim: Shim, socket_dir: Path) -> None:
    """A UNIX socket refuses a connection to a full accept queue at once (EAGAIN): the shim
    retries until the daemon, busy for a while, accepts and answers."""
    path = socket_dir / "busy.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(0)
    fillers = []
    for _ in range(4):  # enough to fill a backlog of 0 (the kernel allows one more)
        filler = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        filler.setblocking(False)
        try:
            filler.connect(str(path))
        except BlockingIOError:
            filler.close()
            break
        fillers.append(filler)
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.setblocking(False)
    with pytest.raises(BlockingIOError):
        probe.connect(str(path))  # the queue is full: a connect now is refused at once
    probe.close()

    started = threading.Event()

    def serve_later() -> None:
        started.wait(10)
        time.sleep(0.5)
        for filler in fillers:
            conn, _ = server.accept()
            conn.close()
            filler.close()
        conn, _ = server.accept()
        with conn:
            conn.settimeout(10)
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            while len(body) < length:
                body += conn.recv(65536)
            conn.sendall(wire_reply(0, RESULT))

    thread = threading.Thread(target=serve_later, daemon=True)
    thread.start()
    started.set()
    done = shim.run("ADD", config(path), CNI_ENV)
    thread.join(10)
    server.close()

    assert (done.returncode, done.stdout) == (0, RESULT), done.stdout + done.stderr
