"""CLU-NODES: three real nodes (tests/cluster/real_cluster.py), netattach from `make image`
through `kubectl apply -k deploy/`, pods placed by kube-scheduler and reaching each other across
nodes over their secondary networks.

Pods are made and deleted through the API only; packets are sent from each pod's network
namespace (the pods run a pause container, which has no shell), as the host reaches it.

The spread and policy scenarios give each pod its address on the spanning networks through its
selection's `ips` (the `static` IPAM plugin): their pods are made one by one. The IPAM scenario
takes them from netattach's own IPAM (IPAM-UNIQUE).
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cluster.real_cluster import DATA_BRIDGE, MACVLAN_MASTER, RealCluster, real_cluster
from tests.e2e.daemon_harness import python_in
from tests.kube.api import ApiStatusError
from tests.node import real_node
from tests.node.harness import require_real_node
from tests.node.node_image import node_image_archive
from tests.node.real_node import Leftovers, connect_outcome, wait_until

pytestmark = [pytest.mark.netns, pytest.mark.req("CLU-NODES"), pytest.mark.timeout(900)]

NS = "na-spread"
CLEAN = Leftovers()
# the networks that span the nodes: a macvlan on data uplink 1, the premade bridge on uplink 2
MACVLAN_NET = "data-mv"
BRIDGE_NET = "data-br"
SUBNETS = {MACVLAN_NET: "10.70.0.0/24", BRIDGE_NET: "10.71.0.0/24"}
PLUGINS: dict[str, dict[str, Any]] = {
    MACVLAN_NET: {"type": "macvlan", "master": MACVLAN_MASTER, "mode": "bridge"},
    BRIDGE_NET: {"type": "bridge", "bridge": DATA_BRIDGE},
}
STATIC = {"type": "static"}
SPREAD = {"app": "na-spread"}
PORT = 7070
# a network of each node's own (a bridge the plugin makes, host-local addresses): what pods that
# move between nodes, made by a Deployment, can have until addresses are cluster-wide
LOCAL_NET = "local-br"
LOCAL_BRIDGE = "na-loc"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    require_real_node()
    with real_cluster(tmp_path_factory.mktemp("na-cluster")) as made:
        made.deploy(node_image_archive())
        first = made.nodes[0]
        first.create_namespace(NS)
        for name, plugin in PLUGINS.items():
            create_nad(made, name, {**plugin, "capabilities": {"ips": True}, "ipam": STATIC})
        local_ipam = {"type": "host-local", "subnet": "10.73.0.0/24"}
        create_nad(made, LOCAL_NET, {"type": "bridge", "bridge": LOCAL_BRIDGE, "ipam": local_ipam})
        for node in made.nodes:
            node.bridges.add(LOCAL_BRIDGE)  # a bridge stays on its node
        yield made


@pytest.fixture
def clean_cluster(cluster: RealCluster) -> Iterator[RealCluster]:
    """The cluster; at teardown no address held by two live pods on one network, then the test's
    pods deleted and nothing left of them on any node."""
    yield cluster
    assert held_twice(cluster) == {}
    first = cluster.nodes[0]
    cluster.kubectl("-n", NS, "delete", "deployments", "--all", "--wait=true")
    for pod in cluster.api.list("Pod", NS):
        with contextlib.suppress(real_node.NodeError):
            first.delete_pod(NS, pod["metadata"]["name"])
    for node in cluster.nodes:
        assert (node.name, node.wait_clean()) == (node.name, CLEAN)


def held_twice(cluster: RealCluster) -> dict[tuple[str, str], list[str]]:
    """Each (network, address) two or more live pods of NS hold, with the pods. A network of
    each node's own (LOCAL_NET) is one network a node: its addresses are told apart by node."""
    holders: dict[tuple[str, str], list[str]] = {}
    for pod in cluster.api.list("Pod", NS):
        if pod["metadata"].get("deletionTimestamp"):
            continue
        annotations = pod["metadata"].get("annotations") or {}
        text = annotations.get("k8s.v1.cni.cncf.io/network-status")
        for entry in json.loads(text) if text else []:
            network = entry["name"]
            if network == f"{NS}/{LOCAL_NET}":
                network += f"@{pod['spec']['nodeName']}"
            for address in entry.get("ips", []):
                holders.setdefault((network, address), []).append(pod["metadata"]["name"])
    return {key: pods for key, pods in holders.items() if len(pods) > 1}


