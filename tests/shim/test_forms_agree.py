"""The C shim and the Python shim answer every input with the same bytes.

The Python form is the reference. Its JSON reading is CPython's `json`; the C form has its own
parser, the attack surface of a program run as root on every pod. Hypothesis writes configs
(valid, duplicated keys, escapes, lone surrogates, invalid UTF-8, cut short, garbage) and daemon
replies, and both forms must print the same and exit the same, the C one built with
AddressSanitizer and UBSan so that a read past its input or any undefined behaviour fails.
"""

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netattach import wire
from tests.shim.conftest import SANITIZER_ENV, Shim, source_argv
from tests.shim.stub_daemon import StubDaemon, http_reply, wire_reply

DEFAULT_SOCKET = "/run/netattach/netattach.sock"
CNI_ENV = {"CNI_CONTAINERID": "c0ffee", "CNI_IFNAME": "eth0", "CNI_NETNS": "/var/run/netns/x"}
EXAMPLES = int(os.environ.get("NETATTACH_SHIM_FUZZ_EXAMPLES", "150"))
# A directory that does not exist: sockets named under it are never reached.
MISSING_DIR = "/nonexistent-na-shim-fuzz"

pytestmark = pytest.mark.skipif(
    os.path.exists(DEFAULT_SOCKET), reason=f"a daemon may be listening on {DEFAULT_SOCKET}"
)


@pytest.fixture(scope="module")
def pair(sanitized_path: Path) -> tuple[Shim, Shim]:
    return Shim("source", source_argv()), Shim("sanitized", (str(sanitized_path),), SANITIZER_ENV)


@pytest.fixture(scope="module")
def stub() -> Iterator[StubDaemon]:
    directory = Path(tempfile.mkdtemp(prefix="netattach-shim-fuzz-"))
    daemon = StubDaemon(directory / "d.sock")
    yield daemon
    daemon.close()
    (directory / "d.sock").unlink(missing_ok=True)
    directory.rmdir()


def answers(shims: tuple[Shim, Shim], command: str, stdin: bytes) -> list[tuple[int, bytes]]:
    runs = [shim.run(command, stdin, CNI_ENV) for shim in shims]
    return [(done.returncode, done.stdout) for done in runs]


# -- configs ------------------------------------------------------------------------------------

LONE_SURROGATES = st.sampled_from(["\ud800", "\udbff", "\udc80", "\udcff", "\udfff", "\ud83d"])
TEXT = st.lists(st.one_of(st.characters(), LONE_SURROGATES), max_size=12).map("".join)
SOCKETS = st.one_of(
    st.sampled_from(["", "/", "relative/x.sock", "/a\x00b", "/" + "s" * 106, "/" + "s" * 107]),
    TEXT.map(lambda t: f"{MISSING_DIR}/{t}"),
    TEXT,
    TEXT.map(lambda t: "/" + t),
    st.sampled_from(["/é" * 53, "/é" * 54, "/\U0001f600" * 26, "/\U0001f600" * 27]),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=12,
)
VERSIONS = st.one_of(st.sampled_from(["1.0.0", "0.4.0", "", "1.1.0"]), TEXT, VALUES)
KEYS = st.sampled_from(["cniVersion", "daemonSocket", "name", "type", "plugins"])


@st.composite
def config_texts(draw: st.DrawFn) -> str:
    members: list[tuple[str, object]] = []
    for _ in range(draw(st.integers(0, 5))):
        key = draw(st.one_of(KEYS, TEXT))
        if key == "daemonSocket":
            value: object = draw(st.one_of(SOCKETS, VALUES))
        elif key == "cniVersion":
            value = draw(VERSIONS)
        else:
            value = draw(VALUES)
        members.append((key, value))
    ascii_only = draw(st.booleans())
    space = draw(st.sampled_from(["", " ", "\n  ", "\t", "\r\n"]))

    def encode(value: object) -> str:
        return json.dumps(value, ensure_ascii=ascii_only)

    def encode_key(key: str) -> str:
        # "daemon\u0053ocket" is "daemonSocket" to a JSON reader.
        if key in {"daemonSocket", "cniVersion"} and draw(st.booleans()):
            return '"' + "".join(f"\\u{ord(c):04x}" if c in "Sv" else c for c in key) + '"'
        return encode(key)

    body = ("," + space).join(
        f"{space}{encode_key(k)}{space}:{space}{encode(v)}" for k, v in members
    )
    return space + "{" + body + space + "}" + space


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def mutated(draw: st.DrawFn, data: bytes, *, unchanged: int) -> bytes:
    """`data` cut short, with 1-3 bytes inserted, or with a byte replaced, at a drawn place; or
    as it is, `unchanged` times in `unchanged` + 3."""
    mutation = draw(st.sampled_from(["none"] * unchanged + ["cut", "insert", "replace"]))
    if mutation == "none" or not data:
        return data
    at = draw(st.integers(0, len(data) - 1))
    if mutation == "cut":
        return data[:at]
    if mutation == "insert":
        return data[:at] + draw(st.binary(min_size=1, max_size=3)) + data[at:]
    return data[:at] + draw(st.binary(min_size=1, max_size=1)) + data[at + 1 :]


@st.composite
def config_bytes(draw: st.DrawFn) -> bytes:
    text = draw(config_texts())
    data = text.encode("utf-8", errors="surrogatepass")
    return mutated(draw, data, unchanged=3)


@FUZZ
@given(stdin=config_bytes())
def test_both_forms_read_the_same_socket_and_version_from_any_config(
    pair: tuple[Shim, Shim], stdin: bytes
) -> None:
    # VERSION shows the cniVersion each read; ADD, the socket (error 7, or 11 naming it).
    for command in ("VERSION", "ADD"):
        reference, native = answers(pair, command, stdin)
        assert native == reference, (command, stdin)


