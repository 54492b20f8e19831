"""Hostile input through the daemon: plugin `type` paths, bad interface names, 10 MB annotations,
10,000 selections, JSON nested 100,000 deep.

Each is refused before any delegate runs, with an error that names the object and says what is
wrong with it, and answered before the call's timeout (the harness's CALL_TIMEOUT; no timing is
asserted beyond that). Nothing is attached, and the daemon keeps serving.
"""

from __future__ import annotations

import itertools
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from netattach import wire
from netattach.shim.main import parse_http_reply
from tests.e2e.daemon_harness import DAEMON, DaemonNode, HttpReply
from tests.e2e.harness import NOTHING, Pod, Reply
from tests.e2e.socket_harness import request, send

pytestmark = pytest.mark.netns

NS = "blue"
TEN_MB = 10 * 1024 * 1024
DEEP = 100_000
_names = itertools.count()


@pytest.fixture
def daemon(running: DaemonNode) -> Iterator[DaemonNode]:
    """The module's daemon; after each case nothing was attached and it still serves."""
    yield running
    cluster = running.cluster
    assert cluster.leftovers() == NOTHING
    assert running.alive()
    assert running.http("/healthz") == HttpReply(200, "ok\n")


def refused(
    daemon: DaemonNode, networks: str | list[dict[str, object]], *, ifname: str = "eth0"
) -> tuple[Pod, Reply]:
    """ADD of a new pod selecting `networks`: refused, nothing attached, its DEL a no-op."""
    pod = daemon.cluster.pod(NS, f"web-{next(_names)}", networks)
    reply = daemon.shim("ADD", pod, ifname=ifname)
    assert reply.rc == 1, reply
    assert daemon.cluster.interfaces(pod.netns) == {}
    assert daemon.cluster.allocations() == []
    deleted = daemon.shim("DEL", pod)
    assert (deleted.rc, deleted.out) == (0, None), deleted
    return pod, reply


def huge_pod_manifest(daemon: DaemonNode, name: str, annotation: str) -> Path:
    """A pod manifest written as JSON (YAML reads it; dumping 10 MB as YAML takes too long)."""
    path = daemon.cluster.manifests / f"pod-{NS}-{name}.yaml"
    manifest = {  # the shape Cluster.add_pod writes
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "annotations": {"k8s.v1.cni.cncf.io/networks": annotation},
        },
    }
    path.write_text(json.dumps(manifest))
    return path


# -- plugin type paths ---------------------------------------------------------------------------

TYPES = ["../x", "/bin/sh", "bridge\0x", "..", "a\\b"]


@pytest.mark.req("NAD-BADCONF", "CNI-FIND")
@pytest.mark.parametrize("kind", ["config", "list"])
@pytest.mark.parametrize(
    "plugin_type", TYPES, ids=["dotdot", "absolute", "nul", "dots", "backslash"]
)
def test_a_plugin_type_that_is_a_path_is_refused_naming_the_nad_and_quoting_it(
    daemon: DaemonNode, plugin_type: str, kind: str
) -> None:
    config: dict[str, object] = {"cniVersion": "1.0.0", "type": plugin_type}
    if kind == "list":
        config = {"cniVersion": "1.0.0", "plugins": [{"type": "bridge"}, {"type": plugin_type}]}
    name = f"net-{kind}-{next(_names)}"
    daemon.cluster.add_nad(NS, name, config)

    pod, reply = refused(daemon, f"net-a,{name}")

    assert reply.code == 7
    assert reply.out["msg"].startswith(
        f"[{NS}/{pod.name}/{pod.uid}] NetworkAttachmentDefinition {NS}/{name}: invalid "
        "spec.config: "
    ), reply
    assert f"plugin type {plugin_type!r} must be a plain file name" in reply.text


# -- interface names -----------------------------------------------------------------------------

IFNAMES = [
    pytest.param("a/b", "an interface name must not contain '/'", id="slash"),
    pytest.param("x" * 16, "an interface name has at most 15 bytes", id="16-bytes"),
    pytest.param("é" * 8, "an interface name has at most 15 bytes", id="8-chars-16-bytes"),
]


@pytest.mark.req("CNI-ERR")
@pytest.mark.parametrize(("ifname", "problem"), IFNAMES)
def test_a_bad_cni_ifname_is_refused_with_4_quoting_it(
    daemon: DaemonNode, ifname: str, problem: str
) -> None:
    _, reply = refused(daemon, "net-a", ifname=ifname)

    assert reply.code == 4
    assert (reply.out["msg"], reply.out["details"]) == (f"invalid CNI_IFNAME {ifname!r}", problem)


@pytest.mark.req("SEL-IFACE", "SEL-INVALID")
@pytest.mark.parametrize(("ifname", "problem"), IFNAMES)
def test_a_bad_requested_interface_is_refused_with_102_quoting_it(
    daemon: DaemonNode, ifname: str, problem: str
) -> None:
    pod, reply = refused(daemon, [{"name": "net-a", "interface": ifname}])

    assert reply.code == 102
    assert reply.out["msg"] == (
        f"[{NS}/{pod.name}/{pod.uid}] invalid network selection annotation of pod {NS}/{pod.name}"
    )
    assert reply.out["details"] == (
        f"networks[0].interface: {ifname!r} is not a valid interface name: {problem}"
    )


# -- size, count and depth -----------------------------------------------------------------------