def create_nad(cluster: RealCluster, name: str, plugin: dict[str, Any]) -> None:
    """The NAD `name` in NS, one plugin."""
    cluster.api.create(real_node.nad_object(NS, name, plugin))


def spread_pod(cluster: RealCluster, index: int) -> dict[str, Any]:
    """Pod `index` of the spread set: both spanning networks at addresses of its own, placed by
    kube-scheduler at most one pod apart across the nodes."""
    selections = [
        {"name": name, "ips": [f"{ipaddress.ip_network(subnet)[10 + index]}/24"]}
        for name, subnet in SUBNETS.items()
    ]
    pod = cluster.nodes[0].pod_object(
        NS, f"spread-{index}", json.dumps(selections), node_name=None, labels=SPREAD
    )
    pod["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": SPREAD},
        }
    ]
    return pod


def network_status(cluster: RealCluster, name: str) -> list[dict[str, Any]]:
    """The pod's network-status once published."""
    first = cluster.nodes[0]

    def published() -> list[dict[str, Any]] | None:
        return first.network_status(NS, name)

    found: list[dict[str, Any]] = wait_until(f"{name}'s network-status", published, 30.0)
    return found


def address_on(status: list[dict[str, Any]], network: str) -> str:
    """The pod's address on `network` (a NAD of NS, or the cluster's default network)."""
    (entry,) = [e for e in status if e["name"] in (network, f"{NS}/{network}")]
    return str(entry["ips"][0]).split("/")[0]


