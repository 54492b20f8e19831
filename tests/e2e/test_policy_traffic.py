"""MultiNetworkPolicy enforced by the daemon, proven with real traffic (directory feed).

One node and one daemon serve the whole module (`lab`, tests/e2e/policy_harness.py). Every pod
gets the cluster default network on eth0 and the bridge networks it selects on net1, net2;
policies, pods and namespaces are manifests in the feed's directory. Each test works in
namespaces of its own, so its policies select only its own pods. Traffic is probed from one pod
netns to another (ping, TCP and UDP to agents that answer on every port), and every outcome is
awaited with a deadline: the daemon converges asynchronously.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.daemon_harness import native_shim, wait_for
from tests.e2e.policy_harness import (
    NAD_NS,
    FileObjects,
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

pytestmark = pytest.mark.netns

__all__ = ["native_shim"]  # the fixtures this module uses

NET = f"{NAD_NS}/net"  # IPv4 bridge + host-local
ALT = f"{NAD_NS}/alt"  # another IPv4 bridge network
NET46 = f"{NAD_NS}/net46"  # dual-stack bridge + host-local: IPv4 and IPv6 on one interface
IPNET = f"{NAD_NS}/ipnet"  # IPv4 bridge + static IPAM, addresses chosen per pod
DENY_INGRESS: dict[str, Any] = {"podSelector": {}, "policyTypes": ["Ingress"]}


@pytest.fixture(scope="module")
def lab(native_shim: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PolicyLab]:
    root = tmp_path_factory.mktemp("policy-traffic")
    with (
        node_and_pods(root) as cluster,
        policy_daemon(cluster) as daemon,
        lab_on(daemon, FileObjects(cluster)) as lab,
    ):
        lab.bridge_network("net", "10.90.0.0/24")
        lab.bridge_network("alt", "10.92.0.0/24")
        lab.bridge_network("net46", "10.94.0.0/24", "fd00:90::/64")
        lab.static_network("ipnet")
        daemon.start()
        yield lab


def at(ip: str) -> str:
    """A selection of the static network with the address `ip`/24."""
    return json.dumps([{"name": "ipnet", "namespace": NAD_NS, "ips": [f"{ip}/24"]}])


def only_secondary(lab: PolicyLab, pod: LabPod, *ifnames: str) -> str:
    """The pod's netattach table, asserting it names exactly `ifnames` (never eth0)."""
    table = lab.table(pod)
    assert table is not None, f"{pod.key} has no netattach table"
    assert table_interfaces(table) == set(ifnames), table
    return table


@pytest.mark.req("POL-CRD", "POL-SELECT", "POL-UPDATE")
def test_deny_all_ingress_blocks_the_secondary_network_until_the_policy_is_deleted(
    lab: PolicyLab,
) -> None:
    lab.namespace("deny")
    lab.namespace("deny-free")
    server = lab.pod("deny", "server", NET)
    neighbour = lab.pod("deny", "neighbour", NET)
    client = lab.pod("deny-free", "client", NET)
    lab.converge(passes(client, server.ip(), "ping", "tcp:8080", "udp:5353"))

    uid = lab.policy("deny", "deny-all", DENY_INGRESS, NET)
    lab.converge(
        blocked(client, server.ip(), "ping", "tcp:8080", "udp:5353"),
        blocked(client, neighbour.ip(), "ping", "tcp:8080"),
        # podSelector {} isolates the whole namespace: its own pods are no exception.
        blocked(neighbour, server.ip(), "ping", "tcp:8080"),
        # The default network is not the policy's.
        passes(client, server.ip("eth0"), "ping", "tcp:8080", "udp:5353"),
        # Only ingress is isolated: the server still reaches out, and the answers come back in
        # through the established-connection rule.
        passes(server, client.ip(), "ping", "tcp:8080", "udp:5353"),
    )
    table = only_secondary(lab, server, "net1")
    assert uid in table
    only_secondary(lab, neighbour, "net1")
    assert lab.table(client) is None  # not in the policy's namespace: untouched

    # A pod that arrives while the policy is in force is governed from its first packet: its
    # table is in place when its ADD returns, for both its attachments to the network.
    late = lab.pod("deny", "late", f"{NET},{NET}")
    assert uid in only_secondary(lab, late, "net1", "net2")
    lab.converge(
        blocked(client, late.ip("net1"), "ping", "tcp:8080"),
        blocked(client, late.ip("net2"), "ping", "tcp:8080"),
        passes(client, late.ip("eth0"), "tcp:8080"),
    )

    lab.delete_policy("deny", "deny-all")
    lab.converge(
        passes(client, server.ip(), "ping", "tcp:8080", "udp:5353"),
        passes(neighbour, server.ip(), "tcp:8080"),
        passes(client, late.ip(), "tcp:8080"),
        passes(client, server.ip("eth0"), "tcp:8080"),
    )
    for pod in (server, neighbour, late):
        lab.wait_table(pod, False)


