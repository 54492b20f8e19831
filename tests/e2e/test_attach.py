"""Pods attached through the thin plugin: what the pod, the status file and the records show."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import (
    DEFAULT_GATEWAY,
    DEFAULT_NETWORK,
    DEFAULT_SUBNET,
    NOTHING,
    Cluster,
    assert_refused,
    bridge_list,
    host_local,
    net_a,
)

pytestmark = pytest.mark.netns

ENTRY_KEYS = ["name", "interface", "ips", "mac", "default"]


def ipv4(addresses: tuple[str, ...]) -> list[str]:
    """The IPv4 addresses of an interface (the kernel adds IPv6 link-local ones itself)."""
    return [a for a in addresses if ipaddress.ip_interface(a).version == 4]


def in_subnet(address: str, subnet: str) -> bool:
    return ipaddress.ip_interface(address).ip in ipaddress.ip_network(subnet)


def cache_record(cluster: Cluster, network: str, container_id: str, ifname: str) -> Any:
    path = cluster.state / "cache" / "results" / f"{network}:{container_id}:{ifname}"
    return json.loads(path.read_text())


@pytest.mark.req(
    "SEL-CSV", "SEL-MULTI", "SEL-TUPLE", "STAT-ANNOT", "STAT-DEFAULT", "STAT-KEYS", "DEF-ATTACH"
)
def test_comma_form_attaches_default_then_each_selection_in_order(cluster: Cluster) -> None:
    net_a(cluster)
    cluster.add_nad(
        "other", "net-c", bridge_list("net-c", host_local(cluster.ipam, "10.82.0.0/24"))
    )
    # Whitespace around items is ignored; `net-a` without a namespace is the pod's (blue).
    pod = cluster.pod("blue", "web", " net-a , net-a,other/net-c ")

    reply = cluster.add(pod)
    assert reply.rc == 0, reply

    status = cluster.written_status("blue", "web")
    assert [(e["name"], e["interface"], e["default"]) for e in status] == [
        (DEFAULT_NETWORK, "eth0", True),
        ("blue/net-a", "net1", False),
        ("blue/net-a", "net2", False),
        ("other/net-c", "net3", False),
    ]
    kernel = cluster.interfaces(pod.netns)
    assert sorted(kernel) == ["eth0", "net1", "net2", "net3"]
    for entry in status:
        assert list(entry) == ENTRY_KEYS
        state = kernel[entry["interface"]]
        assert state.up
        assert entry["mac"] == state.mac
        # ips keep their prefix and are exactly what the kernel has on that interface
        assert len(entry["ips"]) == 1
        assert entry["ips"] == ipv4(state.addresses)
    subnets = [DEFAULT_SUBNET, "10.81.0.0/24", "10.81.0.0/24", "10.82.0.0/24"]
    assert all(in_subnet(e["ips"][0], s) for e, s in zip(status, subnets, strict=True))
    assert status[1]["ips"] != status[2]["ips"]  # one attachment each, one address each

    # The runtime gets the default network's result, in the thin config's version.
    result = reply.out
    assert result["cniVersion"] == "1.0.0"
    sandboxed = [i for i in result["interfaces"] if i.get("sandbox")]
    assert sandboxed == [{"name": "eth0", "mac": kernel["eth0"].mac, "sandbox": pod.netns}]
    assert [ip["address"] for ip in result["ips"]] == status[0]["ips"]
    assert result["ips"][0]["gateway"] == DEFAULT_GATEWAY

    # SEL-TUPLE: one cache record per [network name, container ID, ifname].
    cid = pod.container_id
    names = [DEFAULT_NETWORK, "net-a", "net-a", "net-c"]
    ifnames = ["eth0", "net1", "net2", "net3"]
    assert cluster.cache_records() == sorted(
        f"{name}:{cid}:{ifname}" for name, ifname in zip(names, ifnames, strict=True)
    )
    host_ips = [str(ipaddress.ip_interface(e["ips"][0]).ip) for e in status]
    assert cluster.allocations() == sorted(
        f"{name}/{ip}" for name, ip in zip(names, host_ips, strict=True)
    )

    assert cluster.delete(pod).rc == 0
    assert cluster.leftovers() == NOTHING


def caps_network(tmp_path: Path) -> dict[str, Any]:
    """bridge declaring `ips` with static IPAM, then tuning declaring `mac`."""
    tuning = {"type": "tuning", "capabilities": {"mac": True}, "dataDir": str(tmp_path / "tuning")}
    return bridge_list(None, {"type": "static"}, tuning, capabilities={"ips": True})


REQUEST = {"name": "net-s", "ips": ["10.90.0.7/24"], "mac": "02:11:22:33:44:55"}


@pytest.mark.req("SEL-JSON", "SEL-IPS", "SEL-MAC", "SEL-CAPS")
def test_json_form_ips_and_mac_reach_the_plugins_and_the_pod(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.add_nad("blue", "net-s", caps_network(tmp_path))
    # `namespace: ""` is the pod's own; a reverse-domain key is an implementation's and ignored.
    selection = {**REQUEST, "namespace": "", "org.example.colour": "blue"}
    pod = cluster.pod("blue", "web", [selection])

    reply = cluster.add(pod)
    assert reply.rc == 0, reply

    net1 = cluster.interfaces(pod.netns)["net1"]
    assert net1.mac == "02:11:22:33:44:55"
    assert ipv4(net1.addresses) == ["10.90.0.7/24"]
    status = cluster.written_status("blue", "web")
    assert status[1] == {
        "name": "blue/net-s",
        "interface": "net1",
        "ips": ["10.90.0.7/24"],
        "mac": "02:11:22:33:44:55",
        "default": False,
    }
    # SEL-CAPS: both requests went to runtimeConfig (declared) and to every plugin's args.cni.
    record = cache_record(cluster, "net-s", pod.container_id, "net1")
    assert record["capabilityArgs"] == {"ips": ["10.90.0.7/24"], "mac": "02:11:22:33:44:55"}
    for plugin in record["config"]["plugins"]:
        assert plugin["args"]["cni"] == {"ips": ["10.90.0.7/24"], "mac": "02:11:22:33:44:55"}

    assert cluster.delete(pod).rc == 0
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("SEL-CAPS", "SEL-MAC", "RT-ADDFAIL")
def test_mac_request_no_plugin_honours_fails_and_leaks_nothing(cluster: Cluster) -> None:
    # ptp declares no capability and ignores args.cni.mac; host-local does honour args.cni.ips.
    ptp = {"type": "ptp", "ipam": host_local(cluster.ipam, "10.90.0.0/24")}
    cluster.add_nad("blue", "net-s", {"cniVersion": "1.0.0", "plugins": [ptp]})
    pod = cluster.pod("blue", "web", [REQUEST])

    reply = cluster.add(pod)

    assert reply.rc == 1
    assert reply.code == 7
    msg = reply.out["msg"]
    assert msg.startswith("[blue/web/uid-web:blue/net-s] network 'blue/net-s': the result does ")
    assert (
        "give interface 'net1' the requested MAC 02:11:22:33:44:55 (the result reports MAC " in msg
    )
    assert "addresses it does give: 10.90.0.7/24" in msg  # the IP was honoured, the MAC not
    assert "IP 10.90.0.7" not in msg
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("SEL-CAPS")
def test_capability_no_plugin_declares_fails_before_anything_runs(cluster: Cluster) -> None:
    net_a(cluster)
    mapping = {"hostPort": 8080, "containerPort": 80}
    pod = cluster.pod("blue", "web", [{"name": "net-a", "portMappings": [mapping]}])

    assert_refused(
        cluster.add(pod),
        "[blue/web/uid-web] network 'net-a' cannot carry the requested 'portMappings': "
        "no plugin of its config list declares the capability (declared: none)",
    )
    cluster.nothing_ran()


@pytest.mark.req("SEL-IFACE", "SEL-TUPLE")
def test_requested_interfaces_are_honoured_and_generated_ones_avoid_them(
    cluster: Cluster,
) -> None:
    net_a(cluster)
    # Position 1 would be net1, which position 2 requests: the generated name moves on.
    pod = cluster.pod(
        "blue",
        "web",
        [
            {"name": "net-a"},
            {"name": "net-a", "interface": "net1"},
            {"name": "net-a", "interface": "data0"},
        ],
    )

    reply = cluster.add(pod)
    assert reply.rc == 0, reply

    status = cluster.written_status("blue", "web")
    assert [e["interface"] for e in status] == ["eth0", "net2", "net1", "data0"]
    assert sorted(cluster.interfaces(pod.netns)) == ["data0", "eth0", "net1", "net2"]
    assert cluster.delete(pod).rc == 0
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("SEL-IFACE", "RT-ADDFAIL")
def test_interface_used_twice_fails_and_undoes_the_earlier_attachments(
    cluster: Cluster,
) -> None:
    net_a(cluster)
    twice = [{"name": "net-a", "interface": "net5"}, {"name": "net-a", "interface": "net5"}]
    pod = cluster.pod("blue", "web", twice)

    assert_refused(
        cluster.add(pod),
        "[blue/web/uid-web:blue/net-a] interface 'net5' is already used by an earlier "
        "attachment of the pod",
    )
    assert cluster.leftovers() == NOTHING
    assert cluster.status("blue", "web") is None


def net_a_with_gateway(cluster: Cluster) -> None:
    """The NAD blue/net-a, whose host-local gives the gateway 10.81.0.1."""
    ipam = host_local(cluster.ipam, "10.81.0.0/24", gateway="10.81.0.1")
    cluster.add_nad("blue", "net-a", bridge_list(None, ipam))


@pytest.mark.req("SEL-DEFROUTE", "STAT-COMPAT")
def test_default_route_moves_to_the_selected_attachment(cluster: Cluster) -> None:
    net_a_with_gateway(cluster)
    pod = cluster.pod("blue", "web", [{"name": "net-a", "default-route": ["10.81.0.1"]}])

    reply = cluster.add(pod)
    assert reply.rc == 0, reply

    defaults = cluster.routes(pod.netns, "default")
    assert [(r["dst"], r["gateway"], r["dev"]) for r in defaults] == [
        ("default", "10.81.0.1", "net1")
    ]
    status = cluster.written_status("blue", "web")
    assert "gateway" not in status[0]
    assert "default-route" not in status[0]
    assert status[1]["gateway"] == ["10.81.0.1"]
    assert status[1]["default-route"] == ["10.81.0.1"]
    assert cluster.delete(pod).rc == 0
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("SEL-DEFROUTE")
def test_without_default_route_the_default_network_keeps_it(cluster: Cluster) -> None:
    net_a_with_gateway(cluster)
    pod = cluster.pod("blue", "web", "net-a")

    assert cluster.add(pod).rc == 0

    defaults = cluster.routes(pod.netns, "default")
    assert [(r["dst"], r["gateway"], r["dev"]) for r in defaults] == [
        ("default", DEFAULT_GATEWAY, "eth0")
    ]
    assert cluster.delete(pod).rc == 0


@pytest.mark.req("SEL-DEFROUTE", "RT-ADDFAIL")
def test_unreachable_default_route_gateway_fails_and_undoes_everything(cluster: Cluster) -> None:
    net_a_with_gateway(cluster)
    # 10.99.0.1 is on no subnet of net1: the kernel refuses the route (ENETUNREACH).
    pod = cluster.pod("blue", "web", [{"name": "net-a", "default-route": ["10.99.0.1"]}])

    reply = cluster.add(pod)

    assert reply.rc == 1
    assert cluster.leftovers() == NOTHING
    assert reply.code == 5
    assert reply.out["msg"] == ("[blue/web/uid-web] cannot set the default route via net1")
