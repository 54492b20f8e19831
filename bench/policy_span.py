"""MultiNetworkPolicy at cluster scale on a real API server (POL-SPAN, POL-CTRL): what the policy
controller and one node daemon cost with a simulated cluster, and what the API server sends.

The cluster is API objects only, written straight to `make k8s`'s kube-apiserver and etcd
(tests/kube/cluster.py): NODES Node objects, PODS pods spread over them (30 on the measured node,
`bench-node-0`) with their network-status written at creation, NAMESPACES namespaces, POLICIES
MultiNetworkPolicies (each selecting one app of its namespace, its ingress from another app of
the same namespace; one in ten from an app in the namespaces of a `tier` label).

    controller   `netattach policy-controller` started on that cluster: the time until its
                 first publish is done (every group written), its RSS, and its CPU while
                 CHURN pod changes a second (relabels between apps) run for SECONDS
    node         `netattach daemon` for bench-node-0 on the Kubernetes feed, in each mode
                 (`policy.peers: controller`, `allPods`): its RSS once synced and the groups
                 read, and the watch events it received per cluster pod change under the churn
                 (its `netattach_watch_events` metric)
    enforced     during the churn, one policy edit a second to a policy that selects one of
                 the measured node's pods (its ingress peer moved to another app, whose group
                 no node read before in controller mode, and a new ipBlock): from the API's
                 answer to the table in that pod's netns holding the ipBlock and the new peers,
                 in each mode; p50, p99, max
    API server   `apiserver_watch_events_total` (every event the API server sent any watcher)
                 per pod change during the churn, and what it is for NODES daemons: in
                 controller mode the events of the groups each node reads, in allPods mode every
                 pod change to every node

The daemons attach nothing (no ADD): each is given the records of a completed ADD for the
measured node's pods, each pod with a network namespace of its own (empty: the tables are
written into it as into an attached pod's), and holds the policies, the groups or every pod, as a
node does. Prints a table and writes bench/results/policy-span-<stamp>.json.

Usage: python -m bench.policy_span [--nodes N] [--pods N] [--policies N] [--churn PER_S]
                                   [--seconds S]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import random
import re
import selectors
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench import daemons, policy_churn
from netattach.cluster import kube_blocks, kube_client, model
from netattach.pods import records

HERE = Path(__file__).resolve().parent
NODE = "bench-node-0"
LOCAL_PODS = 30
APPS = 20  # apps per namespace
NETWORK = "net"
WRITERS = 32
PORTS = {"controller": 19341, "allPods": 19342}
EDIT_EVERY = 1.0  # one timed policy edit a second during the churn
ENFORCE_TIMEOUT = 30.0
MONITOR_SETTLE = 0.05  # for `nft monitor` to listen before the edit
MONITOR_FALLBACK = 0.5  # the tables checked this often whatever the monitors said


def namespace_of(index: int, namespaces: int) -> str:
    return f"bench-ns-{index % namespaces}"


def pod_body(index: int, namespaces: int, nodes: int) -> dict[str, Any]:
    node = NODE if index < LOCAL_PODS else f"bench-node-{1 + index % max(1, nodes - 1)}"
    ns = namespace_of(index, namespaces)
    address = f"10.{64 + (index >> 16) % 64}.{(index >> 8) & 255}.{index & 255}"
    status = [
        {"name": "default", "interface": "eth0", "ips": [f"172.16.0.{index & 255}"],
         "default": True},
        {"name": f"{ns}/{NETWORK}", "interface": "net1", "ips": [address]},
    ]  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"pod-{index}",
            "namespace": ns,
            "labels": {"app": f"a{index % APPS}"},
            "annotations": {model.STATUS_ANNOTATION: json.dumps(status)},
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        },
    }


def policy_body(index: int, namespaces: int) -> dict[str, Any]:
    ns = f"bench-ns-{index % namespaces}"
    app = index // namespaces % APPS
    peer: dict[str, Any] = {"podSelector": {"matchLabels": {"app": f"a{(app + 1) % APPS}"}}}
    if index % 10 == 9:
        peer["namespaceSelector"] = {"matchLabels": {"tier": f"t{index % 7}"}}
    return {
        "apiVersion": "k8s.cni.cncf.io/v1beta1",
        "kind": "MultiNetworkPolicy",
        "metadata": {
            "name": f"pol-{index}",
            "namespace": ns,
            "annotations": {"k8s.v1.cni.cncf.io/policy-for": NETWORK},
        },
        "spec": {
            "podSelector": {"matchLabels": {"app": f"a{app}"}},
            "ingress": [{"from": [peer]}],
        },
    }


async def _write_all(http: Any, items: list[tuple[str, dict[str, Any]]]) -> None:
    gate = asyncio.Semaphore(WRITERS)

    async def one(path: str, body: dict[str, Any]) -> None:
        async with gate:
            await kube_blocks.send_json(http, "POST", path, body, conflict_ok=True)

    await asyncio.gather(*(one(p, b) for p, b in items))


async def populate(kubeconfig: Path, nodes: int, pods: int, policies: int) -> dict[str, float]:
    api = kube_client.ApiClients(kubeconfig, kube_client.KubeTiming(request_timeout=60.0))
    namespaces = max(1, pods // 300)
    took: dict[str, float] = {}
    try:
        began = time.monotonic()
        await _write_all(api.writes, [
            ("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {
                "name": f"bench-ns-{i}", "labels": {"tier": f"t{i % 7}"}}})
            for i in range(namespaces)
        ])  # fmt: skip
        await _write_all(api.writes, [
            ("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": NODE if i == 0 else f"bench-node-{i}"}})
            for i in range(nodes)
        ])  # fmt: skip
        took["namespaces_and_nodes_s"] = time.monotonic() - began
        began = time.monotonic()
        for start in range(0, pods, 5000):
            batch = range(start, min(pods, start + 5000))
            await _write_all(api.writes, [
                (f"/api/v1/namespaces/{namespace_of(i, namespaces)}/pods",
                 pod_body(i, namespaces, nodes))
                for i in batch
            ])  # fmt: skip
        took["pods_s"] = time.monotonic() - began
        await _write_all(api.writes, [
            (f"/apis/k8s.cni.cncf.io/v1beta1/namespaces/bench-ns-{i % namespaces}/"
             "multi-networkpolicies", policy_body(i, namespaces))
            for i in range(policies)
        ])  # fmt: skip
    finally:
        await api.aclose()
    return took


class Churn:
    """PER_S pod relabels a second (one app to another), from a thread, until stopped."""

    def __init__(self, kubeconfig: Path, pods: int, namespaces: int, per_s: float) -> None:
        self.kubeconfig, self.pods, self.namespaces, self.per_s = (
            kubeconfig,
            pods,
            namespaces,
            per_s,
        )
        self.done = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(30)
        return self.done

    async def _run(self) -> None:
        api = kube_client.ApiClients(self.kubeconfig, kube_client.KubeTiming())
        rng = random.Random(7)
        try:
            began = time.monotonic()
            while not self._stop.is_set():
                index = rng.randrange(LOCAL_PODS, self.pods)  # never the measured node's own
                ns = namespace_of(index, self.namespaces)
                path = f"/api/v1/namespaces/{ns}/pods/pod-{index}"
                patch = {"metadata": {"labels": {"app": f"a{rng.randrange(APPS)}"}}}
                await kube_blocks.send_json(api.writes, "PATCH", path, patch,
                                            content_type=kube_blocks.MERGE_PATCH)  # fmt: skip
                self.done += 1
                behind = began + self.done / self.per_s - time.monotonic()
                if behind > 0:
                    await asyncio.sleep(behind)
        finally:
            await api.aclose()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metric(port: int, name: str) -> dict[str, float]:
    """`name`'s samples on a daemon's /metrics, by their label text."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(name):
            key, _, value = line.rpartition(" ")
            out[key[len(name) :]] = float(value)
    return out


