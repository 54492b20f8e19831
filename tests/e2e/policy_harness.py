"""Real traffic for the MultiNetworkPolicy end-to-end tests: pods, probes, and waiting.

A `PolicyLab` is one node for a whole test module: a node network namespace, a `Cluster`
(tests/e2e/harness.py), a running `DaemonNode` that enforces policy, and the cluster's objects
written through an `Objects` — `FileObjects` (manifests of the directory feed) or `ApiObjects`
(the fake API of tests/e2e/kube_harness.py). `lab.pod(...)` writes a pod, ADDs it through the
installed shim, reads its addresses back from the kernel and starts an *agent* in its netns.

The agent is one `python -I -S` process per pod, started with `nsenter --net=<pod netns>`:

    it serves   TCP and UDP on every port of `TCP_PORTS` / `UDP_PORTS`, on all addresses of both
                families, answering b"pong" to each connection or datagram, so a probe that does
                not get b"pong" was filtered, not refused
    it probes   one JSON line per probe on stdin -> one JSON line with its outcome on stdout,
                each probe on a thread of its own: `ok`, `timeout`, `refused`, `eperm` (an
                egress drop in the sender's own netns), or an errno name

Every probe uses a fresh source port (counting up below the ephemeral range), so no probe ever
matches the conntrack entry of an earlier, allowed one. Ping runs iputils `ping -c 1`.

`lab.converge(*expectations)` polls every expectation (concurrently) until they all hold in two
rounds in a row, within a deadline, and otherwise fails with each unmet expectation's last
outcome, the tables involved and the daemon's log. It never measures time: convergence is
asynchronous (debounced; the directory feed polls every second).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import itertools
import json
import re
import secrets
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import pytest

from netattach.netns import links, namespace
from netattach.policy import apply
from tests.e2e.daemon_harness import DaemonNode, python_in
from tests.e2e.harness import Cluster, Pod, Reply, bridge_list
from tests.e2e.kube_harness import RemoteKubeApi
from tests.kube import objects
from tests.netns_fixtures import Node, netns_unavailable_reason, unique

# Namespace of the NADs: a global namespace in the harness's settings, so pods of every test
# namespace may select them (namespace isolation stays on).
NAD_NS = "other"
TCP_PORTS = (5353, 8080, 8081, 8999, 9000, 9001, 9002, 9003)
UDP_PORTS = (5353, 9001)
PROBE_TIMEOUT = 0.3  # seconds a TCP/UDP probe or a ping waits for its answer
CONVERGE_TIMEOUT = 15.0
AGENT_TIMEOUT = 10.0  # an agent's answer to one probe, whatever the probe's own timeout
LOG_TAIL = 60  # daemon log lines quoted when an expectation fails

Kind = Literal["ping", "tcp", "udp"]

AGENT = r"""
import itertools, json, os, socket, subprocess, sys, threading
TCP, UDP, TIMEOUT = json.loads(sys.argv[1]), json.loads(sys.argv[2]), float(sys.argv[3])
# Source ports below the ephemeral range, never reused: no probe meets an old conntrack entry.
ports = itertools.count(20000)
lock = threading.Lock()
out = threading.Lock()

def listener(kind, port):
    sock = socket.socket(socket.AF_INET6, kind)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("::", port))
    return sock

def serve_tcp(sock):
    sock.listen(64)
    while True:
        conn, _ = sock.accept()
        try:
            conn.sendall(b"pong")
        except OSError:
            pass
        conn.close()

def serve_udp(sock):
    while True:
        _, peer = sock.recvfrom(64)
        try:
            sock.sendto(b"pong", peer)
        except OSError:
            pass

def bound(kind, host):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    while True:
        with lock:
            port = next(ports)
        sock = socket.socket(family, kind)
        try:
            sock.bind(("", port))
            return sock
        except OSError:
            sock.close()

def outcome(exc):
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, ConnectionRefusedError):
        return "refused"
    if isinstance(exc, PermissionError):
        return "eperm"
    import errno
    return errno.errorcode.get(exc.errno or 0, type(exc).__name__)