LIMITS = [
    pytest.param(
        ",".join(["net-a"] * 10_000),
        "networks: 10000 selections, more than the limit of 64",
        id="10000-comma-selections",
    ),
    pytest.param(
        json.dumps([{"name": "net-a"}] * 10_000),
        "networks: the annotation has 190000 bytes, more than the limit of 65536",
        id="10000-json-selections",
    ),
    pytest.param(
        "[" * DEEP,
        f"networks: the annotation has {DEEP} bytes, more than the limit of 65536",
        id="100k-deep",
    ),
    pytest.param(
        "[" * 60_000,
        "networks: the JSON nests 60000 levels deep, more than the limit of 8",
        id="60k-deep-under-the-size-limit",
    ),
]


@pytest.mark.req("SEL-LIMITS")
@pytest.mark.parametrize(("annotation", "problem"), LIMITS)
def test_oversized_annotations_are_refused_with_102_naming_the_pod_and_the_limit(
    daemon: DaemonNode, annotation: str, problem: str
) -> None:
    pod, reply = refused(daemon, annotation)

    assert reply.code == 102
    assert reply.out["msg"] == (
        f"[{NS}/{pod.name}/{pod.uid}] invalid network selection annotation of pod {NS}/{pod.name}"
    )
    assert reply.out["details"] == f"{problem}: {repr(annotation[:81])[:80]}..."
    assert repr(annotation[:20])[:-1] in reply.out["details"]  # it quotes their start


def huge_pod(daemon: DaemonNode) -> tuple[Pod, Path]:
    """A pod whose manifest carries a 10 MB selection annotation, with its sandbox."""
    name = f"huge-{next(_names)}"
    manifest = huge_pod_manifest(daemon, name, "net-a," * (TEN_MB // 6))
    assert manifest.stat().st_size > TEN_MB
    pod = Pod(NS, name, f"uid-{name}", daemon.cluster.new_pod_netns(), f"na-ctr-{name}")
    return pod, manifest


def test_a_10_mb_annotation_is_refused_with_its_manifest_and_attaches_nothing(
    daemon: DaemonNode,
) -> None:
    """The directory feed reads no manifest file over 4 MiB; the Kubernetes API refuses any
    annotations over 256 KiB (the fake does too), so 10 MB never reach the selection parser."""
    pod, manifest = huge_pod(daemon)
    try:
        reply = daemon.shim("ADD", pod)

        assert (reply.rc, reply.code) == (1, 3), reply
        assert reply.out["msg"] == f"[{NS}/{pod.name}/{pod.uid}] pod not found"
        assert daemon.cluster.interfaces(pod.netns) == {}
    finally:
        manifest.unlink()


@pytest.mark.req("SEL-LIMITS")
def test_a_10_mb_annotation_is_refused_saying_why(daemon: DaemonNode) -> None:
    pod, manifest = huge_pod(daemon)
    try:
        reply = daemon.shim("ADD", pod)

        assert f"{manifest}: larger than 4194304 bytes" in reply.text
    finally:
        manifest.unlink()


@pytest.mark.req("NAD-BADCONF")
def test_a_nad_config_nested_100k_deep_is_refused_naming_the_nad(daemon: DaemonNode) -> None:
    daemon.cluster.add_nad(NS, "net-deep", "[" * DEEP)

    pod, reply = refused(daemon, "net-a,net-deep")

    assert reply.code == 7
    assert reply.out["msg"].startswith(
        f"[{NS}/{pod.name}/{pod.uid}] NetworkAttachmentDefinition {NS}/net-deep: invalid "
        "spec.config: objects and lists nest more than 32 deep, the limit for a network"
    ), reply


def post(daemon: DaemonNode, command: str, pod: Pod, stdin: bytes) -> Reply:
    """One CNI call straight to the daemon's socket, `stdin` as it is. (The shim would send a
    config it cannot parse to the default socket, which is not this daemon's.)"""
    environ = {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": pod.container_id,
        "CNI_NETNS": pod.netns,
        "CNI_IFNAME": "eth0",
        "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE={pod.ns};K8S_POD_NAME={pod.name}",
        "CNI_PATH": str(daemon.bin_dir),
    }
    status, body = parse_http_reply(
        send(daemon.socket, request(wire.encode_request(environ, stdin)))
    )
    assert status == 200, body
    code, stdout = wire.decode_reply(body)
    return Reply(rc=code, out=json.loads(stdout) if stdout.strip() else None, stderr="")


@pytest.mark.req("CNI-ERR")
def test_a_cni_config_nested_100k_deep_on_stdin_is_refused_with_6(daemon: DaemonNode) -> None:
    """JSON parsers recurse: 100,000 levels must be a decoding failure, not a crash."""
    pod = daemon.cluster.pod(NS, f"web-{next(_names)}", "net-a")
    text = '{"cniVersion": "1.0.0", "name": "netattach", "x": ' + "[" * DEEP + "]" * DEEP + "}"

    reply = post(daemon, "ADD", pod, text.encode())

    assert (reply.rc, reply.code) == (1, 6), reply
    assert reply.out["msg"] == "network configuration on stdin is not JSON"
    assert "maximum recursion depth exceeded" in reply.out["details"]
    assert daemon.cluster.interfaces(pod.netns) == {}


def test_a_settings_file_nested_100k_deep_stops_the_daemon_naming_the_file(
    tmp_path: Path,
) -> None:
    deep = tmp_path / "settings.yaml"
    deep.write_text("[" * DEEP)

    done = subprocess.run(
        [str(DAEMON), "daemon", "--config", str(deep)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 2, done
    assert done.stderr.strip() == (
        f"netattach daemon: {deep}: netattach settings are not valid YAML: "
        "nested too deeply to parse"
    )
