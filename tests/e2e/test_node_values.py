"""Values as the plugins and the kernel read them, with the real reference plugins (SEC-VALUES):
an IPv4-mapped IPv6 spelling of the node's address or gateway, a host link named with a NUL, past
15 bytes or by its alternative name, and the node changes a plugin of the defaults makes and
never undoes (forwarding switched on, an existing bridge set up, promiscuous, its accept_ra or
MTU changed, macspoofchk's nftables table). Each is refused at ADD with code 7 through the thin
plugin and leaves the node as it was; a grant in `nodeChanges` lets the change through.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from tests.e2e.guard_harness import (
    NS,
    grant,
    ip,
    macvlan,
    nic,
    node_state,
    nothing_attached,
    refused,
    uplink,
)
from tests.e2e.harness import Cluster, bridge_list, host_local
from tests.netns_fixtures import require_link_kind, unique

pytestmark = pytest.mark.netns


def on_node(cluster: Cluster, script: str) -> str:
    """`sh -c SCRIPT` in the test's node namespace; its output."""
    return subprocess.run(
        ["nsenter", f"--net={cluster.node.path}", "--", "sh", "-c", script],
        check=True,
        capture_output=True,
        text=True,
        timeout=10,
    ).stdout.strip()


def sysctl(cluster: Cluster, name: str, value: str | None = None) -> str:
    """The node namespace's sysctl `name` (`net/ipv4/ip_forward`), written first when `value`."""
    if value is not None:
        on_node(cluster, f"echo {value} > /proc/sys/{name}")
    return on_node(cluster, f"cat /proc/sys/{name}")


def link_flags(cluster: Cluster, name: str) -> tuple[list[str], int]:
    """The flags and MTU of the node's link `name`."""
    (found,) = json.loads(on_node(cluster, f"ip -j link show dev {name}"))
    return found["flags"], found["mtu"]


def ptp(cluster: Cluster, subnet: str) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "type": "ptp", "ipam": host_local(cluster.ipam, subnet)}


@pytest.mark.req("SEC-VALUES")
def test_ptp_does_not_switch_on_forwarding_the_node_keeps_off_unless_granted(
    cluster: Cluster,
) -> None:
    sysctl(cluster, "net/ipv4/ip_forward", "0")
    cluster.add_nad(NS, "net-ptp", ptp(cluster, "10.96.40.0/24"))
    before = cluster.node_links()
    pod = cluster.pod(NS, "web", "net-ptp")

    reply = cluster.add(pod)
    refused(reply, "net-ptp", "plugins[0].type", '"ptp"', "delegatePolicy.nodeChanges []")
    assert "switches the node's net.ipv4.ip_forward on; it is off here" in reply.out["msg"]
    assert sysctl(cluster, "net/ipv4/ip_forward") == "0"
    nothing_attached(cluster, pod, before)

    # Granted, the plugin switches it on, and it stays on after DEL: the change outlives the pod.
    grant(cluster, nodeChanges=["forwarding"])
    granted = cluster.pod(NS, "granted", "net-ptp")
    assert cluster.add(granted).rc == 0
    assert cluster.delete(granted).rc == 0
    assert sysctl(cluster, "net/ipv4/ip_forward") == "1"

    # A node that forwards already (every Kubernetes node) needs no grant: nothing changes.
    grant(cluster, nodeChanges=[])
    plain = cluster.pod(NS, "plain", "net-ptp")
    assert cluster.add(plain).rc == 0
    assert cluster.delete(plain).rc == 0