class Peers:
    """Namespaces `peers` (team=a), `peers-b` (team=b), `peers-c` (no Namespace object at all),
    their clients, and servers in `peers` each selected by a `role` label."""

    def __init__(self, lab: PolicyLab) -> None:
        lab.namespace("peers", team="a")
        lab.namespace("peers-b", team="b")
        self.a_yes = lab.pod("peers", "a-yes", NET, labels={"access": "yes"})
        self.a_no = lab.pod("peers", "a-no", NET)
        self.a_front = lab.pod("peers", "a-front", NET, labels={"tier": "front"})
        self.a_banned = lab.pod(
            "peers", "a-banned", NET, labels={"tier": "front", "banned": "true"}
        )
        self.b_yes = lab.pod("peers-b", "b-yes", NET, labels={"access": "yes"})
        self.b_no = lab.pod("peers-b", "b-no", NET)
        self.c_yes = lab.pod("peers-c", "c-yes", NET, labels={"access": "yes"})
        self.lab = lab

    def server(self, role: str, peer: dict[str, Any]) -> LabPod:
        """A server with role `role`, and a policy letting in only `peer` (one `from` entry)."""
        server = self.lab.pod("peers", f"by-{role}", NET, labels={"role": role})
        spec = {
            "podSelector": selecting(role=role),
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [peer]}],
        }
        self.lab.policy("peers", f"by-{role}", spec, NET)
        return server


@pytest.fixture(scope="module")
def peers(lab: PolicyLab) -> Peers:
    return Peers(lab)


@pytest.mark.req("POL-PEERS", "POL-SELECT")
def test_pod_and_namespace_selectors_alone_and_together(lab: PolicyLab, peers: Peers) -> None:
    p = peers
    by_pod = p.server("pod", {"podSelector": selecting(access="yes")})
    by_ns = p.server("ns", {"namespaceSelector": selecting(team="b")})
    by_both = p.server(
        "both", {"namespaceSelector": selecting(team="b"), "podSelector": selecting(access="yes")}
    )
    by_any_ns = p.server(
        "any-ns", {"namespaceSelector": {}, "podSelector": selecting(access="yes")}
    )
    # Every namespace has the label kubernetes.io/metadata.name, with or without a manifest.
    by_ns_name = p.server(
        "ns-name", {"namespaceSelector": selecting(**{"kubernetes.io/metadata.name": "peers-c"})}
    )
    lab.converge(
        # A podSelector alone means the policy's own namespace.
        passes(p.a_yes, by_pod.ip(), "tcp:8080", "ping"),
        blocked(p.a_no, by_pod.ip(), "tcp:8080", "ping"),
        blocked(p.b_yes, by_pod.ip(), "tcp:8080"),
        blocked(p.c_yes, by_pod.ip(), "tcp:8080"),
        # A namespaceSelector alone: every pod of the matching namespaces.
        passes(p.b_yes, by_ns.ip(), "tcp:8080"),
        passes(p.b_no, by_ns.ip(), "tcp:8080"),
        blocked(p.a_yes, by_ns.ip(), "tcp:8080"),
        blocked(p.c_yes, by_ns.ip(), "tcp:8080"),
        # Both in one peer: the intersection.
        passes(p.b_yes, by_both.ip(), "tcp:8080"),
        blocked(p.b_no, by_both.ip(), "tcp:8080"),
        blocked(p.a_yes, by_both.ip(), "tcp:8080"),
        blocked(p.c_yes, by_both.ip(), "tcp:8080"),
        # namespaceSelector {}: every namespace.
        passes(p.a_yes, by_any_ns.ip(), "tcp:8080"),
        passes(p.b_yes, by_any_ns.ip(), "tcp:8080"),
        passes(p.c_yes, by_any_ns.ip(), "tcp:8080"),
        blocked(p.a_no, by_any_ns.ip(), "tcp:8080"),
        blocked(p.b_no, by_any_ns.ip(), "tcp:8080"),
        passes(p.c_yes, by_ns_name.ip(), "tcp:8080"),
        blocked(p.b_yes, by_ns_name.ip(), "tcp:8080"),
        # Every server's default network stays open.
        passes(p.b_no, by_pod.ip("eth0"), "tcp:8080"),
    )
    for server in (by_pod, by_ns, by_both, by_any_ns, by_ns_name):
        only_secondary(lab, server, "net1")
    for client in (p.a_yes, p.a_no, p.b_yes, p.b_no, p.c_yes):
        assert lab.table(client) is None, client.key  # selected by no policy


