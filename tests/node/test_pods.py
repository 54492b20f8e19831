"""Pods created by containerd get exactly their networks, and lose them all when removed.

Each test starts `netattach daemon` (directory feed or the in-repo API server), which installs
its shim and `00-netattach.conflist` into containerd's CNI dirs; then only CRI calls happen:
RunPodSandbox makes containerd create the netns and run the shim (ADD), StopPodSandbox and
RemovePodSandbox make it run the DELs (reference/real-world.md: one with CNI_NETNS and the
cached prevResult, one with CNI_NETNS="" and none). What the test reads back is the kernel's
view inside the netns containerd made, the daemon's network-status, its Events, and what is left
on the node.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import uuid
from typing import Any

import pytest

from tests.e2e.daemon_harness import wait_for
from tests.e2e.harness import DEFAULT_NETWORK, DEFAULT_SUBNET, NOTHING, bridge_list, host_local
from tests.e2e.kube_harness import RemoteKubeApi
from tests.node.api_view import api_events, api_status, nad_object, pod_object, shown
from tests.node.harness import Kubelet, NodeDaemon, PodSandbox

# root, network namespaces, containerd: under NETATTACH_REQUIRE_NETNS=1 a skip is a failure
pytestmark = [pytest.mark.netns, pytest.mark.req("KUBE-NODE")]

NS = "blue"
STATUS_TIMEOUT = 20.0


def subnet(index: int) -> str:
    return f"10.{90 + index}.0.0/24"


def selected(count: int) -> list[str]:
    return [f"net-{index}" for index in range(count)]


def expected_entries(count: int) -> list[tuple[str, str]]:
    """(network, interface) of the network-status of a pod selecting `count` networks."""
    return [(DEFAULT_NETWORK, "eth0")] + [
        (f"{NS}/net-{index}", f"net{index + 1}") for index in range(count)
    ]


def assert_status_matches_kernel(
    kubelet: Kubelet, sandbox: PodSandbox, status: list[dict[str, Any]], count: int
) -> None:
    """The pod's interfaces are exactly the status's, each with the address the status names,
    in its network's subnet; containerd's pod IP is eth0's."""
    kernel = kubelet.interfaces(sandbox)
    assert sorted(kernel) == sorted(ifname for _, ifname in expected_entries(count))
    assert shown(status) == expected_entries(count)
    subnets = [DEFAULT_SUBNET] + [subnet(index) for index in range(count)]
    for entry, network in zip(status, subnets, strict=True):
        state = kernel[entry["interface"]]
        (ip,) = entry["ips"]
        assert ipaddress.ip_interface(ip) in ipaddress.ip_network(network), entry
        assert ip in state.addresses, (entry, state)
        assert entry["mac"] == state.mac
    cri = kubelet.status(sandbox)
    assert ipaddress.ip_address(cri.ip) in ipaddress.ip_network(DEFAULT_SUBNET), cri
    assert cri.ip == str(ipaddress.ip_interface(status[0]["ips"][0]).ip)


def assert_one_line_per_call(daemon: NodeDaemon, sandbox: PodSandbox, count: int) -> None:
    """The daemon's log has one INFO line per finished call of the sandbox: its ADD naming
    every interface and network, and each of containerd's DELs (the later ones find nothing
    left), all with code 0."""
    about = f"container {sandbox.id[:12]}: "
    calls = [
        line.split(" netattach.calls: ", 1)[1]
        for line in daemon.log_text().splitlines()
        if " INFO netattach.calls: " in line and about in line
    ]
    interfaces = ", ".join(f"{ifname} {network}" for network, ifname in expected_entries(count))
    adds = [call for call in calls if f"] ADD {about}" in call]
    dels = [call for call in calls if f"] DEL {about}" in call]
    assert len(adds) == 1, calls
    assert adds[0].startswith(f"[{NS}/web/"), adds
    assert f"ADD {about}{interfaces}; " in adds[0], adds
    assert len(dels) >= 2, calls  # reference/real-world.md: stop, then remove
    assert f"DEL {about}{interfaces}; " in dels[0], dels
    assert all("no interfaces" in call for call in dels[1:]), dels
    assert all(call.endswith("; code 0") for call in calls), calls


def assert_nothing_left(daemon: NodeDaemon, kubelet: Kubelet) -> None:
    assert kubelet.sandbox_ids() == []
    assert daemon.cluster.leftovers() == NOTHING
    assert kubelet.netns_left() == []


# -- the directory feed ----------------------------------------------------------------------------


