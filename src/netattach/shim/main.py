"""The shim: a pipe from the container runtime to the netattach daemon (the habit "the shim is a
pipe").

    runtime ── env CNI_*, config on stdin ──▶ shim ── POST /cni {env, stdin} ──▶ daemon
            ◀── stdout, exit code ─────────────      ◀── {exitCode, stdout} ───────
                                                  (`wire`: HTTP/1.1 on a UNIX socket)

It owns no CNI logic, and answers only what the daemon cannot:
  * VERSION, which a runtime may ask before any daemon exists;
  * the daemon being unreachable or unreadable (no socket, refused, closed early, timed out,
    garbage) → CNI error 11 "try again later" naming the socket — for DEL too: the runtime retries
    a failed DEL, and a DEL reported as done when nothing was deleted would leak the attachments.
    No socket, or nobody listening on it, is first waited out for `NETATTACH_SHIM_DAEMON_WAIT`
    seconds (default 30): the daemon is restarting (a rolling update of the DaemonSet).
A config that names no usable socket is error 7, and so is one larger than the daemon accepts; a
config that is not JSON cannot name the socket, so it goes to the default one and the daemon
reports it (error 6).

`netattach-shim.c` beside this file is the same program in C, the form nodes install: both
answer every input with the same bytes (tests/shim runs every test against both, and fuzzes their
JSON reading against each other). A change here is a change there.

It runs on every pod's critical path and, as the zipapp, on the host's own python3 (3.9 or
later): standard library only, and only its cheap parts — no `asyncio`, `dataclasses`,
`http.client`, `argparse` or `logging`; no syntax or annotation newer than Python 3.9. The shim
tests import it under `python -I -S` and check what is absent from `sys.modules`.
"""

# `_socket` and `quickjson`, not `socket` and `json`: the same C code without the Python layers
# (`enum`, `selectors`, `re`), which cost ~10 ms of start-up (tests/shim/test_imports.py).
import _socket
import os
import sys
import time

from netattach import quickjson, wire
from netattach.cni import errors, spec

# The config key that names the daemon's socket, and the socket the DaemonSet creates.
SOCKET_KEY = "daemonSocket"
DEFAULT_SOCKET = "/run/netattach/netattach.sock"
# Seconds for the whole exchange. Longer than any CNI call the daemon runs (its delegates have
# their own, shorter timeouts), so a slow ADD is answered by the daemon, not cut off here.
DEFAULT_TIMEOUT = 300.0
TIMEOUT_ENV = "NETATTACH_SHIM_TIMEOUT"
# Linux sockaddr_un.sun_path is 108 bytes including the terminating NUL.
SUN_PATH_MAX_BYTES = 107
# A full accept queue: the first pause, and the longest, between connect attempts (seconds).
CONNECT_RETRY_FIRST = 0.005
CONNECT_RETRY_MAX = 0.2
# No daemon (no socket, or nobody listening on it): how long the shim waits for one to come
# (seconds; 0: not at all), within the exchange's timeout. The DaemonSet's rolling update leaves a
# node without a daemon for the seconds between the old pod's exit and the new one's socket; a
# call in that gap waits it out instead of failing (CLU-NODES). Its pauses, first and longest.
DEFAULT_DAEMON_WAIT = 30.0
DAEMON_WAIT_ENV = "NETATTACH_SHIM_DAEMON_WAIT"
DAEMON_RETRY_FIRST = 0.05
DAEMON_RETRY_MAX = 0.5
_RECV_BYTES = 65536
# The most the shim reads of a reply: far above any CNI result, and a bound on its memory.
MAX_REPLY_BYTES = 16 * 1024 * 1024
# How much of a bad value, a bad reply line and a bad length or chunk size an error quotes.
QUOTE_MAX_CHARS = 200
LINE_QUOTE_MAX = 80
TOKEN_QUOTE_MAX = 40


class DaemonUnreachableError(Exception):
    """The exchange with the daemon failed; the message says which step and why."""