@pytest.mark.req("POL-PEERS")
def test_match_expressions_in_notin_exists_doesnotexist(lab: PolicyLab, peers: Peers) -> None:
    p = peers
    by_expr = p.server(
        "expr",
        {
            "podSelector": {
                "matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["front", "edge"]},
                    {"key": "banned", "operator": "DoesNotExist"},
                ]
            }
        },
    )
    by_ns_expr = p.server(
        "ns-expr",
        {
            "namespaceSelector": {
                "matchExpressions": [
                    {"key": "team", "operator": "Exists"},
                    {"key": "team", "operator": "NotIn", "values": ["a"]},
                ]
            }
        },
    )
    lab.converge(
        passes(p.a_front, by_expr.ip(), "tcp:8080"),
        blocked(p.a_banned, by_expr.ip(), "tcp:8080"),  # DoesNotExist fails
        blocked(p.a_no, by_expr.ip(), "tcp:8080"),  # In fails
        passes(p.b_no, by_ns_expr.ip(), "tcp:8080"),  # team=b: Exists and NotIn [a]
        blocked(p.a_yes, by_ns_expr.ip(), "tcp:8080"),  # team=a: NotIn fails
        blocked(p.c_yes, by_ns_expr.ip(), "tcp:8080"),  # no team: Exists fails
        passes(p.a_no, by_expr.ip("eth0"), "tcp:8080"),
        passes(p.c_yes, by_ns_expr.ip("eth0"), "tcp:8080"),
    )
    only_secondary(lab, by_expr, "net1")
    only_secondary(lab, by_ns_expr, "net1")


@pytest.mark.req("POL-IPBLOCK")
def test_ip_block_minus_two_exceptions(lab: PolicyLab) -> None:
    lab.namespace("ipblock")
    server = lab.pod("ipblock", "server", at("10.91.0.10"), labels={"app": "server"})
    in_first = lab.pod("ipblock", "in-first", at("10.91.0.20"))
    in_second = lab.pod("ipblock", "in-second", at("10.91.0.40"))
    allowed = lab.pod("ipblock", "allowed", at("10.91.0.70"))
    outside = lab.pod("ipblock", "outside", at("10.91.0.200"))
    assert [p.ip() for p in (server, in_first, in_second, allowed, outside)] == [
        "10.91.0.10",
        "10.91.0.20",
        "10.91.0.40",
        "10.91.0.70",
        "10.91.0.200",
    ]
    lab.converge(passes(in_first, server.ip(), "tcp:8080"), passes(outside, server.ip(), "ping"))

    block = {"cidr": "10.91.0.0/25", "except": ["10.91.0.16/28", "10.91.0.32/28"]}
    spec = {"podSelector": selecting(app="server"), "ingress": [{"from": [{"ipBlock": block}]}]}
    lab.policy("ipblock", "block", spec, IPNET)
    lab.converge(
        passes(allowed, server.ip(), "ping", "tcp:8080", "udp:5353"),
        blocked(in_first, server.ip(), "ping", "tcp:8080", "udp:5353"),
        blocked(in_second, server.ip(), "ping", "tcp:8080", "udp:5353"),
        blocked(outside, server.ip(), "ping", "tcp:8080"),  # not in the CIDR at all
        passes(in_first, server.ip("eth0"), "tcp:8080"),
    )
    only_secondary(lab, server, "net1")