@pytest.mark.req("SEC-VALUES")
def test_the_bridge_plugin_changes_no_existing_bridge_of_the_node(cluster: Cluster) -> None:
    bridge = unique("br")
    cluster.premade_bridge(bridge, "02:00:0a:60:00:01")
    ip(cluster, "link", "set", bridge, "down")
    config = bridge_list(None, host_local(cluster.ipam, "10.96.41.0/24"), bridge=bridge)
    cluster.add_nad(NS, "net-br", config)
    before = cluster.node_links()

    # Down: the plugin would set it up.
    pod = cluster.pod(NS, "down", "net-br")
    refused(cluster.add(pod), "net-br", "plugins[0].bridge", json.dumps(bridge), "'bridgeUp'")
    assert "UP" not in link_flags(cluster, bridge)[0]
    nothing_attached(cluster, pod, before)
    ip(cluster, "link", "set", bridge, "up")

    # Taking router adverts: the plugin would write 0 to its accept_ra.
    sysctl(cluster, f"net/ipv6/conf/{bridge}/accept_ra", "1")
    pod = cluster.pod(NS, "ra", "net-br")
    refused(cluster.add(pod), "net-br", "plugins[0].bridge", json.dumps(bridge), "bridgeAcceptRA")
    assert sysctl(cluster, f"net/ipv6/conf/{bridge}/accept_ra") == "1"
    sysctl(cluster, f"net/ipv6/conf/{bridge}/accept_ra", "0")

    # promiscMode: the plugin would make it promiscuous, for good.
    promisc = {**config, "plugins": [{**config["plugins"][0], "promiscMode": True}]}
    cluster.add_nad(NS, "net-promisc", promisc)
    pod = cluster.pod(NS, "promisc", "net-promisc")
    refused(cluster.add(pod), "net-promisc", "plugins[0].promiscMode", "true", "bridgePromisc")
    assert "PROMISC" not in link_flags(cluster, bridge)[0]

    # A jumbo bridge: a port of 1500 (no mtu in the NAD) would lower it.
    ip(cluster, "link", "set", bridge, "mtu", "9000")
    pod = cluster.pod(NS, "mtu", "net-br")
    refused(cluster.add(pod), "net-br", "plugins[0].mtu", "1500", "give the NAD mtu 9000")
    assert link_flags(cluster, bridge)[1] == 9000
    nothing_attached(cluster, pod, before)

    # The NAD that matches the bridge attaches, and the bridge is as it was after DEL.
    jumbo = {**config, "plugins": [{**config["plugins"][0], "mtu": 9000}]}
    cluster.add_nad(NS, "net-jumbo", jumbo)
    state = link_flags(cluster, bridge)
    pod = cluster.pod(NS, "jumbo", "net-jumbo")
    reply = cluster.add(pod)
    assert reply.rc == 0, reply
    assert cluster.interfaces(pod.netns)["net1"].mtu == 9000
    assert cluster.delete(pod).rc == 0
    assert link_flags(cluster, bridge) == state
    assert sysctl(cluster, f"net/ipv6/conf/{bridge}/accept_ra") == "0"


@pytest.mark.req("SEC-VALUES")
def test_macspoofchk_leaves_the_nodes_nftables_table_so_it_needs_a_grant(
    cluster: Cluster,
) -> None:
    config = bridge_list(None, host_local(cluster.ipam, "10.96.42.0/24"), macspoofchk=True)
    cluster.add_nad(NS, "net-spoof", config)
    before = cluster.node_links()
    pod = cluster.pod(NS, "web", "net-spoof")

    refused(cluster.add(pod), "net-spoof", "plugins[0].macspoofchk", "true", "'macspoofchk'")
    nothing_attached(cluster, pod, before)
    assert "bridge nat" not in on_node(cluster, "nft list tables")

    # Granted, the plugin leaves its table behind after DEL: why it is a grant.
    grant(cluster, nodeChanges=["macspoofchk"])
    granted = cluster.pod(NS, "granted", "net-spoof")
    reply = cluster.add(granted)
    assert reply.rc == 0, reply
    assert cluster.delete(granted).rc == 0
    assert "table bridge nat" in on_node(cluster, "nft list tables")