@pytest.mark.req("RT-DEL")
@pytest.mark.parametrize("count", [0, 1, 3])
def test_a_pod_created_by_containerd_gets_exactly_its_networks_directory_feed(
    daemon: NodeDaemon, kubelet: Kubelet, count: int
) -> None:
    cluster = daemon.cluster
    for index, name in enumerate(selected(count)):
        cluster.add_nad(NS, name, bridge_list(None, host_local(cluster.ipam, subnet(index))))
    uid = str(uuid.uuid4())
    selection = ",".join(selected(count)) or None
    cluster.add_pod(NS, "web", uid, selection)
    daemon.start()

    sandbox = kubelet.run(kubelet.spec(NS, "web", uid, selection))

    status = cluster.status(NS, "web")
    assert status is not None, daemon.log_text()
    assert_status_matches_kernel(kubelet, sandbox, status, count)
    assert cluster.pod_records() == [f"{sandbox.id}.json"]
    assert len(cluster.allocations()) == count + 1

    kubelet.teardown(sandbox.id)

    assert_nothing_left(daemon, kubelet)
    assert_one_line_per_call(daemon, sandbox, count)
    # reference/real-world.md: every teardown is at least two DELs (stop, then remove)
    assert daemon.requests("ADD", "0") == 1.0
    assert (daemon.requests("DEL", "0") or 0.0) >= 2.0


# -- the Kubernetes feed ---------------------------------------------------------------------------


@pytest.mark.req("RT-DEL")
@pytest.mark.parametrize("count", [0, 1, 3])
def test_a_pod_created_by_containerd_gets_exactly_its_networks_kubernetes_feed(
    kube_api: RemoteKubeApi, kube_daemon: NodeDaemon, kubelet: Kubelet, count: int
) -> None:
    cluster = kube_daemon.cluster
    for index, name in enumerate(selected(count)):
        config = bridge_list(None, host_local(cluster.ipam, subnet(index)))
        kube_api.create(nad_object(name, NS, config))
    selection = ",".join(selected(count)) or None
    pod = kube_api.create(pod_object("web", NS, cluster.node.name, selection))
    uid = pod["metadata"]["uid"]
    kube_daemon.start()

    sandbox = kubelet.run(kubelet.spec(NS, "web", uid, selection))

    status = wait_for(
        "the pod's network-status in the API",
        lambda: api_status(kube_api, NS, "web"),
        STATUS_TIMEOUT,
    )
    assert_status_matches_kernel(kubelet, sandbox, status, count)
    events = wait_for(
        "an AddedInterface Event per interface",
        lambda: (
            found
            if len(found := api_events(kube_api, NS, "web", "AddedInterface")) == count + 1
            else None
        ),
        STATUS_TIMEOUT,
    )
    for (network, ifname), event in zip(expected_entries(count), events, strict=True):
        assert event["message"].startswith(f"Add {ifname} ["), event
        assert event["message"].endswith(f"from {network}"), event
        assert event["involvedObject"]["uid"] == uid
    assert cluster.pod_records() == [f"{sandbox.id}.json"]

    kubelet.teardown(sandbox.id)

    assert_nothing_left(kube_daemon, kubelet)
    wait_for(
        "the network-status to be cleared in the API",
        lambda: api_status(kube_api, NS, "web") in (None, []),
        STATUS_TIMEOUT,
    )


# -- what containerd passes in runtimeConfig -------------------------------------------------------


def node_nat_rules(daemon: NodeDaemon, port: int) -> list[str]:
    """The node's iptables nat rules that name `port` (portmap's DNAT and its chains)."""
    done = subprocess.run(
        ["nsenter", f"--net={daemon.cluster.node.path}", "--", "iptables-save", "-t", "nat"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return [line for line in done.stdout.splitlines() if f"--dport {port}" in line]


def test_a_pods_host_port_reaches_the_default_networks_portmap_through_containerd(
    daemon: NodeDaemon, kubelet: Kubelet
) -> None:
    """The default network declares `portMappings`, so the installed conflist does too, and
    containerd sends the pod's host ports in runtimeConfig (its own spelling: `HostPort`,
    `ContainerPort`, `Protocol`, `HostIP`, reference/real-world.md); portmap on the node gets
    them through the daemon, and loses its rules with the pod."""
    cluster = daemon.cluster
    cluster.write_network_file(
        "00-default.conflist",
        {
            "cniVersion": "1.0.0",
            "name": DEFAULT_NETWORK,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": cluster.default_bridge,
                    "isGateway": True,
                    "ipam": host_local(cluster.ipam, DEFAULT_SUBNET, routes=[{"dst": "0.0.0.0/0"}]),
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        },
    )
    uid = str(uuid.uuid4())
    cluster.add_pod(NS, "web", uid, None)
    daemon.start()
    (plugin,) = json.loads(daemon.conflist.read_text())["plugins"]
    assert plugin["capabilities"] == {"portMappings": True}

    sandbox = kubelet.run(kubelet.spec(NS, "web", uid, port_mappings=((18090, 80),)))

    ip = kubelet.status(sandbox).ip
    rules = node_nat_rules(daemon, 18090)
    assert any(f"--to-destination {ip}:80" in rule for rule in rules), rules

    kubelet.teardown(sandbox.id)

    assert node_nat_rules(daemon, 18090) == []
    assert_nothing_left(daemon, kubelet)