def apiserver_watch_events(admin_http: Any) -> float:
    text = admin_http.get("/metrics").body.decode()
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
        if line.startswith("apiserver_watch_events_total{")
    )  # fmt: skip


def _listed(admin: Any, path: str) -> list[Any]:
    items: list[Any] = []
    token = ""
    while True:
        query = {"limit": "5000", **({"continue": token} if token else {})}
        page = admin.get(path, **query).json()
        items += page.get("items") or []
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return items


def groups_match(admin: Any) -> bool:
    """Whether the published PolicyPeerGroups are the groups computed afresh from the API's
    pods, namespaces and policies (the controller kept up with the churn)."""
    from netattach.policy import groups
    from netattach.policy import model as policy_model

    afresh = groups.PeerGroups()
    for ns in _listed(admin, "/api/v1/namespaces"):
        afresh.set_namespace(ns["metadata"]["name"], ns["metadata"].get("labels") or {})
    for pod in _listed(admin, "/api/v1/pods"):
        afresh.set_pod(pod)
    afresh.set_policies(
        policy_model.parse_policy(p)
        for p in _listed(admin, "/apis/k8s.cni.cncf.io/v1beta1/multi-networkpolicies")
    )
    published: dict[str, set[str]] = {}
    for item in _listed(admin, f"/apis/{model.PEER_GROUP_API}/policypeergroups"):
        group_id = item["metadata"]["labels"][model.PEER_GROUP_LABEL]
        published.setdefault(group_id, set()).update(m["pod"] for m in item["spec"]["members"])
    return published == {key.id(): members for key, members in afresh.groups().items()}


