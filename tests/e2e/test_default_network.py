"""DEV-DEFAULT end to end: `v1.multus-cni.io/default-network` on a pod gives it eth0 from that
NAD instead of the cluster default network, with the real reference plugins in real network
namespaces, through the thin plugin."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from netattach.cluster import model
from tests.e2e.harness import DEFAULT_NETWORK, NOTHING, Cluster, bridge_list, host_local, net_a

pytestmark = pytest.mark.netns

DEFAULT_NETWORK_ANNOTATION = model.DEFAULT_NETWORK_ANNOTATION
POD_DEFAULT_SUBNET = "10.85.0.0/24"
POD_DEFAULT_GATEWAY = "10.85.0.1"


def pod_default_network(cluster: Cluster) -> dict[str, Any]:
    """A bridge network of its own that gives the pod its default route, as a default does (no
    `isGateway`: the delegate policy grants no bridge a gateway on the node)."""
    ipam = host_local(
        cluster.ipam,
        POD_DEFAULT_SUBNET,
        gateway=POD_DEFAULT_GATEWAY,
        routes=[{"dst": "0.0.0.0/0"}],
    )
    return bridge_list(None, ipam)


def in_subnet(address: str, subnet: str) -> bool:
    return ipaddress.ip_interface(address).ip in ipaddress.ip_network(subnet)


@pytest.mark.req("DEV-DEFAULT", "STAT-DEFAULT", "SEL-CAPS")
def test_the_nad_gives_eth0_and_the_cluster_default_never_runs(cluster: Cluster) -> None:
    cluster.add_nad("blue", "net-d", pod_default_network(cluster))
    net_a(cluster)
    # Unqualified: the pod's own namespace (standard §4.1.1), not netattach's as in Multus.
    pod = cluster.pod("blue", "web", "net-a", annotations={DEFAULT_NETWORK_ANNOTATION: "net-d"})

    reply = cluster.add(pod)
    assert reply.rc == 0, reply

    status = cluster.status("blue", "web")
    assert status is not None
    assert [(e["name"], e["interface"], e["default"]) for e in status] == [
        ("blue/net-d", "eth0", True),
        ("blue/net-a", "net1", False),
    ]
    assert DEFAULT_NETWORK not in [e["name"] for e in status]
    kernel = cluster.interfaces(pod.netns)
    assert sorted(kernel) == ["eth0", "net1"]
    assert in_subnet(status[0]["ips"][0], POD_DEFAULT_SUBNET)
    assert status[0]["ips"][0] in kernel["eth0"].addresses
    assert status[0]["mac"] == kernel["eth0"].mac
    (route,) = cluster.routes(pod.netns, "default")
    assert (route["gateway"], route["dev"]) == (POD_DEFAULT_GATEWAY, "eth0")
    # The runtime hears the NAD's result: it is the pod's default network.
    assert [ip["address"] for ip in reply.out["ips"]] == status[0]["ips"]
    # The cluster default network's plugin never ran: no address from its range, no bridge.
    assert not any(a.startswith(f"{DEFAULT_NETWORK}/") for a in cluster.allocations())
    assert [a.split("/")[0] for a in cluster.allocations()] == ["net-a", "net-d"]
    assert cluster.default_bridge not in cluster.node_links()

    assert cluster.delete(pod).rc == 0
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("DEV-DEFAULT", "SEL-JSON")
def test_the_json_form_names_a_global_namespaces_nad(cluster: Cluster) -> None:
    cluster.add_nad("other", "net-d", pod_default_network(cluster))
    element = '[{"name": "net-d", "namespace": "other", "interface": "eth0"}]'
    pod = cluster.pod("blue", "web", None, annotations={DEFAULT_NETWORK_ANNOTATION: element})

    reply = cluster.add(pod)
    assert reply.rc == 0, reply

    status = cluster.status("blue", "web")
    assert status is not None
    assert [(e["name"], e["interface"], e["default"]) for e in status] == [
        ("other/net-d", "eth0", True)
    ]
    assert in_subnet(status[0]["ips"][0], POD_DEFAULT_SUBNET)

    assert cluster.delete(pod).rc == 0
    assert cluster.leftovers() == NOTHING


REFUSED = [
    pytest.param(
        "absent", 101, "NetworkAttachmentDefinition blue/absent not found", id="missing-nad"
    ),
    pytest.param(
        "red/net-d",
        102,
        "pod in namespace 'blue' may not select red/net-d",
        id="other-namespace",
    ),
    pytest.param(
        "net-h",
        7,
        "NetworkAttachmentDefinition blue/net-h refused by the delegate policy: "
        'plugins[0].type "host-device" is not allowed',
        id="delegate-policy",
    ),
    pytest.param(
        '[{"name": "net-d", "interface": "net1"}]',
        102,
        "interface 'net1': the default network is always the runtime's interface 'eth0'",
        id="interface",
    ),
    pytest.param(
        "net-d,net-a",
        102,
        "it names 2 networks, the default network is exactly one",
        id="two-networks",
    ),
]


@pytest.mark.req("DEV-DEFAULT", "RT-RESTRICT", "SEC-DELEGATE")
@pytest.mark.parametrize(("annotation", "code", "says"), REFUSED)
def test_a_missing_refused_or_foreign_nad_fails_the_add_leaving_nothing(
    cluster: Cluster, annotation: str, code: int, says: str
) -> None:
    cluster.add_nad("blue", "net-d", pod_default_network(cluster))
    cluster.add_nad("red", "net-d", pod_default_network(cluster))
    cluster.add_nad("blue", "net-h", {"cniVersion": "1.0.0", "type": "host-device", "device": "x"})
    pod = cluster.pod("blue", "web", None, annotations={DEFAULT_NETWORK_ANNOTATION: annotation})

    reply = cluster.add(pod)

    assert reply.rc == 1
    assert reply.code == code, reply
    assert reply.out["msg"].startswith("[blue/web/uid-web] ")
    assert says in reply.text
    cluster.nothing_ran()