def in_netns(netns: str, *argv: str, timeout: float = 10.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["nsenter", f"--net={netns}", "--", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


LISTENER = f"""
import socket
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", {PORT}))
server.listen(64)
print("ready", flush=True)
while True:
    peer, _ = server.accept()
    peer.sendall(b"na-pong")
    peer.close()
"""

CONNECT = """
import socket, sys
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5) as conn:
    sys.stdout.write(conn.recv(16).decode())
"""


@contextlib.contextmanager
def tcp_listeners(netns_paths: list[str]) -> Iterator[None]:
    """A TCP server on PORT in each namespace, answering `na-pong`; ended on the way out."""
    procs: list[subprocess.Popen[str]] = []
    try:
        for netns in netns_paths:
            proc = subprocess.Popen(
                python_in(netns, LISTENER),
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            procs.append(proc)
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)


def test_pods_on_different_nodes_reach_each_other_over_each_secondary_network(
    clean_cluster: RealCluster,
) -> None:
    cluster = clean_cluster
    first = cluster.nodes[0]
    for index in range(6):
        cluster.api.create(spread_pod(cluster, index))
    pods = [first.wait_running(NS, f"spread-{index}") for index in range(6)]

    # kube-scheduler spread them: two on each node
    placed = sorted(pod["spec"]["nodeName"] for pod in pods)
    assert placed == sorted([node.name for node in cluster.nodes] * 2)

    # each pod's network-status is what its netns holds
    statuses = {}
    netns = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        node = cluster.node_of(pod)
        status = network_status(cluster, name)
        assert [entry["name"] for entry in status] == [
            "cluster-default",
            f"{NS}/{MACVLAN_NET}",
            f"{NS}/{BRIDGE_NET}",
        ]
        node.check_network_status(pod, status)
        statuses[name] = status
        netns[name] = node.pod_netns(pod)

    # every pair on different nodes: ICMP and TCP over each secondary network, both ways (and
    # over the cluster default network, routed between the nodes' podCIDRs)
    with tcp_listeners(list(netns.values())):
        for a, b in itertools.permutations(pods, 2):
            if a["spec"]["nodeName"] == b["spec"]["nodeName"]:
                continue
            source, target = a["metadata"]["name"], b["metadata"]["name"]
            for network in ("cluster-default", MACVLAN_NET, BRIDGE_NET):
                address = address_on(statuses[target], network)
                ping = in_netns(netns[source], "ping", "-c", "1", "-W", "3", address)
                assert ping.returncode == 0, (source, target, network, ping.stdout, ping.stderr)
                reply = subprocess.run(
                    python_in(netns[source], CONNECT, address, str(PORT)),
                    capture_output=True,
                    text=True,
                    timeout=30,
                    check=False,
                )
                assert reply.stdout == "na-pong", (source, target, network, reply.stderr)


@pytest.mark.req("IPAM-UNIQUE", "IPAM-NOLEAK")
def test_netattachs_ipam_on_a_network_that_spans_nodes_gives_each_address_once(
    clean_cluster: RealCluster,
) -> None:
    """Where host-local gave the first pod of every node the same address (it keeps its
    allocations on each node's disk: the expected failure of issue 36), netattach's IPAM gives
    each pod of the spanning network its own, from blocks each node holds as IPBlocks; the pods
    reach each other across nodes over it, and their DELs free every address."""
    cluster = clean_cluster
    first = cluster.nodes[0]
    name = "data-na"
    ipam = {"type": "netattach", "subnet": "10.72.0.0/24", "reuseDelay": 0}
    create_nad(cluster, name, {"type": "bridge", "bridge": DATA_BRIDGE, "ipam": ipam})
    pods = [f"na-{node.name}-{n}" for node in cluster.nodes for n in range(2)]
    try:
        for node in cluster.nodes:
            for n in range(2):
                pod = first.pod_object(NS, f"na-{node.name}-{n}", name, node_name=node.name)
                cluster.api.create(pod)
        addresses, netns = {}, {}
        for pod_name in pods:
            pod = first.wait_running(NS, pod_name)
            status = network_status(cluster, pod_name)
            cluster.node_of(pod).check_network_status(pod, status)
            addresses[pod_name] = address_on(status, name)
            netns[pod_name] = cluster.node_of(pod).pod_netns(pod)
        assert len(set(addresses.values())) == len(pods), addresses
        assert held_twice(cluster) == {}
        blocks = json.loads(cluster.kubectl("get", "ipblocks", "-o", "json"))["items"]
        held = {
            address: block["spec"]["node"]
            for block in blocks
            for address in (block.get("status") or {}).get("allocations") or {}
        }
        for pod_name, address in addresses.items():
            assert held.get(address) == first.pod(NS, pod_name)["spec"]["nodeName"]  # type: ignore[index]
        for a, b in itertools.permutations(pods, 2):
            if a.rsplit("-", 1)[0] != b.rsplit("-", 1)[0]:  # on different nodes
                ping = in_netns(netns[a], "ping", "-c", "1", "-W", "3", addresses[b])
                assert ping.returncode == 0, (a, b, ping.stdout, ping.stderr)
    finally:
        for pod_name in pods:
            first.delete_pod(NS, pod_name)
        cluster.api.http.request(
            "DELETE",
            f"/apis/k8s.cni.cncf.io/v1/namespaces/{NS}/network-attachment-definitions/{name}",
        )

    def all_freed() -> bool:
        items = json.loads(cluster.kubectl("get", "ipblocks", "-o", "json"))["items"]
        return not any((item.get("status") or {}).get("allocations") for item in items)

    wait_until("every address of the DELs freed in the IPBlocks", all_freed, 60.0)


@pytest.mark.req("IPAM-CLAIM")
def test_a_pod_naming_an_ipamclaim_keeps_its_address_when_made_again_on_another_node(
    clean_cluster: RealCluster,
) -> None:
    """A StatefulSet's or a VM's pod names an IPAMClaim (`ipam-claim-reference`): deleted and made
    again on another node it gets the same address on the spanning network, which no other pod
    gets meanwhile; the claim deleted, the address goes back to the pool."""
    cluster = clean_cluster
    first = cluster.nodes[0]
    name = "claim-na"
    ipam = {"type": "netattach", "subnet": "10.73.0.0/24", "reuseDelay": 0}
    create_nad(cluster, name, {"type": "bridge", "bridge": DATA_BRIDGE, "ipam": ipam})
    claims = f"/apis/k8s.cni.cncf.io/v1alpha1/namespaces/{NS}/ipamclaims"
    claim = {
        "apiVersion": "k8s.cni.cncf.io/v1alpha1",
        "kind": "IPAMClaim",
        "metadata": {"name": "vm-a"},
        "spec": {"network": name, "interface": "net1"},
    }
    response = cluster.api.http.request("POST", claims, body=claim)
    assert response.status == 201, response.body
    selection = json.dumps([{"name": name, "ipam-claim-reference": "vm-a"}])
    seen = []
    try:
        for node in cluster.nodes[:2]:
            pod = first.pod_object(NS, "na-vm-a", selection, node_name=node.name)
            cluster.api.create(pod)
            first.wait_running(NS, "na-vm-a")
            seen.append(address_on(network_status(cluster, "na-vm-a"), name))
            # a pod of the network on the third node meanwhile: never the claim's address
            other = f"na-other-{len(seen)}"
            cluster.api.create(first.pod_object(NS, other, name, node_name=cluster.nodes[2].name))
            first.wait_running(NS, other)
            assert address_on(network_status(cluster, other), name) != seen[-1]
            first.delete_pod(NS, "na-vm-a")
            first.delete_pod(NS, other)
        assert seen[0] == seen[1], seen
        got = cluster.api.http.request("GET", f"{claims}/vm-a")
        assert json.loads(got.body)["status"]["ips"] == [f"{seen[0]}/24"]
    finally:
        for pod_name in ("na-vm-a", "na-other-1", "na-other-2"):
            with contextlib.suppress(ApiStatusError):
                first.delete_pod(NS, pod_name)
        cluster.api.http.request("DELETE", f"{claims}/vm-a")
        cluster.api.http.request(
            "DELETE",
            f"/apis/k8s.cni.cncf.io/v1/namespaces/{NS}/network-attachment-definitions/{name}",
        )

    def claims_blocks_gone() -> bool:
        items = json.loads(cluster.kubectl("get", "ipblocks", "-o", "json"))["items"]
        return not any(item["spec"]["node"] == "" for item in items)

    # each daemon sweeps the claims' blocks at its lease renewal (every 20 s)
    wait_until("the deleted claim's address back in the pool", claims_blocks_gone, 90.0)


@pytest.mark.req("POL-PEERS", "POL-SELECT")
def test_a_policy_whose_peers_are_on_other_nodes_follows_their_labels(
    clean_cluster: RealCluster,
) -> None:
    cluster = clean_cluster
    first = cluster.nodes[0]
    roles = {"server": {"app": "server"}, "friend": {"role": "friend"}, "stranger": {}}
    addresses = {}
    for index, ((name, labels), node) in enumerate(zip(roles.items(), cluster.nodes, strict=True)):
        address = str(ipaddress.ip_network(SUBNETS[MACVLAN_NET])[50 + index])
        selection = json.dumps([{"name": MACVLAN_NET, "ips": [f"{address}/24"]}])
        pod = first.pod_object(NS, name, selection, node_name=node.name, labels=labels)
        cluster.api.create(pod)
        addresses[name] = address
    netns = {}
    for name in roles:
        pod = first.wait_running(NS, name)
        netns[name] = cluster.node_of(pod).pod_netns(pod)
    server = addresses["server"]
    assert connect_outcome(netns["friend"], server) == "refused"
    assert connect_outcome(netns["stranger"], server) == "refused"

    policy = cluster.api.create(
        {
            "apiVersion": "k8s.cni.cncf.io/v1beta1",
            "kind": "MultiNetworkPolicy",
            "metadata": {
                "name": "friends-only",
                "namespace": NS,
                "annotations": {"k8s.v1.cni.cncf.io/policy-for": f"{NS}/{MACVLAN_NET}"},
            },
            "spec": {
                "podSelector": {"matchLabels": roles["server"]},
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"podSelector": {"matchLabels": roles["friend"]}}]}],
            },
        }
    )
    uid = policy["metadata"]["uid"]

    def in_force() -> bool:
        listed = in_netns(netns["server"], "nft", "list", "table", "inet", "netattach")
        return uid in listed.stdout

    wait_until("the policy's table in the server's netns", in_force, 60.0)
    outcome = connect_outcome(netns["friend"], server)
    assert outcome == "refused", policy_peers(cluster)  # allowed: it reached the pod
    assert connect_outcome(netns["stranger"], server) == "dropped"

    # the stranger (on a third node) relabelled a friend: the server's node lets it in
    patch = {"metadata": {"labels": roles["friend"]}}
    response = cluster.api.http.patch(
        f"/api/v1/namespaces/{NS}/pods/stranger", patch, "application/merge-patch+json"
    )
    assert response.status == 200, response.body
    wait_until(
        "the relabelled stranger let in",
        lambda: connect_outcome(netns["stranger"], server) == "refused",
        30.0,
    )
    path = f"/apis/k8s.cni.cncf.io/v1beta1/namespaces/{NS}/multi-networkpolicies/friends-only"
    assert cluster.api.http.request("DELETE", path).status == 200
    wait_until("the policy gone from the server's netns", lambda: not in_force(), 60.0)