@pytest.mark.parametrize(
    "stdin",
    [
        pytest.param(b'{"daemonSocket": "/x", "daemonSocket": "rel"}', id="last-duplicate-wins"),
        pytest.param(b'{"daemon\\u0053ocket": "rel"}', id="escaped-key"),
        pytest.param(b'{"daemonSocket": "/\\ud800"}', id="lone-surrogate-socket"),
        pytest.param(b'{"cniVersion": "\\ud83d\\ude00", "daemonSocket": 1}', id="pair-version"),
        pytest.param(b'{"cniVersion": "\xff\xfe", "daemonSocket": "\xe9"}', id="invalid-utf8"),
        pytest.param(b'{"cniVersion": "1.0.0", "x": ' + b"1" * 4301 + b"}", id="int-too-long"),
        pytest.param(b'{"cniVersion": "0.4.0", "x": NaN}', id="nan"),
        pytest.param(b'{"cniVersion": "0.4.0"} x', id="extra-data"),
        pytest.param(b'{"cniVersion": "0.4.0",}', id="trailing-comma"),
        pytest.param(b'\x0c{"cniVersion": "0.4.0"}', id="form-feed-is-not-json-space"),
        pytest.param(b'{"cniVersion": "0.4\x01"}', id="raw-control-character"),
        pytest.param(b'{"cniVersion": "0.4.0", "daemonSocket": true}', id="socket-true"),
        pytest.param(b'{"cniVersion": "0.4.0", "daemonSocket": [1]}', id="socket-array"),
        pytest.param(b'{"cniVersion": "0.4.0", "daemonSocket": "' + b"x" * 300 + b'"}', id="cut"),
        pytest.param(b"[" * 100 + b"]" * 100, id="nested-array"),
        pytest.param(b" " * (wire.MAX_REQUEST_BYTES + 1), id="larger-than-the-daemon-takes"),
    ],
)
def test_both_forms_agree_on_the_corner_cases(pair: tuple[Shim, Shim], stdin: bytes) -> None:
    for command in ("VERSION", "ADD"):
        reference, native = answers(pair, command, stdin)
        assert native == reference, command


# -- replies ------------------------------------------------------------------------------------

WIRE_BODIES = st.one_of(
    st.builds(
        wire.encode_reply,
        st.integers(0, 255),
        st.binary(max_size=40),
    ),
    st.builds(
        lambda code, out: json.dumps({"exitCode": code, "stdout": out}).encode(),
        st.one_of(st.integers(-300, 300), st.floats(allow_nan=False), st.booleans(), st.none()),
        st.one_of(TEXT, st.none(), st.integers()),
    ),
    VALUES.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=30),
)


@st.composite
def replies(draw: st.DrawFn) -> bytes:
    body = draw(WIRE_BODIES)
    status = draw(st.sampled_from(["200 OK", "503 Service Unavailable", "2000 OK", "x"]))
    raw = http_reply(body, status, chunked=draw(st.booleans()))
    return mutated(draw, raw, unchanged=2)


@FUZZ
@given(answer=replies())
def test_both_forms_print_the_same_for_any_reply(
    pair: tuple[Shim, Shim], stub: StubDaemon, answer: bytes
) -> None:
    stub.answer = answer
    stdin = json.dumps({"cniVersion": "1.0.0", "daemonSocket": str(stub.path)}).encode()
    reference, native = answers(pair, "ADD", stdin)
    assert native == reference, answer


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(wire_reply(256, b""), id="exit-code-over-255"),
        pytest.param(http_reply(b'{"exitCode": 0, "stdout": "\\ud800"}'), id="stdout-not-text"),
        pytest.param(http_reply(b'{"exitCode": 0, "stdout": "\\udcff"}'), id="stdout-raw-byte"),
        pytest.param(http_reply(b'{"exitCode": -0}'), id="minus-zero"),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 0" + b"0" * 30 + b"\r\n\r\n", id="cl"),
        pytest.param(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: x, Chunked\r\n\r\n0\r\n\r\n", id="te"),
        pytest.param(b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n{}", id="header-without-colon"),
        pytest.param(b"\r\n\r\n", id="empty-head"),
        pytest.param(b"HTTP/1.0 204\r\n\r\n", id="no-reason"),
    ],
)
def test_both_forms_agree_on_odd_replies(
    pair: tuple[Shim, Shim], stub: StubDaemon, answer: bytes
) -> None:
    stub.answer = answer
    stdin = json.dumps({"cniVersion": "1.0.0", "daemonSocket": str(stub.path)}).encode()
    reference, native = answers(pair, "ADD", stdin)
    assert native == reference


def test_a_reply_the_forms_share_is_not_vacuous(pair: tuple[Shim, Shim], stub: StubDaemon) -> None:
    # The comparisons above would pass if both forms printed nothing: this one must print a result.
    stub.answer = wire_reply(0, b'{"ok": true}')
    stdin = json.dumps({"cniVersion": "1.0.0", "daemonSocket": str(stub.path)}).encode()
    assert answers(pair, "ADD", stdin) == [(0, b'{"ok": true}')] * 2


def test_the_fuzz_reaches_the_stub_daemon(pair: tuple[Shim, Shim], stub: StubDaemon) -> None:
    before = len(stub.requests)
    stdin = json.dumps({"cniVersion": "1.0.0", "daemonSocket": str(stub.path)}).encode()
    answers(pair, "DEL", stdin)
    assert len(stub.requests) == before + 2