def governed(policies: int, namespaces: int) -> list[tuple[int, int]]:
    """(policy, pod) index pairs: each policy that selects one of the measured node's pods, with
    the first such pod."""
    out = []
    for index in range(policies):
        ns, app = index % namespaces, index // namespaces % APPS
        for pod in range(LOCAL_PODS):
            if pod % namespaces == ns and pod % APPS == app:
                out.append((index, pod))
                break
    return out


def give_records(admin: Any, state: Path, namespaces: int, netns: list[str]) -> None:
    """The records of completed ADDs for the measured node's pods, each in its own netns."""
    saved = records.PodRecords(state)
    for index, name in enumerate(netns):
        pod = admin.get(f"/api/v1/namespaces/{namespace_of(index, namespaces)}/pods/pod-{index}")
        record = policy_churn.record_of(f"span{index:04d}", f"/run/netns/{name}", pod.json())
        saved.save(record, durable=False)


def _holds(table: str, address: str) -> bool:
    return re.search(rf"(?<![\d.]){re.escape(address)}(?![\d])", table) is not None


def _monitor(netns: str) -> subprocess.Popen[bytes]:
    command = ["ip", "netns", "exec", netns, "nft", "monitor", "ruleset"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


class Enforcement:
    """Policy edits, each timed from the API's answer to the edited rule in the governed pod's
    table, in each daemon's netns of that pod."""

    def __init__(
        self, admin: Any, policies: int, namespaces: int, netns: dict[str, list[str]]
    ) -> None:
        self.admin, self.namespaces, self.netns = admin, namespaces, netns
        self.pairs = governed(policies, namespaces)
        self.took: dict[str, list[float]] = {mode: [] for mode in netns}
        self.edits = 0

    def _addresses(self, ns: str, app: str) -> set[str]:
        pods = self.admin.get(f"/api/v1/namespaces/{ns}/pods", labelSelector=f"app={app}").json()
        out = set()
        for pod in pods.get("items") or []:
            for entry in json.loads(pod["metadata"]["annotations"][model.STATUS_ANNOTATION]):
                if entry["name"].endswith(f"/{NETWORK}"):
                    out.update(entry["ips"])
        return out

    def once(self) -> None:
        if not self.pairs:
            raise RuntimeError("no policy selects a pod of the measured node")
        n = self.edits
        self.edits += 1
        policy, pod = self.pairs[n % len(self.pairs)]
        ns = namespace_of(policy, self.namespaces)
        own = policy // self.namespaces % APPS
        app = f"a{(own + 2 + n % (APPS - 2)) % APPS}"
        marker = f"10.250.{n >> 8 & 255}.{n & 255}"
        peers = self._addresses(ns, app)
        patch = {"spec": {"ingress": [{"from": [
            {"podSelector": {"matchLabels": {"app": app}}},
            {"ipBlock": {"cidr": f"{marker}/32"}},
        ]}]}}  # fmt: skip
        path = f"/apis/k8s.cni.cncf.io/v1beta1/namespaces/{ns}/multi-networkpolicies/pol-{policy}"
        # `nft monitor` in each netns wakes the check when the table changes: no polling load
        monitors = {mode: _monitor(names[pod]) for mode, names in self.netns.items()}
        try:
            time.sleep(MONITOR_SETTLE)
            answer = self.admin.patch(path, patch, kube_blocks.MERGE_PATCH)
            if answer.status != 200:
                raise RuntimeError(f"patching pol-{policy}: {answer.status} {answer.body[:200]!r}")
            began = time.monotonic()
            self._wait(monitors, pod, marker, peers, began)
        finally:
            for monitor in monitors.values():
                monitor.kill()
                monitor.wait()
        if time.monotonic() - began > ENFORCE_TIMEOUT:
            raise RuntimeError(f"pol-{policy}'s edit {n} not enforced in {ENFORCE_TIMEOUT:g}s")

    def _wait(
        self,
        monitors: dict[str, subprocess.Popen[bytes]],
        pod: int,
        marker: str,
        peers: set[str],
        began: float,
    ) -> None:
        """Until each netns's table holds the marker and a new peer: checked when its monitor
        prints a change, and every MONITOR_FALLBACK seconds in case a line came before the
        monitor listened."""
        with selectors.DefaultSelector() as watching:
            for mode, monitor in monitors.items():
                assert monitor.stdout is not None
                watching.register(monitor.stdout, selectors.EVENT_READ, mode)
            waiting = set(monitors)
            check = set(waiting)
            while waiting and time.monotonic() - began <= ENFORCE_TIMEOUT:
                for mode in sorted(check & waiting):
                    table = subprocess.run(
                        ["ip", "netns", "exec", self.netns[mode][pod], "nft", "list", "table",
                         "inet", "netattach"], capture_output=True, text=True, check=False,
                    ).stdout  # fmt: skip
                    if _holds(table, marker) and (
                        not peers or any(_holds(table, a) for a in peers)
                    ):
                        self.took[mode].append(time.monotonic() - began)
                        waiting.discard(mode)
                ready = watching.select(MONITOR_FALLBACK)
                check = {key.data for key, _ in ready} if ready else set(waiting)
                for key, _ in ready:
                    os.read(key.fd, 65536)

    def summary(self) -> dict[str, dict[str, float]]:
        out = {}
        for mode, took in self.took.items():
            ordered = sorted(took)
            out[mode] = {
                "edits": len(ordered),
                "p50_s": statistics.median(ordered),
                "p99_s": ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))],
                "max_s": ordered[-1],
            }
        return out