def policy_peers(cluster: RealCluster) -> str:
    """What the policy controller published and what the nodes logged, for a failure."""
    groups = cluster.kubectl("get", "policypeergroups", "-o", "yaml")
    lease = cluster.kubectl("get", "lease", "-n", "kube-system", "-o", "yaml")
    logs = []
    for node in cluster.nodes:  # the containers' logs, as the kubelet keeps them
        for path in sorted(node.fs("/var/log/pods").glob("kube-system_netattach*/*/*.log")):
            tail = path.read_text(errors="replace").splitlines()[-30:]
            logs.append(f"{node.name} {path.parent.parent.name}:\n" + "\n".join(tail))
    return f"groups:\n{groups}\nleases:\n{lease}\n" + "\n".join(logs)


def create_deployment(cluster: RealCluster, name: str, replicas: int, networks: str) -> None:
    """Created: a Deployment of `replicas` pause pods with `networks`, spread over the nodes
    where it can be (ScheduleAnyway: a cordoned or lost node does not stop the rest placed)."""
    labels = {"app": name}
    template = cluster.nodes[0].pod_object(NS, name, networks, node_name=None, labels=labels)
    template["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": labels},
        }
    ]
    made = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": template["metadata"]["annotations"]},
                "spec": template["spec"],
            },
        },
    }
    response = cluster.api.http.post(f"/apis/apps/v1/namespaces/{NS}/deployments", made)
    assert response.status == 201, response.body