@pytest.mark.req("SEC-VALUES")
def test_a_host_link_named_otherwise_than_the_kernel_reads_it_is_refused(
    cluster: Cluster,
) -> None:
    up = uplink(cluster, "10.77.6.2/24", "10.77.6.1")
    alias = unique("alias") + "-uplink"  # an alternative name may be longer than 15 bytes
    altname = ["ip", "link", "property", "add", "dev", up, "altname", alias]
    probe = subprocess.run(
        ["nsenter", f"--net={cluster.node.path}", "--", *altname],
        check=False,
        capture_output=True,
        text=True,
        timeout=10,
    )
    if probe.returncode != 0:
        pytest.skip(f"the kernel takes no alternative names: {probe.stderr.strip()}")
    bridge = unique("br")
    cluster.premade_bridge(bridge, "02:00:0a:61:00:01")
    grant(
        cluster,
        types=["bridge", "macvlan", "host-device", "host-local"],
        device=["*", f"!{up}"],
        master=["*", f"!{up}"],
        bridge=["*", f"!{bridge}"],
    )
    state = node_state(cluster)
    before = cluster.node_links()
    attacks = {
        "net-alt-device": ("device", {"cniVersion": "1.0.0", "type": "host-device"}, alias),
        "net-alt-master": ("master", macvlan(None, "10.96.43.0/24", cluster), alias),
        "net-nul-bridge": (
            "bridge",
            bridge_list(None, host_local(cluster.ipam, "10.96.44.0/24"))["plugins"][0],
            bridge + "\0x",
        ),
        "net-long-master": ("master", macvlan(None, "10.96.45.0/24", cluster), up + "-extra-x"),
    }
    for name, (key, plugin, value) in attacks.items():
        cluster.add_nad(NS, name, {"cniVersion": "1.0.0", "plugins": [{**plugin, key: value}]})
        pod = cluster.pod(NS, name.removeprefix("net-"), name)
        reply = cluster.add(pod)
        refused(reply, name, f"plugins[0].{key}", json.dumps(value, ensure_ascii=False), "")
        assert "SEC-VALUES" in reply.out["msg"] or "the kernel" in reply.out["msg"]
        nothing_attached(cluster, pod, before)
    # The uplink is still the node's, with its address and the default route; the bridge has no
    # port.
    assert node_state(cluster) == state
    assert on_node(cluster, f"ip -j link show master {bridge}") in ("", "[]")

    # Named as the kernel names it, the plain use attaches.
    require_link_kind("macvlan")
    data = nic(cluster, "data")
    cluster.add_nad(NS, "net-data", macvlan(data, "10.96.46.0/24", cluster))
    pod = cluster.pod(NS, "data", "net-data")
    assert cluster.add(pod).rc == 0
    assert cluster.delete(pod).rc == 0


@pytest.mark.req("SEC-VALUES")
def test_an_ipv4_mapped_spelling_of_the_nodes_addresses_is_refused(cluster: Cluster) -> None:
    uplink(cluster, "10.77.7.2/24", "10.77.7.1")
    state = node_state(cluster)
    before = cluster.node_links()
    static = {"type": "static", "addresses": [{"address": "10.96.47.5/24"}]}
    attacks = {
        # The node's own address as a pod's, written as a mapped CIDR (a /0 on the pod was seen).
        "net-mapped-pod": (
            "plugins[0].ipam.addresses[0].address",
            {"type": "static", "addresses": [{"address": "::ffff:10.77.7.2/120"}]},
            "IPv4-mapped IPv6 CIDR",
        ),
        # ptp's host side on the node's gateway: the node would lose its route to it.
        "net-mapped-gw": (
            "plugins[0].ipam.addresses[0].gateway",
            {
                "type": "static",
                "addresses": [{"address": "10.96.48.5/24", "gateway": "::ffff:a4d:701"}],
            },
            "the node's default gateway 10.77.7.1",
        ),
    }
    for name, (key, ipam, why) in attacks.items():
        cluster.add_nad(NS, name, {"cniVersion": "1.0.0", "type": "ptp", "ipam": ipam})
        pod = cluster.pod(NS, name.removeprefix("net-"), name)
        reply = cluster.add(pod)
        assert reply.code == 7, reply
        assert key in reply.out["msg"], reply
        assert why in reply.out["msg"], reply
        nothing_attached(cluster, pod, before)

    # A selection's `ips` in that spelling is the pod author's way to the same address.
    cluster.add_nad(NS, "net-static", {"cniVersion": "1.0.0", "type": "ptp", "ipam": static})
    selection = [{"name": "net-static", "ips": ["::ffff:10.77.7.2/24"]}]
    pod = cluster.pod(NS, "ips", selection)
    reply = cluster.add(pod)
    assert reply.code == 7, reply
    assert "IPv4-mapped IPv6 CIDR" in reply.out["msg"], reply
    nothing_attached(cluster, pod, before)
    assert node_state(cluster) == state