def main() -> int:
    stdin = sys.stdin.buffer.read(wire.MAX_REQUEST_BYTES + 1)
    if wire.too_large(len(stdin)):
        too_large = errors.InvalidNetworkConfigError(
            "the network config is too large", f"more than {wire.MAX_REQUEST_BYTES} bytes"
        )
        return _print(quickjson.dumps(too_large.to_raw(spec.CURRENT_VERSION)).encode(), 1)
    config = parse_config(stdin)
    cni_version = config.get("cniVersion")
    if not isinstance(cni_version, str) or not cni_version:
        cni_version = spec.CURRENT_VERSION
    if os.environ.get(spec.ENV_COMMAND) == spec.VERSION:
        return _print(wire.version_reply(cni_version), 0)
    try:
        path = lookup_socket(config)
        code, stdout = fetch_reply(path, wire.encode_request(dict(os.environ), stdin))
    except errors.CNIError as exc:
        # CNI spec "Error": the error object goes to stdout and the plugin exits non-zero.
        return _print(quickjson.dumps(exc.to_raw(cni_version)).encode(), 1)
    return _print(stdout, code)


def parse_config(stdin: bytes) -> dict[str, object]:
    """The config as a dict, or {} when it is not a JSON object (the daemon reports that one)."""
    try:
        raw = quickjson.loads(stdin.decode("utf-8", errors="surrogateescape"))
    except (ValueError, RecursionError):
        return {}
    return raw if isinstance(raw, dict) else {}


def lookup_socket(config: dict[str, object]) -> str:
    path = config.get(SOCKET_KEY, DEFAULT_SOCKET)
    if not isinstance(path, str) or not path.startswith("/"):
        raise errors.InvalidNetworkConfigError(
            f"{SOCKET_KEY} must be an absolute path to the netattach daemon's socket",
            f"got {describe_value(path)}",
        )
    try:
        encoded = path.encode("utf-8")
    except UnicodeEncodeError:
        encoded = b"\0"  # a lone surrogate: no such path
    if b"\0" in encoded or len(encoded) > SUN_PATH_MAX_BYTES:
        raise errors.InvalidNetworkConfigError(
            f"{SOCKET_KEY} is not a usable UNIX socket path (at most {SUN_PATH_MAX_BYTES} bytes"
            " of UTF-8, no NUL)",
            f"got {describe_value(path)}",
        )
    return path


def describe_value(value: object) -> str:
    """A config value for an error: a string quoted as JSON (cut), anything else by its kind."""
    if isinstance(value, str):
        return quickjson.dumps(value)[:QUOTE_MAX_CHARS]
    if isinstance(value, bool) or value is None:
        return quickjson.dumps(value)
    if isinstance(value, dict):
        return "a JSON object"
    if isinstance(value, list):
        return "a JSON array"
    return "a JSON number"


def read_timeout() -> float:
    try:
        timeout = float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT))
    except ValueError:
        return DEFAULT_TIMEOUT
    return timeout if 0 < timeout < float("inf") else DEFAULT_TIMEOUT


def read_daemon_wait() -> float:
    try:
        wait = float(os.environ.get(DAEMON_WAIT_ENV, DEFAULT_DAEMON_WAIT))
    except ValueError:
        return DEFAULT_DAEMON_WAIT
    return wait if 0 <= wait < float("inf") else DEFAULT_DAEMON_WAIT


def fetch_reply(path: str, body: bytes) -> tuple[int, bytes]:
    """The daemon's (exitCode, stdout) for one request; `TryAgainLaterError` if there is none."""
    try:
        status, reply_body = exchange(path, body, read_timeout())
    except DaemonUnreachableError as exc:
        raise errors.TryAgainLaterError(f"netattach daemon at {path}: {exc}") from exc
    try:
        return wire.decode_reply(reply_body)
    except wire.WireError as exc:
        raise errors.TryAgainLaterError(
            f"netattach daemon at {path}: unreadable HTTP {status} reply: {exc}"
        ) from exc