def running_replicas(
    cluster: RealCluster,
    name: str,
    count: int,
    *,
    not_on: str = "",
    networks: tuple[str, ...] = (LOCAL_NET,),
) -> list[dict[str, Any]]:
    """The Deployment's `count` pods Running (none on node `not_on`), each with the default
    network and `networks`, its network-status what its netns holds; waited for."""

    def running() -> list[dict[str, Any]] | None:
        pods = [
            pod
            for pod in cluster.api.list("Pod", NS, label_selector=f"app={name}")
            if not pod["metadata"].get("deletionTimestamp")
        ]
        ready = [pod for pod in pods if (pod.get("status") or {}).get("phase") == "Running"]
        if len(ready) != count or len(pods) != count:
            return None
        if any(pod["spec"]["nodeName"] == not_on for pod in ready):
            return None
        return ready

    pods: list[dict[str, Any]] = wait_until(f"{count} pods of {name} Running", running, 180.0)
    for pod in pods:
        status = network_status(cluster, pod["metadata"]["name"])
        assert [entry["name"] for entry in status] == [
            "cluster-default", *(f"{NS}/{n}" for n in networks)
        ]  # fmt: skip
        cluster.node_of(pod).check_network_status(pod, status)
    return pods


def test_a_drained_node_keeps_nothing_and_its_pods_run_on_the_others(
    clean_cluster: RealCluster,
) -> None:
    cluster = clean_cluster
    create_deployment(cluster, "movers", 3, LOCAL_NET)
    pods = running_replicas(cluster, "movers", 3)
    drained = cluster.node_of(pods[0])
    try:
        cluster.kubectl(
            "drain", drained.name, "--ignore-daemonsets", "--force", "--grace-period=5",
            "--timeout=120s", timeout=180,
        )  # fmt: skip
        running_replicas(cluster, "movers", 3, not_on=drained.name)
        assert drained.wait_clean() == CLEAN
        drained.wait_daemon_ready()  # DaemonSet pods are not drained
    finally:
        cluster.kubectl("uncordon", drained.name)