def probe(cmd):
    host, kind = cmd["host"], cmd["kind"]
    if kind == "ping":
        done = subprocess.run(["ping", "-n", "-c", "1", "-W", str(TIMEOUT), host],
                              capture_output=True, text=True)
        if done.returncode == 0:
            return "ok"
        if "not permitted" in done.stderr + done.stdout:
            return "eperm"
        if done.returncode == 1:  # sent, and no answer came
            return "timeout"
        return "ping failed (%d): %s" % (done.returncode, done.stderr.strip())
    sock = bound(socket.SOCK_STREAM if kind == "tcp" else socket.SOCK_DGRAM, host)
    sock.settimeout(TIMEOUT)
    try:
        sock.connect((host, cmd["port"]))
        if kind == "udp":
            sock.send(b"ping")
        answer = sock.recv(16)
        return "ok" if answer == b"pong" else "answer %r" % answer
    except OSError as exc:
        return outcome(exc)
    finally:
        sock.close()

def run(cmd):
    try:
        result = probe(cmd)
    except Exception as exc:
        result = "agent error: %r" % exc
    with out:
        sys.stdout.write(json.dumps({"id": cmd["id"], "outcome": result}) + "\n")
        sys.stdout.flush()

for kind, wanted in ((socket.SOCK_STREAM, TCP), (socket.SOCK_DGRAM, UDP)):
    for port in wanted:
        target = serve_tcp if kind == socket.SOCK_STREAM else serve_udp
        threading.Thread(target=target, args=(listener(kind, port),), daemon=True).start()
sys.stdout.write(json.dumps({"ready": os.getpid()}) + "\n")
sys.stdout.flush()
for line in sys.stdin:
    threading.Thread(target=run, args=(json.loads(line),), daemon=True).start()
os._exit(0)
"""


class Agent:
    """The listener-and-prober process in one pod netns (see the module docstring)."""

    def __init__(self, netns: str) -> None:
        self.netns = netns
        self._proc = subprocess.Popen(
            python_in(
                netns, AGENT, json.dumps(TCP_PORTS), json.dumps(UDP_PORTS), str(PROBE_TIMEOUT)
            ),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self._ids = itertools.count(1)
        self._answers: dict[int, str] = {}
        self._cond = threading.Condition()
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._ready.wait(AGENT_TIMEOUT):
            self.close()
            pytest.fail(f"the probe agent in {netns} did not start: {self._stderr()}")

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            raw = json.loads(line)
            if "ready" in raw:
                self._ready.set()
                continue
            with self._cond:
                self._answers[int(raw["id"])] = str(raw["outcome"])
                self._cond.notify_all()

    def _stderr(self) -> str:
        if self._proc.poll() is None or self._proc.stderr is None:
            return f"(running, pid {self._proc.pid})"
        return self._proc.stderr.read()

    def submit(self, kind: Kind, host: str, port: int | None) -> int:
        """Start one probe; its id for `answer`."""
        probe_id = next(self._ids)
        command = {"id": probe_id, "kind": kind, "host": host, "port": port}
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(command) + "\n")
        self._proc.stdin.flush()
        return probe_id

    def answer(self, probe_id: int) -> str:
        deadline = time.monotonic() + AGENT_TIMEOUT
        with self._cond:
            while probe_id not in self._answers:
                left = deadline - time.monotonic()
                if left <= 0 or self._proc.poll() is not None:
                    pytest.fail(f"no answer to probe {probe_id} in {self.netns}: {self._stderr()}")
                self._cond.wait(left)
            return self._answers.pop(probe_id)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(5)
        for stream in (self._proc.stdout, self._proc.stderr):
            if stream is not None:
                stream.close()


@dataclasses.dataclass(frozen=True)
class LabPod:
    """A pod the daemon attached, its addresses per interface and its agent."""

    pod: Pod
    addresses: Mapping[str, tuple[str, ...]]  # ifname -> bare addresses (no link-local)
    agent: Agent = dataclasses.field(repr=False, compare=False)

    @property
    def key(self) -> str:
        return f"{self.pod.ns}/{self.pod.name}"

    @property
    def netns(self) -> str:
        return self.pod.netns

    def ip(self, ifname: str = "net1", version: int = 4) -> str:
        """The pod's one address of IP `version` on `ifname`."""
        found = [
            a for a in self.addresses.get(ifname, ()) if ipaddress.ip_address(a).version == version
        ]
        assert len(found) == 1, f"{self.key} has {found} as IPv{version} on {ifname}"
        return found[0]


