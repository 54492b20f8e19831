"""MultiNetworkPolicy enforced by the daemon on the Kubernetes feed, proven with real traffic.

The same lab as tests/e2e/test_policy_traffic.py (tests/e2e/policy_harness.py), but pods,
namespaces, NADs and policies are objects in the fake API server, which runs inside the node
namespace (tests/e2e/kube_harness.py): relabelling is a merge patch, a changed policy an update,
and the daemon learns of each through its watches. Invalid policies get a Warning Event.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.daemon_harness import native_shim, wait_for
from tests.e2e.kube_harness import RemoteKubeApi
from tests.e2e.policy_harness import (
    NAD_NS,
    ApiObjects,
    LabPod,
    PolicyLab,
    blocked,
    lab_on,
    node_and_pods,
    passes,
    policy_daemon,
    relabel_scene,
    restart_reconciles,
    selecting,
    table_interfaces,
)
from tests.kube import objects
from tests.kube.api import Obj

pytestmark = pytest.mark.netns

__all__ = ["native_shim"]  # the fixtures this module uses

NET = f"{NAD_NS}/net"
EVENT_TIMEOUT = 15.0


@pytest.fixture(scope="module")
def api_lab(
    native_shim: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[PolicyLab, RemoteKubeApi]]:
    """The lab on the Kubernetes feed, and the fake API it reads."""
    root = tmp_path_factory.mktemp("kube-policy")
    with node_and_pods(root) as cluster:
        api = RemoteKubeApi.launch(cluster.node.path)
        try:
            with policy_daemon(cluster) as daemon:
                kubeconfig = api.write_kubeconfig(cluster.root / "kubeconfig")
                daemon.settings["feed"] = {"kubernetes": {"kubeconfig": str(kubeconfig)}}
                daemon.settings["nodeName"] = cluster.node.name
                with lab_on(daemon, ApiObjects(api, cluster.node.name)) as lab:
                    lab.namespace(NAD_NS)
                    bridge = lab.bridge_network("net", "10.93.0.0/24")
                    # The same bridge under another network name, addresses chosen per pod.
                    lab.static_network("net-twin", bridge=bridge)
                    daemon.start()
                    yield lab, api
        finally:
            api.close()


@pytest.fixture
def lab(api_lab: tuple[PolicyLab, RemoteKubeApi]) -> PolicyLab:
    return api_lab[0]


@pytest.fixture
def kube_api(api_lab: tuple[PolicyLab, RemoteKubeApi]) -> RemoteKubeApi:
    return api_lab[1]


@pytest.mark.req("POL-CRD", "POL-SELECT", "POL-UPDATE")
def test_deny_all_from_the_api_blocks_until_changed_then_deleted(lab: PolicyLab) -> None:
    lab.namespace("deny")
    lab.namespace("deny-free")
    server = lab.pod("deny", "server", NET)
    client = lab.pod("deny-free", "client", NET, labels={"access": "yes"})
    lab.converge(passes(client, server.ip(), "ping", "tcp:8080", "udp:5353"))

    uid = lab.policy("deny", "deny-all", {"podSelector": {}, "policyTypes": ["Ingress"]}, NET)
    lab.converge(
        blocked(client, server.ip(), "ping", "tcp:8080", "udp:5353"),
        passes(client, server.ip("eth0"), "ping", "tcp:8080", "udp:5353"),
        passes(server, client.ip(), "ping", "tcp:8080"),
    )
    table = lab.table(server)
    assert table is not None
    assert table_interfaces(table) == {"net1"}
    assert uid in table
    assert lab.table(client) is None

    # The same policy updated in the API: TCP 8080 from any namespace's access=yes pods.
    changed = {
        "podSelector": {},
        "ingress": [
            {
                "from": [{"namespaceSelector": {}, "podSelector": selecting(access="yes")}],
                "ports": [{"protocol": "TCP", "port": 8080}],
            }
        ],
    }
    assert lab.policy("deny", "deny-all", changed, NET) == uid
    lab.converge(
        passes(client, server.ip(), "tcp:8080"),
        blocked(client, server.ip(), "tcp:8081", "udp:5353", "ping"),
    )

    lab.delete_policy("deny", "deny-all")
    lab.converge(passes(client, server.ip(), "ping", "tcp:8081", "udp:5353"))
    lab.wait_table(server, False)


@pytest.mark.req("POL-PEERS", "POL-SELECT")
def test_pod_namespace_and_expression_selectors_from_the_api(lab: PolicyLab) -> None:
    lab.namespace("peers", team="a")
    lab.namespace("peers-b", team="b")
    a_yes = lab.pod("peers", "a-yes", NET, labels={"access": "yes", "tier": "front"})
    a_no = lab.pod("peers", "a-no", NET, labels={"tier": "front", "banned": "true"})
    b_yes = lab.pod("peers-b", "b-yes", NET, labels={"access": "yes"})
    b_no = lab.pod("peers-b", "b-no", NET)

    def server(role: str, peer: dict[str, Any]) -> LabPod:
        pod = lab.pod("peers", f"by-{role}", NET, labels={"role": role})
        spec = {"podSelector": selecting(role=role), "ingress": [{"from": [peer]}]}
        lab.policy("peers", f"by-{role}", spec, NET)
        return pod

    by_pod = server("pod", {"podSelector": selecting(access="yes")})
    by_ns = server("ns", {"namespaceSelector": selecting(team="b")})
    by_both = server(
        "both", {"namespaceSelector": selecting(team="b"), "podSelector": selecting(access="yes")}
    )
    by_expr = server(
        "expr",
        {
            "namespaceSelector": {
                "matchExpressions": [
                    {"key": "team", "operator": "Exists"},
                    {"key": "team", "operator": "In", "values": ["a", "b"]},
                ]
            },
            "podSelector": {
                "matchExpressions": [
                    {"key": "banned", "operator": "DoesNotExist"},
                    {"key": "access", "operator": "NotIn", "values": ["no"]},
                ]
            },
        },
    )
    lab.converge(
        passes(a_yes, by_pod.ip(), "tcp:8080"),
        blocked(a_no, by_pod.ip(), "tcp:8080"),
        blocked(b_yes, by_pod.ip(), "tcp:8080"),  # a podSelector alone: own namespace only
        passes(b_yes, by_ns.ip(), "tcp:8080"),
        passes(b_no, by_ns.ip(), "tcp:8080"),
        blocked(a_yes, by_ns.ip(), "tcp:8080"),
        passes(b_yes, by_both.ip(), "tcp:8080"),
        blocked(b_no, by_both.ip(), "tcp:8080"),
        blocked(a_yes, by_both.ip(), "tcp:8080"),
        passes(a_yes, by_expr.ip(), "tcp:8080"),
        passes(b_no, by_expr.ip(), "tcp:8080"),
        blocked(a_no, by_expr.ip(), "tcp:8080"),  # banned exists
        passes(a_no, by_pod.ip("eth0"), "tcp:8080"),
    )


@pytest.mark.req("POL-UPDATE", "POL-PEERS")
def test_patching_pod_and_namespace_labels_flips_traffic(lab: PolicyLab) -> None:
    by_pod, by_ns, near, far = relabel_scene(lab, NET, {"keep": "me"})
    lab.converge(
        blocked(near, by_pod.ip(), "tcp:8080"),
        blocked(far, by_ns.ip(), "tcp:8080"),
        passes(far, by_ns.ip("eth0"), "tcp:8080"),
    )
    for server in (by_pod, by_ns):
        table = lab.table(server)
        assert table is not None
        assert table_interfaces(table) == {"net1"}

    lab.relabel(near, keep="me", access="yes")
    lab.namespace("relabel-far", trust="yes")
    lab.converge(
        passes(near, by_pod.ip(), "tcp:8080", "ping"),
        passes(far, by_ns.ip(), "tcp:8080", "ping"),
    )

    lab.relabel(near, keep="me")
    lab.namespace("relabel-far")
    lab.converge(
        blocked(near, by_pod.ip(), "tcp:8080", "ping"),
        blocked(far, by_ns.ip(), "tcp:8080", "ping"),
    )

    lab.relabel(by_pod, role="retired")
    lab.converge(passes(near, by_pod.ip(), "tcp:8080"))
    lab.wait_table(by_pod, False)


@pytest.mark.req("POL-PORTS")
def test_named_ports_of_pods_in_the_api(lab: PolicyLab) -> None:
    lab.namespace("ports")
    container_ports = [
        {"name": "http", "containerPort": 8080, "protocol": "TCP"},
        {"name": "dns", "containerPort": 5353, "protocol": "UDP"},
    ]
    server = lab.pod("ports", "server", NET, labels={"app": "server"}, ports=container_ports)
    client = lab.pod("ports", "client", NET, labels={"app": "client"})
    prober = lab.pod("ports", "prober", NET)
    ingress = {
        "podSelector": selecting(app="server"),
        "ingress": [{"ports": [{"port": "http"}, {"protocol": "UDP", "port": "dns"}]}],
    }
    lab.policy("ports", "ingress", ingress, NET)
    # Egress to a named port: each destination pod resolves the name with its own ports.
    egress = {
        "podSelector": selecting(app="client"),
        "policyTypes": ["Egress"],
        "egress": [{"ports": [{"port": "http"}]}],
    }
    lab.policy("ports", "egress", egress, NET)
    lab.converge(
        passes(prober, server.ip(), "tcp:8080", "udp:5353"),
        blocked(prober, server.ip(), "tcp:8081", "tcp:5353", "udp:9001", "ping"),
        passes(prober, server.ip("eth0"), "tcp:8081"),
        passes(client, server.ip(), "tcp:8080"),
        blocked(client, server.ip(), "udp:5353"),
        blocked(client, prober.ip(), "tcp:8080"),  # the prober has no port named http
    )


def policy_events(api: RemoteKubeApi, ns: str, name: str) -> list[Obj]:
    return [
        e
        for e in api.list("Event", ns)
        if (e.get("involvedObject") or {}).get("kind") == "MultiNetworkPolicy"
        and e["involvedObject"].get("name") == name
    ]


@pytest.mark.req("POL-CRD")
def test_an_invalid_policy_gets_a_warning_event_and_the_valid_one_applies(
    lab: PolicyLab, kube_api: RemoteKubeApi
) -> None:
    lab.namespace("invalid")
    server = lab.pod("invalid", "server", NET, labels={"app": "server"})
    lonely = lab.pod("invalid", "lonely", NET, labels={"app": "lonely"})
    client = lab.pod("invalid", "client", NET)
    bad_ports = {
        "podSelector": selecting(app="server"),
        "ingress": [{"ports": [{"protocol": "TCP", "port": 9002, "endPort": 9000}]}],
    }
    bad_cidr = {
        "podSelector": selecting(app="lonely"),
        "ingress": [{"from": [{"ipBlock": {"cidr": "10.93.0.0/33"}}]}],
    }
    bad_ports_uid = lab.policy("invalid", "bad-ports", bad_ports, NET)
    bad_cidr_uid = lab.policy("invalid", "bad-cidr", bad_cidr, NET)
    lab.policy("invalid", "good", {"podSelector": selecting(app="server")}, NET)
    lab.converge(
        blocked(client, server.ip(), "tcp:9001", "tcp:8080"),
        passes(client, lonely.ip(), "tcp:8080"),
        passes(client, server.ip("eth0"), "tcp:9001"),
    )
    assert lab.table(lonely) is None

    for name, uid, quoted in (
        ("bad-ports", bad_ports_uid, "endPort 9000"),
        ("bad-cidr", bad_cidr_uid, "'10.93.0.0/33'"),
    ):
        (event,) = wait_for(
            f"a Warning Event on MultiNetworkPolicy invalid/{name}",
            functools.partial(policy_events, kube_api, "invalid", name),
            EVENT_TIMEOUT,
        )
        assert (event["type"], event["reason"]) == ("Warning", "InvalidPolicy")
        assert quoted in event["message"], event
        assert event["involvedObject"]["uid"] == uid
        assert event["involvedObject"]["namespace"] == "invalid"
        assert f"invalid/{name}" in lab.daemon.log_text()
    assert policy_events(kube_api, "invalid", "good") == []


@pytest.mark.req("POL-PEERS", "POL-UPDATE")
def test_a_peer_on_another_node_counts_by_its_network_status(
    lab: PolicyLab, kube_api: RemoteKubeApi
) -> None:
    lab.namespace("remote")
    server = lab.pod("remote", "server", NET, labels={"app": "server"})
    # A local pod on the same bridge at 10.93.0.200, but on another network name: as far as
    # policy goes it is nobody's address on other/net yet.
    selection = [{"name": "net-twin", "namespace": NAD_NS, "ips": ["10.93.0.200/24"]}]
    twin = lab.pod("remote", "twin", json.dumps(selection), labels={"access": "yes"})
    assert twin.ip() == "10.93.0.200"
    spec = {
        "podSelector": selecting(app="server"),
        "ingress": [{"from": [{"podSelector": selecting(access="yes")}]}],
    }
    lab.policy("remote", "from-access", spec, NET)
    lab.converge(
        blocked(twin, server.ip(), "tcp:8080", "ping"),
        passes(twin, server.ip("eth0"), "tcp:8080"),
    )

    # A pod of another node whose network-status says it has 10.93.0.200 on other/net.
    status = [
        {"name": "cluster-default", "interface": "eth0", "ips": ["10.80.0.250"], "default": True},
        {"name": NET, "interface": "net1", "ips": ["10.93.0.200"], "default": False},
    ]
    kube_api.create(
        objects.pod(
            "elsewhere",
            "remote",
            node_name="na-other-node",
            labels={"access": "yes"},
            annotations={
                "k8s.v1.cni.cncf.io/networks": NET,
                "k8s.v1.cni.cncf.io/network-status": json.dumps(status),
            },
            status={"phase": "Running", "podIP": "10.80.0.250"},
        )
    )
    lab.converge(passes(twin, server.ip(), "tcp:8080", "ping"))

    # Gone from the API: its address goes from the allowed set.
    kube_api.delete("Pod", "elsewhere", "remote")
    lab.converge(blocked(twin, server.ip(), "tcp:8080", "ping"))


@pytest.mark.req("POL-UPDATE")
def test_a_burst_of_changes_converges_to_the_last_one(lab: PolicyLab) -> None:
    lab.namespace("burst")
    server = lab.pod("burst", "server", NET, labels={"app": "server"})
    client = lab.pod("burst", "client", NET)
    deny = {"podSelector": selecting(app="server"), "policyTypes": ["Ingress"]}
    allow = {"podSelector": selecting(app="server"), "ingress": [{}]}
    lab.policy("burst", "flip", allow, NET)
    lab.converge(passes(client, server.ip(), "tcp:8080"))
    # Twenty updates back to back, within one debounce; the last one denies.
    for i in range(20):
        lab.policy("burst", "flip", allow if i % 2 else deny, NET)
        lab.relabel(client, round=str(i))
    lab.policy("burst", "flip", deny, NET)
    lab.converge(
        blocked(client, server.ip(), "tcp:8080", "ping"),
        passes(client, server.ip("eth0"), "tcp:8080", "ping"),
    )
    # And back: the client's labels flipping meanwhile change nothing for a {} rule.
    for i in range(20):
        lab.policy("burst", "flip", deny if i % 2 else allow, NET)
        lab.relabel(client, round=str(i))
    lab.policy("burst", "flip", allow, NET)
    lab.converge(passes(client, server.ip(), "tcp:8080", "ping"))


@pytest.mark.req("POL-UPDATE", "POL-TAG")
def test_restart_reconciles_with_policies_from_the_api(lab: PolicyLab) -> None:
    restart_reconciles(lab, "restart", NET)