@pytest.mark.req("IPAM-NOLEAK")
def test_a_lost_nodes_pods_run_on_the_others_and_it_keeps_nothing_when_it_returns(
    clean_cluster: RealCluster,
) -> None:
    """A node lost: its pods run on the others; its IPBlocks of netattach's IPAM go back to the
    pool once a lease has passed with its Node gone (the other nodes' daemons delete them); back
    again, it keeps nothing of its lost pods."""
    cluster = clean_cluster
    ipam_net = "lost-na"
    ipam = {"type": "netattach", "subnet": "10.74.0.0/24", "reuseDelay": 0}
    create_nad(cluster, ipam_net, {"type": "bridge", "bridge": DATA_BRIDGE, "ipam": ipam})
    create_deployment(cluster, "survivors", 3, f"{LOCAL_NET},{ipam_net}")
    both = (LOCAL_NET, ipam_net)
    pods = running_replicas(cluster, "survivors", 3, networks=both)
    lost = cluster.node_of(pods[-1])

    def blocks_of(node: str) -> list[str]:
        items = json.loads(cluster.kubectl("get", "ipblocks", "-o", "json"))["items"]
        return [i["metadata"]["name"] for i in items if i["spec"]["node"] == node]

    assert blocks_of(lost.name), "the lost node held a block of the pool"
    lost.power_off()
    assert cluster.api.http.request("DELETE", f"/api/v1/nodes/{lost.name}").status == 200
    # the pod GC deletes the pods bound to a Node that is gone; their ReplicaSet replaces them
    running_replicas(cluster, "survivors", 3, not_on=lost.name, networks=both)
    # its blocks unchanged for a lease (90 s), seen at a renewal (every 20 s): deleted
    wait_until("the lost node's IPBlocks back in the pool", lambda: not blocks_of(lost.name), 180.0)
    assert held_twice(cluster) == {}

    lost.power_on()  # it registers again; its netattach frees what the lost pods held
    lost.wait_daemon_ready()
    assert lost.wait_clean(timeout=120.0) == CLEAN
    cluster.api.http.request(
        "DELETE",
        f"/apis/k8s.cni.cncf.io/v1/namespaces/{NS}/network-attachment-definitions/{ipam_net}",
    )


def test_pods_made_and_deleted_while_the_api_server_restarts_attach_and_leave_nothing(
    clean_cluster: RealCluster,
) -> None:
    cluster = clean_cluster
    first = cluster.nodes[0]
    kept = {}
    for index, node in enumerate(cluster.nodes):
        pod = first.pod_object(NS, f"kept-{index}", LOCAL_NET, node_name=node.name)
        kept[f"kept-{index}"] = cluster.api.create(pod)["metadata"]["uid"]
    statuses = {name: network_status(cluster, name) for name in kept}

    # pods made and deleted all along, through the API server's restart (a request the
    # server is not there to answer is tried again)
    made: list[str] = []
    deleted: list[str] = []
    stop = threading.Event()

    def churn() -> None:
        for index in itertools.count():
            if stop.is_set():
                return
            name = f"churn-{index}"
            pod = first.pod_object(NS, name, LOCAL_NET, node_name=None)
            while not stop.is_set():
                try:
                    cluster.api.create(pod)
                except ApiStatusError as exc:
                    if exc.reason != "AlreadyExists":  # made, its answer lost to the restart
                        time.sleep(0.2)
                        continue
                except OSError:
                    time.sleep(0.2)
                    continue
                made.append(name)
                break
            if index % 2 == 1 and made:
                victim = made[-2] if len(made) > 1 else made[-1]
                path = f"/api/v1/namespaces/{NS}/pods/{victim}"
                with contextlib.suppress(OSError):
                    if cluster.api.http.request("DELETE", path).status == 200:
                        deleted.append(victim)
            time.sleep(0.5)

    worker = threading.Thread(target=churn, name="na-churn")
    worker.start()
    try:
        time.sleep(3)
        cluster.control.restart_apiserver(down=5.0)
        time.sleep(5)
    finally:
        stop.set()
        worker.join(60)
    assert made, "no pod was made"

    for name in sorted(set(made) - set(deleted)):
        pod = first.wait_running(NS, name, timeout=180.0)
        status = network_status(cluster, name)
        assert [entry["name"] for entry in status] == ["cluster-default", f"{NS}/{LOCAL_NET}"]
        cluster.node_of(pod).check_network_status(pod, status)

    def gone() -> bool:
        return all(first.pod(NS, name) is None for name in deleted)

    wait_until("the pods deleted meanwhile gone", gone, 90.0)
    for name, uid in kept.items():  # the pods that ran through it kept their networks
        found = first.pod(NS, name)
        assert found is not None
        assert found["metadata"]["uid"] == uid
        assert first.network_status(NS, name) == statuses[name]
    for node in cluster.nodes:
        node.wait_daemon_ready()


