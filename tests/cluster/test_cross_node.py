"""CLU-NODES: three real nodes (tests/cluster/real_cluster.py), netattach from `make image`
through `kubectl apply -k deploy/`, pods placed by kube-scheduler and reaching each other across
nodes over their secondary networks.

Pods are made and deleted through the API only; packets are sent from each pod's network
namespace (the pods run a pause container, which has no shell), as the host reaches it.

Until cluster-wide addresses exist (IPAM-UNIQUE), a network spanning nodes gets each pod's
address through its selection's `ips` (the `static` IPAM plugin): pods are made one by one, not
by a Deployment, whose pods would all ask for the same addresses.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cluster.real_cluster import DATA_BRIDGE, MACVLAN_MASTER, RealCluster, real_cluster
from tests.netns_fixtures import netns_unavailable_reason
from tests.node import containerd, real_node
from tests.node.node_image import node_image_archive
from tests.node.real_node import Leftovers, wait_until

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
SPREAD = {"app": "na-spread"}
PORT = 7070


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    reason = (
        netns_unavailable_reason()
        or containerd.unavailable_reason()
        or real_node.unavailable_reason()
    )
    if reason is not None:
        if os.environ.get("NETATTACH_REQUIRE_NETNS") == "1":
            pytest.fail(f"NETATTACH_REQUIRE_NETNS=1 but the cluster cannot run: {reason}")
        pytest.skip(reason)
    with real_cluster(tmp_path_factory.mktemp("na-cluster")) as made:
        made.deploy(node_image_archive())
        first = made.nodes[0]
        first.create_namespace(NS)
        for name, plugin in PLUGINS.items():
            config = {
                "cniVersion": "1.0.0",
                "name": name,
                "plugins": [{**plugin, "capabilities": {"ips": True}, "ipam": {"type": "static"}}],
            }
            made.api.create(
                {
                    "apiVersion": "k8s.cni.cncf.io/v1",
                    "kind": "NetworkAttachmentDefinition",
                    "metadata": {"name": name, "namespace": NS},
                    "spec": {"config": json.dumps(config)},
                }
            )
        yield made


@pytest.fixture
def clean_cluster(cluster: RealCluster) -> Iterator[RealCluster]:
    """The cluster; at teardown the test's pods deleted and nothing left of them on any node."""
    yield cluster
    first = cluster.nodes[0]
    for pod in cluster.api.list("Pod", NS):
        with contextlib.suppress(real_node.NodeError):
            first.delete_pod(NS, pod["metadata"]["name"])
    for node in cluster.nodes:
        assert (node.name, node.wait_clean()) == (node.name, CLEAN)


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
                ["nsenter", f"--net={netns}", "--", sys.executable, "-c", LISTENER],
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
        kernel = node.pod_interfaces(pod)
        assert sorted(kernel) == sorted(entry["interface"] for entry in status)
        for entry in status:
            state = kernel[entry["interface"]]
            assert set(entry["ips"]) == {a for a in state.addresses if not a.startswith("fe80:")}
            assert entry["mac"].lower() == state.mac.lower()
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
                reply = in_netns(netns[source], sys.executable, "-c", CONNECT, address, str(PORT))
                assert reply.stdout == "na-pong", (source, target, network, reply.stderr)


@pytest.mark.req("IPAM-UNIQUE")
@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="IPAM-UNIQUE (issue 37): host-local keeps its allocations per node, so a network "
    "that spans nodes hands the same address on each of them",
)
def test_host_local_on_a_network_that_spans_nodes_gives_each_address_once(
    clean_cluster: RealCluster,
) -> None:
    cluster = clean_cluster
    first = cluster.nodes[0]
    name = "data-hl"
    config = {
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [
            {"type": "bridge", "bridge": DATA_BRIDGE,
             "ipam": {"type": "host-local", "subnet": "10.72.0.0/24"}}
        ],
    }  # fmt: skip
    cluster.api.create(
        {
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"config": json.dumps(config)},
        }
    )
    try:
        for node in cluster.nodes[:2]:
            cluster.api.create(first.pod_object(NS, f"hl-{node.name}", name, node_name=node.name))
        addresses = []
        for node in cluster.nodes[:2]:
            first.wait_running(NS, f"hl-{node.name}")
            status = network_status(cluster, f"hl-{node.name}")
            addresses.append(address_on(status, name))
        assert len(set(addresses)) == len(addresses), addresses
    finally:
        for node in cluster.nodes[:2]:
            first.delete_pod(NS, f"hl-{node.name}")
        cluster.api.http.request(
            "DELETE",
            f"/apis/k8s.cni.cncf.io/v1/namespaces/{NS}/network-attachment-definitions/{name}",
        )