def start_daemon(work: Path, kubeconfig: Path, peers: str) -> subprocess.Popen[bytes]:
    root = work / peers
    (root / "networks").mkdir(parents=True)
    default = {
        "cniVersion": "1.0.0",
        "name": "bench-default",
        "type": "bridge",
        "bridge": "na-bspan0",
        "ipam": {"type": "host-local", "subnet": "10.88.0.0/16"},
    }
    (root / "networks" / "00-default.conf").write_text(json.dumps(default))  # fmt: skip
    settings = {
        "clusterNetwork": "bench-default",
        "networksDir": str(root / "networks"),
        "binDirs": ["/usr/lib/cni"],
        "stateDir": str(root / "state"),
        "nodeName": NODE,
        "feed": {"kubernetes": {"kubeconfig": str(kubeconfig)}},
        "daemonSocket": str(root / "netattach.sock"),
        "cniConfDir": str(root / "conf"),
        "cniBinDir": str(root / "bin"),
        "metrics": {"address": f"127.0.0.1:{PORTS[peers]}"},
        "policy": {"enabled": True, "peers": peers},
        "cleanupOnExit": True,
        "logLevel": os.environ.get("NETATTACH_BENCH_LOG_LEVEL", "warning"),
    }
    (root / "daemon.yaml").write_text(json.dumps(settings))
    log = (root / "daemon.log").open("wb")
    return subprocess.Popen(
        [str(daemons.DAEMON), "daemon", "--config", str(root / "daemon.yaml")],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def wait(
    what: str, ready: Any, timeout: float, proc: subprocess.Popen[bytes] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if ready():
                return
        except OSError:
            pass
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what}: the process exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout:g}s")
        time.sleep(0.2)