@dataclasses.dataclass(frozen=True)
class Expect:
    """`kind` traffic from `src` to `dst` (port `port`) passes, or is blocked."""

    src: LabPod
    dst: str
    kind: Kind
    port: int | None
    passes: bool

    def holds(self, outcome: str) -> bool:
        if self.passes:
            return outcome == "ok"
        return outcome in ("timeout", "eperm")

    def __str__(self) -> str:
        where = self.dst if self.port is None else f"[{self.dst}]:{self.port}"
        verdict = "passes" if self.passes else "is blocked"
        return f"{self.kind} {self.src.key} -> {where} {verdict}"


def _parse(what: str) -> tuple[Kind, int | None]:
    kind, _, port = what.partition(":")
    if kind == "ping" and not port:
        return "ping", None
    if kind in ("tcp", "udp") and port.isdigit():
        return ("tcp" if kind == "tcp" else "udp"), int(port)
    raise ValueError(f"a probe is 'ping', 'tcp:PORT' or 'udp:PORT', not {what!r}")


def passes(src: LabPod, dst: str, *probes: str) -> list[Expect]:
    """Each of `probes` ("ping", "tcp:8080", "udp:5353") from `src` to `dst` passes."""
    return [Expect(src, dst, *_parse(p), passes=True) for p in probes]


def blocked(src: LabPod, dst: str, *probes: str) -> list[Expect]:
    """Each of `probes` from `src` to `dst` is dropped (no answer, or refused to be sent)."""
    return [Expect(src, dst, *_parse(p), passes=False) for p in probes]


def selecting(**labels: str) -> dict[str, Any]:
    return {"matchLabels": labels}


def relabel_scene(
    lab: PolicyLab, network: str, near_labels: Mapping[str, str]
) -> tuple[LabPod, LabPod, LabPod, LabPod]:
    """In namespace "relabel", by-pod (admitting pods labelled access=yes) and by-ns (admitting
    namespaces labelled trust=yes), each isolated on `network`; near (`near_labels`) beside them
    and far in "relabel-far", neither admitted yet. The four pods, in that order."""
    lab.namespace("relabel")
    lab.namespace("relabel-far")
    by_pod = lab.pod("relabel", "by-pod", network, labels={"role": "by-pod"})
    by_ns = lab.pod("relabel", "by-ns", network, labels={"role": "by-ns"})
    near = lab.pod("relabel", "near", network, labels=near_labels)
    far = lab.pod("relabel-far", "far", network)
    lab.policy(
        "relabel",
        "by-pod",
        {
            "podSelector": selecting(role="by-pod"),
            "ingress": [{"from": [{"podSelector": selecting(access="yes")}]}],
        },
        network,
    )
    lab.policy(
        "relabel",
        "by-ns",
        {
            "podSelector": selecting(role="by-ns"),
            "ingress": [{"from": [{"namespaceSelector": selecting(trust="yes")}]}],
        },
        network,
    )
    return by_pod, by_ns, near, far


def _names(table: str, word: str) -> bool:
    """Whether `word` (an address, a UID) appears in `table` as a whole word."""
    return re.search(rf"(?<![\w.:-]){re.escape(word)}(?![\w.:-])", table) is not None


def table_interfaces(table: str) -> set[str]:
    """Every interface a netattach table names (`iifname "x"` / `oifname "x"`)."""
    return set(re.findall(r'[io]ifname "([^"]+)"', table))


# -- the cluster's objects, on either feed ------------------------------------------------------


class Objects(Protocol):
    """How a lab writes the cluster's objects: manifests or API objects."""

    def namespace(self, name: str, labels: Mapping[str, str]) -> None: ...

    def nad(self, name: str, config: Mapping[str, Any]) -> None: ...

    def pod(
        self,
        ns: str,
        name: str,
        networks: str,
        labels: Mapping[str, str],
        ports: Sequence[Mapping[str, Any]],
    ) -> str:
        """Create the pod; its UID."""
        ...

    def relabel_pod(self, ns: str, name: str, labels: Mapping[str, str]) -> None: ...

    def policy(self, ns: str, name: str, spec: Mapping[str, Any], policy_for: str) -> str:
        """Create or replace the policy; its UID."""
        ...

    def delete_policy(self, ns: str, name: str) -> None: ...