@pytest.mark.req("POL-PORTS")
def test_named_ports_end_port_ranges_and_protocols(lab: PolicyLab) -> None:
    lab.namespace("ports")
    container_ports = [
        {"name": "http", "containerPort": 8080, "protocol": "TCP"},
        {"name": "admin", "containerPort": 8081, "protocol": "TCP"},
        {"name": "dns", "containerPort": 5353, "protocol": "UDP"},
    ]
    server = lab.pod("ports", "server", NET, labels={"app": "server"}, ports=container_ports)
    client = lab.pod("ports", "client", NET)
    spec = {
        "podSelector": selecting(app="server"),
        "ingress": [
            {
                "ports": [
                    {"port": "http"},  # TCP by default
                    {"protocol": "UDP", "port": "dns"},
                    {"protocol": "TCP", "port": 9000, "endPort": 9002},
                ]
            }
        ],
    }
    lab.policy("ports", "ports", spec, NET)
    ip = server.ip()
    lab.converge(
        passes(client, ip, "tcp:8080", "udp:5353", "tcp:9000", "tcp:9001", "tcp:9002"),
        # admin is named but not listed; 8999 and 9003 are just outside the range.
        blocked(client, ip, "tcp:8081", "tcp:8999", "tcp:9003"),
        # The protocol is part of the match: dns is UDP only, the range TCP only.
        blocked(client, ip, "tcp:5353", "udp:9001"),
        blocked(client, ip, "ping"),
        passes(client, server.ip("eth0"), "tcp:8081", "udp:9001", "ping"),
    )
    only_secondary(lab, server, "net1")


@pytest.mark.req("POL-PEERS", "POL-ALLOWALL", "POL-SELECT")
def test_egress_rules_and_replies(lab: PolicyLab) -> None:
    lab.namespace("egress")
    source = lab.pod("egress", "source", NET, labels={"app": "source"})
    allowed = lab.pod("egress", "allowed", NET, labels={"app": "allowed"})
    other = lab.pod("egress", "other", NET, labels={"app": "other"})
    spec = {
        "podSelector": selecting(app="source"),
        "policyTypes": ["Egress"],
        "egress": [
            {
                "to": [{"podSelector": selecting(app="allowed")}],
                "ports": [{"protocol": "TCP", "port": 8080}],
            }
        ],
    }
    lab.policy("egress", "egress", spec, NET)
    lab.converge(
        # The allowed connection works both ways: its answers come back in.
        passes(source, allowed.ip(), "tcp:8080"),
        blocked(source, allowed.ip(), "tcp:8081", "udp:5353", "ping"),
        blocked(source, other.ip(), "tcp:8080", "ping"),
        # Ingress is not isolated, and the source's answers leave through the egress-isolated
        # interface only because they belong to an established connection.
        passes(other, source.ip(), "tcp:8081", "udp:5353", "ping"),
        passes(source, other.ip("eth0"), "tcp:8081", "ping"),
    )
    table = only_secondary(lab, source, "net1")
    assert 'oifname "net1"' in table
    assert lab.table(allowed) is None
    assert lab.table(other) is None

    # An empty egress rule allows everything, whatever else is in force.
    lab.policy(
        "egress",
        "egress-all",
        {"podSelector": selecting(app="source"), "policyTypes": ["Egress"], "egress": [{}]},
        NET,
    )
    lab.converge(passes(source, other.ip(), "tcp:8080", "ping", "udp:5353"))
    lab.delete_policy("egress", "egress")
    lab.delete_policy("egress", "egress-all")
    lab.wait_table(source, False)


@pytest.mark.req("POL-ALLOWALL", "POL-SELECT", "POL-CRD")
def test_empty_ingress_rule_allows_all_and_other_networks_are_untouched(lab: PolicyLab) -> None:
    lab.namespace("scope")
    alt_as_data7 = [
        {"name": "net", "namespace": NAD_NS},
        {"name": "alt", "namespace": NAD_NS, "interface": "data7"},
    ]
    server = lab.pod("scope", "server", alt_as_data7, labels={"app": "server"})
    net_only = lab.pod("scope", "net-only", NET, labels={"app": "server"})
    client = lab.pod("scope", "client", f"{NET},{ALT}")

    # A policy for `alt` isolates data7 only; a selected pod without `alt` gets no table.
    deny = {"podSelector": selecting(app="server"), "policyTypes": ["Ingress"]}
    lab.policy("scope", "alt-deny", deny, ALT)
    lab.converge(
        blocked(client, server.ip("data7"), "ping", "tcp:8080"),
        passes(client, server.ip("net1"), "ping", "tcp:8080"),
        passes(client, net_only.ip("net1"), "ping", "tcp:8080"),
        passes(client, server.ip("eth0"), "tcp:8080"),
    )
    only_secondary(lab, server, "data7")
    assert lab.table(net_only) is None

    # `- {}` beside the deny-all: the union allows everything, on a still-isolated interface.
    allow_all = {"podSelector": selecting(app="server"), "ingress": [{}]}
    lab.policy("scope", "alt-open", allow_all, ALT)
    lab.converge(passes(client, server.ip("data7"), "ping", "tcp:8080", "udp:5353"))
    only_secondary(lab, server, "data7")
    assert lab.table(net_only) is None


