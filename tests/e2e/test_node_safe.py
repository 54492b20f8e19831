"""Node-safe defaults with the real reference plugins (SEC-NODE): with no grant, no NAD takes
the node's interfaces (macvlan passthru), addresses and gateway (a bridge gateway, a range over
them), another pod's address (ptp with static IPAM) or its ports (portmap). Each attack is
refused at ADD with code 7 and changes nothing on the node; the plain uses still attach.

The test's node namespace stands for the node: a veth end `na-up-*` with an address and the
default route through a gateway on its link is its uplink.
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.daemon_harness import DaemonNode, daemon, native_shim
from tests.e2e.guard_harness import (
    NS,
    grant,
    macvlan,
    nic,
    node_state,
    nothing_attached,
    pod_selecting,
    refused,
    uplink,
)
from tests.e2e.harness import Cluster, bridge_list, host_local
from tests.netns_fixtures import require_link_kind, unique

pytestmark = pytest.mark.netns

__all__ = ["daemon", "native_shim"]  # the fixtures used here


@pytest.mark.req("SEC-NODE")
def test_macvlan_passthru_on_the_default_route_interface_is_refused(cluster: Cluster) -> None:
    up = uplink(cluster, "10.77.0.2/24", "10.77.0.1")
    cluster.add_nad(NS, "net-pt", macvlan(up, "10.91.0.0/24", cluster, mode="passthru"))
    cluster.add_nad(NS, "net-pt-unset", macvlan(None, "10.91.1.0/24", cluster, mode="passthru"))
    before, state = cluster.node_links(), node_state(cluster)

    pod = cluster.pod(NS, "web", "net-pt")
    refused(
        cluster.add(pod),
        "net-pt",
        "plugins[0].master",
        json.dumps(up),
        "delegatePolicy.passthruMaster []",
    )
    nothing_attached(cluster, pod, before)
    # Without a master, macvlan takes the default-route interface: the uplink again.
    unset = cluster.pod(NS, "unset", "net-pt-unset")
    refused(
        cluster.add(unset),
        "net-pt-unset",
        "plugins[0].master",
        "unset (the node's default-route interface)",
        "delegatePolicy.passthruMaster []",
    )
    nothing_attached(cluster, unset, before)
    assert node_state(cluster) == state

    # The plain use needs no grant: a macvlan in bridge mode on the same interface attaches.
    require_link_kind("macvlan")
    cluster.add_nad(NS, "net-data", macvlan(up, "10.92.0.0/24", cluster, mode="bridge"))
    data = cluster.pod(NS, "data", "net-data")
    reply = cluster.add(data)
    assert reply.rc == 0, reply
    assert cluster.interfaces(data.netns)["net1"].kind == "macvlan"
    assert cluster.delete(data).rc == 0


@pytest.mark.req("SEC-NODE")
def test_passthru_on_a_granted_master_attaches(cluster: Cluster) -> None:
    require_link_kind("macvlan")
    handed_out = nic(cluster, "ok")
    grant(cluster, passthruMaster=["na-ok-*"])
    cluster.add_nad(NS, "net-pt", macvlan(handed_out, "10.91.2.0/24", cluster, mode="passthru"))
    pod = cluster.pod(NS, "web", "net-pt")

    reply = cluster.add(pod)

    assert reply.rc == 0, reply
    assert cluster.interfaces(pod.netns)["net1"].kind == "macvlan"
    assert cluster.delete(pod).rc == 0


@pytest.mark.req("SEC-NODE")
def test_a_bridge_gateway_needs_a_granted_bridge_and_is_never_the_nodes_gateway(
    cluster: Cluster,
) -> None:
    uplink(cluster, "10.77.1.2/24", "10.77.1.1")
    team = unique("team")
    # No grant: isGateway is refused on any bridge.
    plain = bridge_list(None, host_local(cluster.ipam, "10.94.0.0/24"), bridge=team, isGateway=True)
    cluster.add_nad(NS, "net-gw", plain)
    # Granted bridge, but the gateway is the node's default gateway (and the subnet its LAN).
    ipam = host_local(
        cluster.ipam,
        "10.77.1.0/24",
        rangeStart="10.77.1.100",
        rangeEnd="10.77.1.150",
        gateway="10.77.1.1",
    )
    cluster.add_nad(NS, "net-hijack", bridge_list(None, ipam, bridge=team, isGateway=True))
    before, state = cluster.node_links(), node_state(cluster)

    pod = cluster.pod(NS, "web", "net-gw")
    refused(cluster.add(pod), "net-gw", "plugins[0].isGateway", "true", "gatewayBridge []")
    nothing_attached(cluster, pod, before)

    grant(cluster, gatewayBridge=["na-team-*"])
    hijack = cluster.pod(NS, "hijack", "net-hijack")
    reply = cluster.add(hijack)
    refused(
        reply,
        "net-hijack",
        "plugins[0].ipam.gateway",
        '"10.77.1.1"',
        "delegatePolicy.reservedRanges [node, ",
    )
    assert "is the node's default gateway 10.77.1.1" in reply.out["msg"]
    nothing_attached(cluster, hijack, before)
    assert team not in cluster.node_links()  # the bridge was never made
    assert node_state(cluster) == state

    # On the granted bridge a private range attaches, a second pod beside the first too (the
    # gateway already on the bridge is the bridge's own, not the node's).
    first, second = cluster.pod(NS, "one", "net-gw"), cluster.pod(NS, "two", "net-gw")
    assert cluster.add(first).rc == 0
    reply = cluster.add(second)
    assert reply.rc == 0, reply
    assert cluster.delete(first).rc == 0
    assert cluster.delete(second).rc == 0


@pytest.mark.req("SEC-NODE")
def test_ptp_with_static_ipam_claiming_another_pods_address_is_refused(cluster: Cluster) -> None:
    cluster.add_nad("red", "net-red", bridge_list(None, host_local(cluster.ipam, "10.93.0.0/24")))
    victim = cluster.pod("red", "db", "net-red")
    assert cluster.add(victim).rc == 0
    (held,) = [a for a in cluster.interfaces(victim.netns)["net1"].addresses if "." in a]
    address = held.partition("/")[0]
    attack = {
        "cniVersion": "1.0.0",
        "type": "ptp",
        "ipam": {"type": "static", "addresses": [{"address": held, "gateway": "10.93.0.254"}]},
    }
    before, pod = pod_selecting(cluster, NS, "net-steal", attack)
    state = node_state(cluster)

    reply = cluster.add(pod)

    refused(
        reply,
        "net-steal",
        "plugins[0].ipam.addresses[0].address",
        json.dumps(held),
        "SEC-NODE (an address is one attachment's)",
    )
    assert "is held by the live attachment red/net-red of pod red/db" in reply.out["msg"]
    assert cluster.node_links() == before
    assert node_state(cluster) == state  # no host route to the victim's address via a veth
    assert [r for r in state[1] if r.get("dst") == address] == []
    assert cluster.delete(victim).rc == 0


@pytest.mark.req("SEC-NODE")
def test_ptp_takes_no_node_address_and_a_plain_ptp_network_attaches_twice(
    cluster: Cluster,
) -> None:
    uplink(cluster, "10.77.2.2/24", "10.77.2.1")
    attack = {
        "cniVersion": "1.0.0",
        "type": "ptp",
        "ipam": {"type": "static", "addresses": [{"address": "10.77.2.2/24"}]},
    }
    before, pod = pod_selecting(cluster, NS, "net-node", attack)
    state = node_state(cluster)

    reply = cluster.add(pod)

    refused(
        reply,
        "net-node",
        "plugins[0].ipam.addresses[0].address",
        '"10.77.2.2/24"',
        "delegatePolicy.reservedRanges [node, ",
    )
    assert "the node's own address 10.77.2.2" in reply.out["msg"]
    nothing_attached(cluster, pod, before)
    assert node_state(cluster) == state

    # ptp gives each pod's host veth the same gateway: the second pod is not refused for it.
    plain = {"cniVersion": "1.0.0", "type": "ptp", "ipam": host_local(cluster.ipam, "10.95.0.0/24")}
    cluster.add_nad(NS, "net-ptp", plain)
    one, two = cluster.pod(NS, "one", "net-ptp"), cluster.pod(NS, "two", "net-ptp")
    assert cluster.add(one).rc == 0
    reply = cluster.add(two)
    assert reply.rc == 0, reply
    assert cluster.delete(one).rc == 0
    assert cluster.delete(two).rc == 0


@pytest.mark.req("SEC-NODE")
def test_a_range_in_the_service_cidr_is_refused_and_no_bridge_is_made(cluster: Cluster) -> None:
    grant(cluster, reservedRanges=["node", "10.96.0.0/12"])
    services = bridge_list(None, host_local(cluster.ipam, "10.100.0.0/24"))
    before, pod = pod_selecting(cluster, NS, "net-svc", services)
    state = node_state(cluster)

    reply = cluster.add(pod)

    refused(
        reply,
        "net-svc",
        "plugins[0].ipam.subnet",
        '"10.100.0.0/24" (span 10.100.0.1-10.100.0.254)',
        "delegatePolicy.reservedRanges [node, 10.96.0.0/12]",
    )
    assert "overlaps 10.96.0.0/12, reserved by" in reply.out["msg"]
    nothing_attached(cluster, pod, before)
    assert services["plugins"][0]["bridge"] not in cluster.node_links()
    assert node_state(cluster) == state


@pytest.mark.req("SEC-NODE")
def test_portmap_is_refused_until_types_lists_it(cluster: Cluster) -> None:
    portmap = {"type": "portmap", "capabilities": {"portMappings": True}}
    ipam = host_local(cluster.ipam, "10.98.5.0/24")
    cluster.add_nad(NS, "net-ports", bridge_list(None, ipam, portmap))
    before, state = cluster.node_links(), node_state(cluster)
    networks = [
        {"name": "net-ports", "portMappings": [{"hostPort": 22, "containerPort": 22}]},
    ]
    pod = cluster.pod(NS, "web", networks)

    reply = cluster.add(pod)

    refused(reply, "net-ports", "plugins[1].type", '"portmap"', "delegatePolicy.types [bridge,")
    nothing_attached(cluster, pod, before)
    assert node_state(cluster) == state


@pytest.mark.req("SEC-NODE")
def test_the_daemon_reads_the_node_and_refuses_its_gateway_as_a_ptp_host_side(
    daemon: DaemonNode,
) -> None:
    """Through the daemon: the node read in a worker thread beside its event loop."""
    cluster = daemon.cluster
    uplink(cluster, "10.77.3.2/24", "10.77.3.1")
    attack = {
        "cniVersion": "1.0.0",
        "type": "ptp",
        "ipam": {
            "type": "static",
            "addresses": [{"address": "10.6.0.2/24", "gateway": "10.77.3.1"}],
        },
    }
    cluster.add_nad(NS, "net-gw", attack)
    plain = {"cniVersion": "1.0.0", "type": "ptp", "ipam": host_local(cluster.ipam, "10.6.1.0/24")}
    cluster.add_nad(NS, "net-ptp", plain)
    before, state = cluster.node_links(), node_state(cluster)
    pod = cluster.pod(NS, "web", "net-gw")
    daemon.start()

    reply = daemon.shim("ADD", pod)

    refused(
        reply,
        "net-gw",
        "plugins[0].ipam.addresses[0].gateway",
        '"10.77.3.1"',
        "delegatePolicy.reservedRanges [node, ",
    )
    assert "is the node's default gateway 10.77.3.1" in reply.out["msg"]
    nothing_attached(cluster, pod, before)
    assert node_state(cluster) == state

    fine = cluster.pod(NS, "ok", "net-ptp")
    reply = daemon.shim("ADD", fine)
    assert reply.rc == 0, (reply, daemon.log_text())
    assert daemon.shim("DEL", fine).rc == 0
    assert daemon.stop() == 0
