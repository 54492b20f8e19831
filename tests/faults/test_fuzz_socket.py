"""Hypothesis against a running daemon's UNIX socket: raw bytes, HTTP-shaped requests, and CNI
calls with fuzzed environments and configs.

Every answer is one the shim can read as a CNI outcome, and every error in it carries a
documented code: a well-known CNI code, one of netattach's own (100-104), or a delegate's own
code passed through with the delegate named. Never "internal error in netattach" (999 from an
unexpected exception). Afterwards the daemon is up, /healthz answers, and a pod attaches.

No fuzzed call can touch a real namespace: `CNI_NETNS` is always a path that does not exist, and
no pod the fuzzed calls may name exists while they run.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netattach import wire
from netattach.cni import errors, spec
from netattach.shim.main import parse_http_reply
from tests.e2e.daemon_harness import DaemonNode, HttpReply
from tests.e2e.harness import DEFAULT_NETWORK, NOTHING
from tests.e2e.socket_harness import STATUSES, request, send

pytestmark = pytest.mark.netns

EXAMPLES = 300
# Our codes and the CNI spec's; 999 only as a delegate's own code, passed through.
DOCUMENTED = set(errors.BY_CODE) - {errors.InternalError.code}
NETNS = ["", "/nonexistent/na-fuzz", "relative/na-fuzz", "/proc/self/fd/999/na"]

text = st.text(max_size=40)
commands = st.sampled_from([*sorted(spec.COMMANDS), "add", "", "BOGUS"]) | text
container_ids = st.sampled_from(["na-fuzz-1", "na-fuzz-2", "", "../x", "a" * 300]) | text
ifnames = st.sampled_from(["eth0", "net1", "", "a/b", "x" * 16, "é" * 8]) | text
cni_args = (
    st.lists(
        st.tuples(
            st.sampled_from(
                ["K8S_POD_NAMESPACE", "K8S_POD_NAME", "K8S_POD_UID", "IgnoreUnknown", "X", ""]
            ),
            st.sampled_from(["blue", "nobody", "1", "", "=", ";"]) | text,
        ).map("=".join),
        max_size=5,
    ).map(";".join)
    | text
)
# Half of the calls are well-formed enough to reach the orchestrator (and the default network's
# delegate, which fails on the missing netns); the others have any value in any variable.
plausible_environments = st.fixed_dictionaries(
    {
        "CNI_COMMAND": st.sampled_from(["ADD", "ADD", "ADD", "DEL", "CHECK", "GC", "STATUS"]),
        "CNI_CONTAINERID": st.sampled_from(["na-fuzz-1", "na-fuzz-2"]),
        "CNI_NETNS": st.just(NETNS[1]),
        "CNI_IFNAME": st.sampled_from(["eth0", "net1"]),
        "CNI_ARGS": st.sampled_from(
            ["", "IgnoreUnknown=1;K8S_POD_NAMESPACE=blue;K8S_POD_NAME=nobody;K8S_POD_UID=u"]
        )
        | cni_args,
        "CNI_PATH": st.just("/usr/lib/cni"),
    }
)
environments = plausible_environments | st.fixed_dictionaries(
    {},
    optional={
        "CNI_COMMAND": commands,
        "CNI_CONTAINERID": container_ids,
        "CNI_NETNS": st.sampled_from(NETNS),
        "CNI_IFNAME": ifnames,
        "CNI_ARGS": cni_args,
        "CNI_PATH": st.sampled_from(["/usr/lib/cni", "", ":::"]) | text,
    },
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=10,
)
netconfs = st.fixed_dictionaries(
    {},
    optional={
        "cniVersion": st.sampled_from(["0.4.0", "1.0.0", "1.1.0", "9.9.9"]) | json_values,
        "name": st.sampled_from(["netattach", ""]) | json_values,
        "type": st.sampled_from(["netattach", "../x"]) | json_values,
        "runtimeConfig": json_values,
        spec.VALID_ATTACHMENTS_KEY: json_values,
    },
)
stdins = (
    netconfs.map(lambda raw: json.dumps({"cniVersion": "1.0.0", "name": "netattach", **raw}))
    | netconfs.map(json.dumps)
    | text
    | st.sampled_from(["", "[" * 100_000, "null", "\udcff"])
)
cni_calls = st.builds(
    lambda environ, stdin: request(
        wire.encode_request(environ, stdin.encode("utf-8", "surrogateescape"))
    ),
    environments,
    stdins,
)
http_shaped = st.builds(
    lambda method, target, headers, body: (
        f"{method} {target} HTTP/1.1\r\n{headers}\r\n".encode("utf-8", "surrogateescape") + body
    ),
    st.sampled_from(["POST", "GET", "PUT", "", "P\0ST"]) | text,
    st.sampled_from(["/cni", "/", "*", "/cni?x=1"]) | text,
    st.lists(
        st.sampled_from(
            ["Content-Length: 2", "Content-Length: -1", "Content-Length: 99999999999", "X: y"]
        )
        | text,
        max_size=4,
    ).map(lambda lines: "".join(f"{line}\r\n" for line in lines)),
    st.binary(max_size=200),
)
payloads = st.one_of(cni_calls, cni_calls, cni_calls, http_shaped, st.binary(max_size=2000))


@pytest.fixture(scope="module")
def running(module_daemon: DaemonNode) -> DaemonNode:
    module_daemon.start()
    return module_daemon


def check(payload: bytes, answer: bytes) -> None:
    """No answer (the request never ended), or one the shim reads, with a documented code."""
    if not answer:
        return
    status, body = parse_http_reply(answer)
    assert status in STATUSES, (payload[:200], answer[:300])
    exit_code, stdout = wire.decode_reply(body)
    if exit_code == 0:
        return
    error = json.loads(stdout)
    assert exit_code == 1, answer[:300]
    assert isinstance(error["msg"], str), answer[:300]
    assert error["msg"], answer[:300]
    assert "internal error in netattach" not in error["msg"], (payload[:300], error)
    if error["code"] not in DOCUMENTED:
        # a delegate's own code, passed through with the delegate named
        assert " plugin " in f" {error['msg']}", (payload[:300], error)


@pytest.mark.req("CNI-ERR")
def test_fuzzed_socket_requests_get_documented_answers_and_the_daemon_stays_up(
    running: DaemonNode,
) -> None:
    daemon, cluster = running, running.cluster

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
    @given(payload=payloads)
    def one(payload: bytes) -> None:
        check(payload, send(daemon.socket, payload))
        assert daemon.alive(), daemon.log_text()[-3000:]

    one()

    assert daemon.http("/healthz") == HttpReply(200, "ok\n")
    assert "Traceback" not in daemon.log_text()
    # Nothing is held. A fuzzed ADD whose rollback the delegates refused (CNI_ARGS without
    # IgnoreUnknown make the reference plugins refuse DEL too) keeps its record for a retry:
    # the runtime's GC, with no container left, collects those.
    held = cluster.leftovers()
    assert (held["allocations"], held["host veths"]) == ([], []), held
    gc = {**daemon.runtime_config(), "cniVersion": "1.1.0", spec.VALID_ATTACHMENTS_KEY: []}
    collected = daemon.shim("GC", config=gc)
    assert (collected.rc, collected.out) == (0, None), (collected, daemon.log_text()[-3000:])
    assert cluster.leftovers() == NOTHING

    pod = cluster.pod("blue", "web", None)
    added = daemon.shim("ADD", pod)
    assert added.rc == 0, (added, daemon.log_text()[-3000:])
    assert [e["name"] for e in cluster.status("blue", "web") or []] == [DEFAULT_NETWORK]
    deleted = daemon.shim("DEL", pod)
    assert (deleted.rc, deleted.out) == (0, None), deleted
    assert cluster.leftovers() == NOTHING
    assert daemon.stop() == 0