@pytest.mark.req("POL-CRD")
def test_policy_for_bare_names_and_lists(lab: PolicyLab) -> None:
    # A pod in the NADs' own namespace, and a policy there naming `net` bare (= other/net) and
    # `other/alt` in a comma list.
    lab.namespace("bare-client")
    solo = lab.pod(NAD_NS, "solo", "net,alt", labels={"app": "solo"})
    spare = lab.pod(NAD_NS, "spare", "net,alt")
    client = lab.pod("bare-client", "client", f"{NET},{ALT}")
    spec = {"podSelector": selecting(app="solo"), "policyTypes": ["Ingress"]}
    lab.policy(NAD_NS, "bare", spec, "net, other/alt")
    lab.converge(
        blocked(client, solo.ip("net1"), "ping", "tcp:8080"),
        blocked(client, solo.ip("net2"), "ping", "tcp:8080"),
        passes(client, spare.ip("net1"), "tcp:8080"),
        passes(client, solo.ip("eth0"), "ping", "tcp:8080"),
    )
    only_secondary(lab, solo, "net1", "net2")
    assert lab.table(spare) is None

    # A bare name means the *policy's* namespace: `net` here is bare-client/net, which no pod
    # has, so this policy governs nothing although it selects the client.
    lab.policy("bare-client", "elsewhere", {"podSelector": {}, "policyTypes": ["Ingress"]}, "net")
    lab.converge(
        blocked(client, solo.ip("net1"), "tcp:8080"),
        passes(spare, client.ip("net1"), "ping", "tcp:8080"),
        passes(spare, client.ip("net2"), "tcp:8080"),
    )
    assert lab.table(client) is None


@pytest.mark.req("POL-SELECT", "POL-PEERS", "POL-IPBLOCK", "POL-UPDATE")
def test_ipv6_deny_then_allow_by_pod_then_by_ip_block(lab: PolicyLab) -> None:
    # net1 has an IPv4 and an IPv6 address: every rule has to hold for both families.
    lab.namespace("six")
    server = lab.pod("six", "server", NET46, labels={"app": "server"})
    first = lab.pod("six", "first", NET46, labels={"access": "yes"})
    second = lab.pod("six", "second", NET46)
    v6, v4 = server.ip("net1", 6), server.ip("net1", 4)
    lab.converge(passes(first, v6, "ping", "tcp:8080"), passes(second, v6, "udp:5353"))

    lab.policy("six", "six", {"podSelector": selecting(app="server")}, NET46)
    lab.converge(
        blocked(first, v6, "ping", "tcp:8080", "udp:5353"),
        blocked(second, v6, "ping", "tcp:8080", "udp:5353"),
        blocked(first, v4, "ping", "tcp:8080"),
        passes(first, server.ip("eth0"), "ping", "tcp:8080"),
    )
    only_secondary(lab, server, "net1")

    by_pod = {
        "podSelector": selecting(app="server"),
        "ingress": [{"from": [{"podSelector": selecting(access="yes")}]}],
    }
    lab.policy("six", "six", by_pod, NET46)
    lab.converge(
        passes(first, v6, "ping", "tcp:8080", "udp:5353"),
        passes(first, v4, "ping", "tcp:8080"),
        blocked(second, v6, "ping", "tcp:8080", "udp:5353"),
        blocked(second, v4, "ping", "tcp:8080"),
    )

    # The whole /64 but `first`, and a /126 that holds no pod (two exceptions, IPv6 only:
    # nobody's IPv4 address is in the block).
    block = {"cidr": "fd00:90::/64", "except": [f"{first.ip('net1', 6)}/128", "fd00:90::fc/126"]}
    by_block = {"podSelector": selecting(app="server"), "ingress": [{"from": [{"ipBlock": block}]}]}
    lab.policy("six", "six", by_block, NET46)
    lab.converge(
        blocked(first, v6, "ping", "tcp:8080", "udp:5353"),
        passes(second, v6, "ping", "tcp:8080", "udp:5353"),
        blocked(second, v4, "ping", "tcp:8080"),
    )