def measure(nodes: int, pods: int, policies: int, churn: float, seconds: float) -> dict[str, Any]:
    from tests.kube.cluster import local_cluster

    result: dict[str, Any] = {"nodes": nodes, "pods": pods, "policies": policies,
                              "churn_per_s": churn, "seconds": seconds}  # fmt: skip
    namespaces = max(1, pods // 300)
    with (
        tempfile.TemporaryDirectory(prefix="na-bench-span-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        work = Path(tmp)
        with local_cluster(work / "cluster") as cluster:
            kubeconfig = cluster.admin_kubeconfig
            admin = cluster.admin_http()
            result["populate"] = asyncio.run(populate(kubeconfig, nodes, pods, policies))
            held = {m: stack.enter_context(policy_churn.namespaces(LOCAL_PODS)) for m in PORTS}
            for mode, names in held.items():
                give_records(admin, work / mode / "state", namespaces, names)
            log = (work / "controller.log").open("wb")
            began = time.monotonic()
            controller = subprocess.Popen(
                [str(daemons.DAEMON), "policy-controller", f"--kubeconfig={kubeconfig}",
                 "--identity=bench", "--lease-namespace=default"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
            running = [controller]
            try:
                logged = work / "controller.log"
                wait("the controller's first publish",
                     lambda: "published" in logged.read_text(), 900.0, controller)  # fmt: skip
                result["controller"] = {
                    "first_publish_s": time.monotonic() - began,
                    "groups": len(admin.get(f"/apis/{model.PEER_GROUP_API}/policypeergroups")
                                  .json().get("items") or []),
                    "rss_kib": daemons.memory(controller.pid)["VmRSS"],
                }  # fmt: skip
                for peers in PORTS:
                    proc = start_daemon(work, kubeconfig, peers)
                    running.append(proc)
                    wait(f"the {peers} daemon synced",
                         lambda p=peers: metric(PORTS[p], "netattach_cache_synced").get("") == 1.0,
                         600.0, proc)  # fmt: skip
                time.sleep(5.0)  # the groups read, a pass done
                for peers, proc in zip(PORTS, running[1:], strict=True):
                    result[f"node_{peers}"] = {"rss_kib": daemons.memory(proc.pid)["VmRSS"]}
                events_before = {p: metric(PORTS[p], "netattach_watch_events_total") for p in PORTS}
                daemon_cpu = {
                    p: cpu_seconds(proc.pid) for p, proc in zip(PORTS, running[1:], strict=True)
                }
                cpu_before = cpu_seconds(controller.pid)
                api_before = apiserver_watch_events(admin)
                flow = Churn(kubeconfig, pods, namespaces, churn)
                edits = Enforcement(admin, policies, namespaces, held)
                flow.start()
                ends = time.monotonic() + seconds
                while time.monotonic() < ends:
                    edited = time.monotonic()
                    edits.once()
                    time.sleep(max(0.0, edited + EDIT_EVERY - time.monotonic()))
                changes = flow.stop()
                result["enforced"] = edits.summary()
                time.sleep(2.0)  # what is on its way arrives
                result["churn"] = {"pod_changes": changes}
                wait("the groups caught up", lambda: groups_match(admin), 120.0)
                result["groups_match"] = True
                result["controller"]["cpu_share"] = (
                    cpu_seconds(controller.pid) - cpu_before
                ) / seconds
                result["controller"]["rss_after_churn_kib"] = daemons.memory(controller.pid)[
                    "VmRSS"
                ]
                result["apiserver_watch_events_per_change"] = (
                    apiserver_watch_events(admin) - api_before
                ) / max(1, changes)
                for peers, proc in zip(PORTS, running[1:], strict=True):
                    result[f"node_{peers}"]["cpu_share"] = (
                        cpu_seconds(proc.pid) - daemon_cpu[peers]
                    ) / seconds
                    result[f"node_{peers}"]["rss_after_churn_kib"] = daemons.memory(proc.pid)[
                        "VmRSS"
                    ]
                    after = metric(PORTS[peers], "netattach_watch_events_total")
                    got = {k: after[k] - events_before[peers].get(k, 0.0) for k in after}
                    result[f"node_{peers}"]["watch_events"] = got
                    result[f"node_{peers}"]["watch_events_per_change"] = sum(got.values()) / max(
                        1, changes
                    )
            finally:
                for proc in running:
                    proc.terminate()
                for proc in running:
                    try:
                        proc.wait(20)
                    except subprocess.TimeoutExpired:
                        proc.kill()
    # What NODES daemons would be sent: in allPods mode every pod change goes to every node; in
    # controller mode a node is sent the changes of the groups it reads (this node's share,
    # with twice a node's average pods, taken for every node: an upper bound).
    spanned = result["node_controller"]["watch_events_per_change"]
    result["fan_out"] = {
        "allPods_events_per_s_per_node": churn,
        "allPods_events_per_s_total": churn * nodes,
        "controller_events_per_s_per_node": churn * spanned,
        "controller_events_per_s_total_bound": churn * nodes * spanned,
    }
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--policies", type=int, default=1_000)
    parser.add_argument("--churn", type=float, default=30.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    result = measure(args.nodes, args.pods, args.policies, args.churn, args.seconds)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = HERE / "results" / f"policy-span-{stamp}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    print(f"written {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