def daemon_ready_on(cluster: RealCluster) -> dict[str, bool]:
    """Each node's name: whether a netattach pod not being deleted is Ready on it."""
    ready = {node.name: False for node in cluster.nodes}
    for pod in cluster.nodes[0].daemon_pods():
        conditions = (pod.get("status") or {}).get("conditions") or []
        if not pod["metadata"].get("deletionTimestamp") and any(
            c["type"] == "Ready" and c["status"] == "True" for c in conditions
        ):
            ready[pod["spec"].get("nodeName", "")] = True
    return ready


def test_a_rolling_update_of_the_daemonset_under_pod_creation_fails_no_add(
    clean_cluster: RealCluster,
) -> None:
    """The DaemonSet moved to a new image tag while pods are made on every node: the old daemon
    of each node exits and the new one starts, one node at a time. A pod made on a node while it
    has no daemon waits for the new one (the shim waits for the socket): no sandbox fails, and
    every pod runs with its networks."""
    cluster = clean_cluster
    first = cluster.nodes[0]
    daemonset = json.loads(
        cluster.kubectl("-n", "kube-system", "get", "daemonset", "netattach", "-o", "json")
    )
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    old_image = container["image"]
    new_image = f"{old_image.rpartition(':')[0]}:rollout"
    for node in cluster.nodes:  # the new tag is on every node: nothing to pull
        node.containerd.ctr("images", "tag", "--force", old_image, new_image)

    made: list[str] = []
    in_gap: dict[str, str] = {}  # node -> the pod made there while it had no daemon
    stop = threading.Event()

    def make(node: str) -> str:
        name = f"roll-{len(made)}"
        cluster.api.create(first.pod_object(NS, name, LOCAL_NET, node_name=node))
        made.append(name)
        return name

    def churn() -> None:
        """A pod on each node in turn, and one on each node as soon as it has no daemon."""
        for turn in itertools.count():
            if stop.is_set():
                return
            for node, ready in daemon_ready_on(cluster).items():
                if not ready and node not in in_gap:
                    in_gap[node] = make(node)
            if turn % 2 == 0:
                make(cluster.nodes[turn // 2 % len(cluster.nodes)].name)
            time.sleep(0.5)

    worker = threading.Thread(target=churn, name="na-rollout-churn")
    worker.start()
    try:
        time.sleep(2)
        cluster.kubectl(
            "-n", "kube-system", "set", "image", "daemonset/netattach", f"netattach={new_image}"
        )
        cluster.kubectl(
            "-n", "kube-system", "rollout", "status", "daemonset/netattach", "--timeout=300s",
            timeout=330,
        )  # fmt: skip
        time.sleep(2)
    finally:
        stop.set()
        worker.join(60)

    # every node went without a daemon for a while, and had a pod made then
    assert sorted(in_gap) == sorted(node.name for node in cluster.nodes), in_gap
    for node in cluster.nodes:
        node.wait_daemon_ready()
    images = {
        pod["spec"]["nodeName"]: pod["spec"]["containers"][0]["image"]
        for pod in first.daemon_pods()
    }
    assert images == {node.name: new_image for node in cluster.nodes}

    for name in made:
        pod = first.wait_running(NS, name, timeout=180.0)
        status = network_status(cluster, name)
        assert [entry["name"] for entry in status] == ["cluster-default", f"{NS}/{LOCAL_NET}"]
        cluster.node_of(pod).check_network_status(pod, status)
        failed = [
            event["message"]
            for event in cluster.api.events_for(NS, name)
            if event.get("reason") == "FailedCreatePodSandBox"
        ]
        assert failed == [], (name, pod["spec"]["nodeName"], failed)