@pytest.mark.req("POL-UPDATE", "POL-PEERS")
def test_relabelling_pods_and_namespaces_flips_traffic(lab: PolicyLab) -> None:
    by_pod, by_ns, near, far = relabel_scene(lab, NET, {})
    lab.converge(
        blocked(near, by_pod.ip(), "tcp:8080"),
        blocked(far, by_ns.ip(), "tcp:8080"),
        passes(far, by_ns.ip("eth0"), "tcp:8080"),
    )
    only_secondary(lab, by_pod, "net1")
    only_secondary(lab, by_ns, "net1")

    lab.relabel(near, access="yes")
    lab.namespace("relabel-far", trust="yes")
    lab.converge(
        passes(near, by_pod.ip(), "tcp:8080", "ping"),
        passes(far, by_ns.ip(), "tcp:8080", "ping"),
    )

    lab.relabel(near)
    lab.namespace("relabel-far")
    lab.converge(
        blocked(near, by_pod.ip(), "tcp:8080", "ping"),
        blocked(far, by_ns.ip(), "tcp:8080", "ping"),
        passes(near, by_pod.ip("eth0"), "tcp:8080", "ping"),
    )

    # The target itself relabelled out of the policy's podSelector: no longer isolated.
    lab.relabel(by_pod, role="retired")
    lab.converge(passes(near, by_pod.ip(), "tcp:8080", "ping"))
    lab.wait_table(by_pod, False)


@pytest.mark.req("POL-UPDATE", "POL-PEERS")
def test_a_peer_deleted_leaves_the_allowed_set(lab: PolicyLab) -> None:
    lab.namespace("gone")
    server = lab.pod("gone", "server", NET, labels={"app": "server"})
    friend = lab.pod("gone", "friend", NET, labels={"access": "yes"})
    stranger = lab.pod("gone", "stranger", NET)
    spec = {
        "podSelector": selecting(app="server"),
        "ingress": [{"from": [{"podSelector": selecting(access="yes")}]}],
    }
    lab.policy("gone", "from-friends", spec, NET)
    lab.converge(
        passes(friend, server.ip(), "tcp:8080"),
        blocked(stranger, server.ip(), "tcp:8080"),
    )
    lab.wait_table(server, True, contains=[friend.ip()], lacks=[stranger.ip()])

    # The runtime deletes the friend's sandbox networking: its address is nobody's now.
    lab.ok(lab.daemon.shim("DEL", friend.pod), f"DEL {friend.key}")
    lab.wait_table(server, True, lacks=[friend.ip(), stranger.ip()])
    lab.converge(
        blocked(stranger, server.ip(), "tcp:8080"),
        passes(stranger, server.ip("eth0"), "tcp:8080"),
    )
    only_secondary(lab, server, "net1")


@pytest.mark.req("POL-CRD")
def test_invalid_policies_are_reported_and_the_valid_one_beside_them_applies(
    lab: PolicyLab,
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
        "ingress": [{"from": [{"ipBlock": {"cidr": "10.90.0.0/33"}}]}],
    }
    lab.policy("invalid", "bad-ports", bad_ports, NET)
    lab.policy("invalid", "bad-cidr", bad_cidr, NET)
    lab.policy("invalid", "good", {"podSelector": selecting(app="server")}, NET)
    lab.converge(
        blocked(client, server.ip(), "tcp:9001", "tcp:8080"),  # the valid deny-all alone
        passes(client, lonely.ip(), "tcp:8080", "ping"),  # only an invalid policy selects it
        passes(client, server.ip("eth0"), "tcp:9001"),
    )
    only_secondary(lab, server, "net1")
    assert lab.table(lonely) is None
    wait_for(
        "both invalid policies in the daemon's log",
        lambda: all(
            text in lab.daemon.log_text()
            for text in ("invalid/bad-ports", "endPort 9000", "invalid/bad-cidr", "'10.90.0.0/33'")
        ),
        15.0,
    )


@pytest.mark.req("POL-UPDATE", "POL-TAG")
def test_restart_applies_policies_created_and_removes_tables_of_policies_deleted_meanwhile(
    lab: PolicyLab,
) -> None:
    restart_reconciles(lab, "restart", NET)