def exchange(path: str, body: bytes, timeout: float) -> tuple[int, bytes]:
    """POST `body` to the socket at `path`; the reply's HTTP status and body."""
    deadline = time.monotonic() + timeout
    head = (
        f"POST {wire.PATH} HTTP/1.1\r\n"
        "Host: netattach\r\n"
        f"Content-Type: {wire.CONTENT_TYPE}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    step = "connect"
    send_error: OSError | None = None  # a local annotation: never evaluated, so fine on 3.9
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        try:
            sock.settimeout(timeout)
            connect(sock, path, deadline)
            step = "send the request"
            try:
                sock.sendall(head.encode("ascii") + body)
            except OSError as exc:
                # The daemon may have answered early (413) and closed: its reply is still readable.
                send_error = exc
            step = "read the reply"
            raw = receive_all(sock, deadline)
        except OSError as exc:
            raise DaemonUnreachableError(_describe(step, exc, deadline)) from exc
    finally:
        sock.close()
    try:
        return parse_http_reply(raw)
    except ValueError as exc:
        if send_error is not None:
            raise DaemonUnreachableError(
                _describe("send the request", send_error, deadline)
            ) from send_error
        raise DaemonUnreachableError(str(exc)) from exc


def connect(sock: _socket.socket, path: str, deadline: float) -> None:
    """Connect, waiting while the daemon's accept queue is full: a UNIX socket refuses a
    connection to a full queue at once (EAGAIN) instead of waiting, so a burst of pods would
    fail with "try again" though the daemon is only busy. Growing pauses, until the deadline.
    No daemon (no socket file, or nobody listening) is waited for `read_daemon_wait()` seconds."""
    busy = CONNECT_RETRY_FIRST
    absent = DAEMON_RETRY_FIRST
    absent_until = min(deadline, time.monotonic() + read_daemon_wait())
    while True:
        try:
            sock.connect(path)
            return
        except BlockingIOError:
            if time.monotonic() + busy > deadline:
                raise
            time.sleep(busy)
            busy = min(busy * 2, CONNECT_RETRY_MAX)
        except (FileNotFoundError, ConnectionRefusedError):
            left = absent_until - time.monotonic()
            if left <= 0:
                raise
            time.sleep(min(absent, left))
            absent = min(absent * 2, DAEMON_RETRY_MAX)


def receive_all(sock: _socket.socket, deadline: float) -> bytes:
    """Everything up to EOF (the request said `Connection: close`), within the deadline."""
    chunks: list[bytes] = []
    size = 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise OSError("timed out")
        sock.settimeout(remaining)
        chunk = sock.recv(_RECV_BYTES)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_REPLY_BYTES:
            raise OSError(f"the reply is larger than {MAX_REPLY_BYTES} bytes")


def parse_http_reply(raw: bytes) -> tuple[int, bytes]:
    """An HTTP/1.x response read to EOF → (status, body); `ValueError` names what is wrong."""
    if not raw:
        raise ValueError("the daemon closed the connection without replying")
    head, separator, rest = raw.partition(b"\r\n\r\n")
    if not separator:
        raise ValueError(f"the reply ended inside its headers after {len(raw)} bytes")
    lines = head.split(b"\r\n")
    status_line = lines[0].split(None, 2)
    if (
        len(status_line) < 2
        or not status_line[0].startswith(b"HTTP/1.")
        or not (status_line[1].isdigit() and len(status_line[1]) == 3)
    ):
        raise ValueError(f"not an HTTP/1.x status line: {_quote(lines[0], LINE_QUOTE_MAX)}")
    headers = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon:
            raise ValueError(f"not an HTTP header line: {_quote(line, LINE_QUOTE_MAX)}")
        headers[name.strip().lower()] = value.strip()
    status = int(status_line[1])
    if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
        return status, decode_chunked(rest)
    length = headers.get(b"content-length")
    if length is None:
        return status, rest
    if not length.isdigit() or len(length) > 18:
        raise ValueError(f"not a Content-Length: {_quote(length, TOKEN_QUOTE_MAX)}")
    if len(rest) < int(length):
        raise ValueError(f"the reply was cut short: {len(rest)} of {int(length)} body bytes")
    return status, rest[: int(length)]


def decode_chunked(data: bytes) -> bytes:
    """A body in HTTP/1.1 chunked transfer coding (RFC 9112 §7.1); trailers are ignored."""
    chunks: list[bytes] = []
    position = 0
    while True:
        end_of_size = data.find(b"\r\n", position)
        if end_of_size < 0:
            raise ValueError("the chunked reply was cut short")
        size_text = data[position:end_of_size].split(b";", 1)[0].strip()
        if not size_text or size_text.strip(b"0123456789abcdefABCDEF"):
            raise ValueError(f"not a chunk size: {_quote(size_text, TOKEN_QUOTE_MAX)}")
        size = int(size_text, 16)
        if size == 0:
            return b"".join(chunks)
        start = end_of_size + 2
        if len(data) < start + size + 2:
            raise ValueError("the chunked reply was cut short")
        chunks.append(data[start : start + size])
        position = start + size + 2


def _quote(data: bytes, limit: int) -> str:
    """Raw reply bytes for an error message: their Latin-1 reading as a JSON string, cut."""
    return quickjson.dumps(data[:limit].decode("latin-1"))


def _describe(step: str, exc: OSError, deadline: float) -> str:
    if time.monotonic() >= deadline:
        return f"{step} failed: timed out"
    return f"{step} failed: {exc.strerror or exc}"


def _print(data: bytes, code: int) -> int:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    return code