@dataclasses.dataclass
class _FilePod:
    uid: str
    networks: str
    labels: dict[str, str]
    ports: list[dict[str, Any]]


class FileObjects:
    """Manifests in the directory feed's directory (`Cluster.add_*`)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._pods: dict[tuple[str, str], _FilePod] = {}

    def namespace(self, name: str, labels: Mapping[str, str]) -> None:
        self.cluster.add_namespace(name, labels)

    def nad(self, name: str, config: Mapping[str, Any]) -> None:
        self.cluster.add_nad(NAD_NS, name, config)

    def _write_pod(self, ns: str, name: str, pod: _FilePod) -> None:
        containers = [{"name": "main", "image": objects.PAUSE_IMAGE, "ports": pod.ports}]
        self.cluster.add_pod(
            ns, name, pod.uid, pod.networks, labels=pod.labels, containers=containers
        )

    def pod(
        self,
        ns: str,
        name: str,
        networks: str,
        labels: Mapping[str, str],
        ports: Sequence[Mapping[str, Any]],
    ) -> str:
        pod = _FilePod(f"uid-{ns}-{name}", networks, dict(labels), [dict(p) for p in ports])
        self._pods[(ns, name)] = pod
        self._write_pod(ns, name, pod)
        return pod.uid

    def relabel_pod(self, ns: str, name: str, labels: Mapping[str, str]) -> None:
        pod = self._pods[(ns, name)]
        pod.labels = dict(labels)
        self._write_pod(ns, name, pod)

    def policy(self, ns: str, name: str, spec: Mapping[str, Any], policy_for: str) -> str:
        return self.cluster.add_policy(ns, name, spec, policy_for)

    def delete_policy(self, ns: str, name: str) -> None:
        self.cluster.delete_policy(ns, name)


class ApiObjects:
    """Objects in the fake API server (the daemon's Kubernetes feed)."""

    def __init__(self, api: RemoteKubeApi, node_name: str) -> None:
        self.api = api
        self.node_name = node_name

    def namespace(self, name: str, labels: Mapping[str, str]) -> None:
        if self.api.get("Namespace", name) is None:
            self.api.create(objects.namespace(name, labels=labels))
            return
        patch = _labels_patch(labels, self._labels("Namespace", name))
        self.api.patch("Namespace", name, {"metadata": {"labels": patch}})

    def nad(self, name: str, config: Mapping[str, Any]) -> None:
        self.api.create(objects.nad(name, NAD_NS, config=config))

    def pod(
        self,
        ns: str,
        name: str,
        networks: str,
        labels: Mapping[str, str],
        ports: Sequence[Mapping[str, Any]],
    ) -> str:
        obj = objects.pod(
            name,
            ns,
            node_name=self.node_name,
            labels=labels,
            annotations={"k8s.v1.cni.cncf.io/networks": networks},
            status={"phase": "Pending"},
        )
        if ports:
            obj["spec"]["containers"][0]["ports"] = [dict(p) for p in ports]
        uid: str = self.api.create(obj)["metadata"]["uid"]
        return uid

    def relabel_pod(self, ns: str, name: str, labels: Mapping[str, str]) -> None:
        patch = _labels_patch(labels, self._labels("Pod", name, ns))
        self.api.patch("Pod", name, {"metadata": {"labels": patch}}, ns)

    def _labels(self, kind: str, name: str, ns: str | None = None) -> Mapping[str, str]:
        found = self.api.get(kind, name, ns)
        assert found is not None, f"{kind} {ns}/{name} is not in the API"
        current: Mapping[str, str] = found["metadata"].get("labels") or {}
        return current

    def policy(self, ns: str, name: str, spec: Mapping[str, Any], policy_for: str) -> str:
        existing = self.api.get("MultiNetworkPolicy", name, ns)
        if existing is None:
            obj = objects.policy(name, ns, spec=dict(spec), policy_for=policy_for)
            created: str = self.api.create(obj)["metadata"]["uid"]
            return created
        existing["spec"] = dict(spec)
        existing["metadata"].setdefault("annotations", {})["k8s.v1.cni.cncf.io/policy-for"] = (
            policy_for
        )
        updated: str = self.api.update(existing)["metadata"]["uid"]
        return updated

    def delete_policy(self, ns: str, name: str) -> None:
        self.api.delete("MultiNetworkPolicy", name, ns)


def _labels_patch(
    labels: Mapping[str, str], current: Mapping[str, str] | None = None
) -> dict[str, str | None]:
    """A merge patch's labels that leave exactly `labels` (the keys of `current` not in it are
    removed with null), the API server's own `kubernetes.io/` labels apart."""
    patch: dict[str, str | None] = {
        key: None
        for key in current or {}
        if key not in labels and not key.startswith("kubernetes.io/")
    }
    patch.update(labels)
    return patch


# -- the lab ----------------------------------------------------------------------------------


class PolicyLab:
    """One node, its daemon, and the pods of a test module (see the module docstring)."""

    def __init__(self, cluster: Cluster, daemon: DaemonNode, objects: Objects) -> None:
        self.cluster = cluster
        self.daemon = daemon
        self.objects = objects
        self.pods: list[LabPod] = []

    # -- networks and namespaces --------------------------------------------------------------

    def bridge_network(self, name: str, *subnets: str) -> str:
        """NAD `other/<name>`: a bridge of its own with host-local, one address on each of
        `subnets` (one range set each: dual-stack with one IPv4 and one IPv6); the bridge."""
        ranges = [[{"subnet": subnet}] for subnet in subnets]
        ipam = {"type": "host-local", "dataDir": str(self.cluster.ipam), "ranges": ranges}
        config = bridge_list(None, ipam)
        self.objects.nad(name, config)
        bridge: str = config["plugins"][0]["bridge"]
        return bridge

    def static_network(self, name: str, *, bridge: str | None = None) -> None:
        """NAD `other/<name>`: a bridge of its own (or `bridge`, shared with another network)
        with static IPAM, addresses chosen per pod with the selection's `ips`."""
        config = bridge_list(None, {"type": "static"}, capabilities={"ips": True})
        if bridge is not None:
            config["plugins"][0]["bridge"] = bridge
        self.objects.nad(name, config)

    def namespace(self, name: str, **labels: str) -> None:
        """Create the namespace with `labels`, or relabel it to exactly `labels`."""
        self.objects.namespace(name, labels)

    # -- pods ---------------------------------------------------------------------------------

    def pod(
        self,
        ns: str,
        name: str,
        networks: str | Sequence[Mapping[str, Any]],
        *,
        labels: Mapping[str, str] | None = None,
        ports: Sequence[Mapping[str, Any]] = (),
    ) -> LabPod:
        """A pod selecting `networks` (the annotation's text, or its JSON form as a list),
        attached through the shim, with its agent running."""
        text = networks if isinstance(networks, str) else json.dumps(list(networks))
        uid = self.objects.pod(ns, name, text, dict(labels or {}), ports)
        pod = Pod(ns, name, uid, self.cluster.new_pod_netns(), f"na-ctr-{secrets.token_hex(6)}")
        reply = self.daemon.shim("ADD", pod)
        self.ok(reply, f"ADD {ns}/{name}")
        found = links.read_interfaces(pod.netns)
        addresses = {
            ifname: tuple(
                str(ipaddress.ip_interface(a).ip)
                for a in state.addresses
                if not ipaddress.ip_interface(a).ip.is_link_local
            )
            for ifname, state in found.items()
            if ifname != "lo"
        }
        lab_pod = LabPod(pod, addresses, Agent(pod.netns))
        self.pods.append(lab_pod)
        return lab_pod

    def relabel(self, pod: LabPod, **labels: str) -> None:
        """Give `pod` exactly `labels`."""
        self.objects.relabel_pod(pod.pod.ns, pod.pod.name, labels)

    def ok(self, reply: Reply, what: str) -> None:
        if (reply.rc, reply.code) != (0, None):
            pytest.fail(f"{what} failed: {reply}\n{self.log_tail()}")

    # -- policies -----------------------------------------------------------------------------

    def policy(self, ns: str, name: str, spec: Mapping[str, Any], policy_for: str) -> str:
        """Create (or change) a MultiNetworkPolicy; its UID."""
        return self.objects.policy(ns, name, spec, policy_for)

    def delete_policy(self, ns: str, name: str) -> None:
        self.objects.delete_policy(ns, name)

    # -- what the kernel shows ----------------------------------------------------------------

    def table(self, pod: LabPod) -> str | None:
        """`nft list table inet netattach` in the pod's netns, None when it has none."""
        return asyncio.run(apply.read_table(pod.netns))

    def tables(self, pod: LabPod) -> list[str]:
        return asyncio.run(apply.list_tables(pod.netns))

    def wait_table(
        self,
        pod: LabPod,
        present: bool,
        *,
        contains: Sequence[str] = (),
        lacks: Sequence[str] = (),
    ) -> str | None:
        """Wait until the pod has a netattach table naming each of `contains` and none of
        `lacks` (whole words: an address, a UID), or, unless `present`, has none at all; the
        table's text."""
        deadline = time.monotonic() + CONVERGE_TIMEOUT
        while True:
            table = self.table(pod)
            if not present and table is None:
                return None
            if (
                present
                and table is not None
                and all(_names(table, text) for text in contains)
                and not any(_names(table, text) for text in lacks)
            ):
                return table
            if time.monotonic() > deadline:
                wanted = f"a table with {list(contains)}, without {list(lacks)}"
                pytest.fail(
                    f"{pod.key} did not get {wanted if present else 'no table'} within "
                    f"{CONVERGE_TIMEOUT:g}s; it has:\n{table}\n{self.log_tail()}"
                )
            time.sleep(0.1)

    def log_tail(self) -> str:
        lines = self.daemon.log_text().splitlines()[-LOG_TAIL:]
        return "daemon log (tail):\n" + "\n".join(lines)

    # -- traffic ------------------------------------------------------------------------------

    def probe(self, expectations: Sequence[Expect]) -> list[str]:
        """One round: every probe started at once, the outcomes in order."""
        started = [(e.src.agent, e.src.agent.submit(e.kind, e.dst, e.port)) for e in expectations]
        return [agent.answer(probe_id) for agent, probe_id in started]

    def converge(
        self, *groups: Sequence[Expect] | Expect, timeout: float = CONVERGE_TIMEOUT
    ) -> None:
        """Poll until every expectation holds in two rounds in a row; fail after `timeout`."""
        expectations = [e for g in groups for e in ([g] if isinstance(g, Expect) else g)]
        assert expectations, "converge() needs at least one expectation"
        deadline = time.monotonic() + timeout
        streak = 0
        while True:
            outcomes = self.probe(expectations)
            for e, outcome in zip(expectations, outcomes, strict=True):
                if outcome == "refused" or outcome.startswith(("agent error", "answer", "ping")):
                    pytest.fail(f"{e}: the probe itself is broken ({outcome})")
            streak = streak + 1 if all(map(Expect.holds, expectations, outcomes)) else 0
            if streak >= 2:
                return
            if time.monotonic() > deadline:
                self._fail_converge(expectations, outcomes, timeout)

    def _fail_converge(
        self, expectations: Sequence[Expect], outcomes: Sequence[str], timeout: float
    ) -> None:
        unmet = [
            f"  {e}: got {o}" for e, o in zip(expectations, outcomes, strict=True) if not e.holds(o)
        ]
        owners = {a: p for p in self.pods for addrs in p.addresses.values() for a in addrs}
        involved = {owners[e.dst].key: owners[e.dst] for e in expectations if e.dst in owners}
        involved.update({e.src.key: e.src for e in expectations})
        tables = "\n".join(f"-- {key}:\n{self.table(pod)}" for key, pod in sorted(involved.items()))
        pytest.fail(
            f"traffic did not converge within {timeout:g}s:\n"
            + "\n".join(unmet)
            + f"\nnetattach tables:\n{tables}\n{self.log_tail()}"
        )

    def close(self) -> None:
        for pod in self.pods:
            pod.agent.close()


# -- scenarios both feeds run ------------------------------------------------------------


def restart_reconciles(lab: PolicyLab, ns: str, network: str) -> None:
    """Policies change while the daemon is down (SIGKILL); the restarted daemon applies the
    new one, removes the table of the deleted one (found by its UID), and never takes away the
    table of the policy in force all along."""
    lab.namespace(ns)
    kept = lab.pod(ns, "kept", network, labels={"app": "kept"})
    fresh = lab.pod(ns, "fresh", network, labels={"app": "fresh"})
    steady = lab.pod(ns, "steady", network, labels={"app": "steady"})
    client = lab.pod(ns, "client", network)
    old_uid = lab.policy(ns, "old", {"podSelector": {"matchLabels": {"app": "kept"}}}, network)
    lab.policy(ns, "steady", {"podSelector": {"matchLabels": {"app": "steady"}}}, network)
    lab.converge(
        blocked(client, kept.ip(), "tcp:8080"),
        blocked(client, steady.ip(), "tcp:8080"),
        passes(client, fresh.ip(), "tcp:8080"),
    )
    kept_table = lab.table(kept)
    assert kept_table is not None
    assert _names(kept_table, old_uid)  # the rules carry the policy's UID
    steady_table = lab.table(steady)

    lab.daemon.kill()
    lab.delete_policy(ns, "old")
    new_uid = lab.policy(ns, "new", {"podSelector": {"matchLabels": {"app": "fresh"}}}, network)
    # Nobody enforces anything while the daemon is down: the stale table is still there.
    assert lab.table(kept) == kept_table
    assert lab.table(fresh) is None

    lab.daemon.start()
    lab.converge(
        passes(client, kept.ip(), "tcp:8080", "ping"),
        blocked(client, fresh.ip(), "tcp:8080", "ping"),
        blocked(client, steady.ip(), "tcp:8080", "ping"),
        passes(client, fresh.ip("eth0"), "tcp:8080", "ping"),
    )
    lab.wait_table(kept, False)
    fresh_table = lab.wait_table(fresh, True, contains=[new_uid], lacks=[old_uid])
    assert fresh_table is not None
    assert table_interfaces(fresh_table) == {"net1"}
    assert lab.table(steady) == steady_table
    # Re-applied at start (atomically, the same script) perhaps, but never taken away.
    removals = [
        line
        for line in lab.daemon.logs[-1].read_text().splitlines()
        if "policy table removed" in line
    ]
    assert [line for line in removals if f"[{ns}/steady/" in line] == [], removals
    assert [line for line in removals if f"[{ns}/kept/" in line] != [], removals


# -- module-scoped scaffolding ----------------------------------------------------------------


@contextlib.contextmanager
def node_and_pods(root: Path) -> Iterator[Cluster]:
    """A node netns and a `Cluster` on it whose pod netns are all removed at the end."""
    reason = netns_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    made: list[str] = []

    def make_pod() -> str:
        name = unique("pod")
        made.append(name)
        return namespace.create(name)

    node_name = unique("node")
    node_path = namespace.create(node_name)
    try:
        links.set_up(node_path, "lo")
        links.set_node_forwarding(node_path)
        ipam = root / "ipam"
        ipam.mkdir(parents=True)
        yield Cluster(root / "cluster", Node(name=node_name, path=node_path), ipam, make_pod)
    finally:
        for name in made:
            namespace.remove(name)
        namespace.remove(node_name)


@contextlib.contextmanager
def policy_daemon(cluster: Cluster, shim: Path | None = None) -> Iterator[DaemonNode]:
    """`netattach daemon` for `cluster` with policy enabled, not started; stopped at the end.
    It installs `shim`, else its default (the static C shim, as on a node)."""
    daemon = DaemonNode(cluster, shim)
    daemon.settings["policy"] = {"enabled": True}
    try:
        yield daemon
    finally:
        daemon.close()


@contextlib.contextmanager
def lab_on(daemon: DaemonNode, objects: Objects) -> Iterator[PolicyLab]:
    """A lab on `daemon` (started by the caller once the NADs exist); agents stop at the end."""
    lab = PolicyLab(daemon.cluster, daemon, objects)
    try:
        yield lab
    finally:
        lab.close()
