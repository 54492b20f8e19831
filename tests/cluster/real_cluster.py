"""Three real nodes on one machine for tests/cluster: one control plane, and per node a kubelet
and containerd in namespaces of their own (tests/node/real_node.py's parts), joined by a fabric.

    real_cluster(directory, count)   everything below started; stopped and removed on exit,
                                     whatever failed, each step undoing only what it made

    fabric namespace (a holder process, `na-fabric-*` only by its directory)
      na-mgmt  bridge 10.99.0.1/24   <- na-f1m ... na-f3m: peers of each node's na-eth0
      na-data  bridge, no address    <- na-f1d0, na-f1d1 ... : peers of each node's data uplinks

    node i (i = 1..3), its own network and mount namespaces
      na-eth0  10.99.0.1i/24, default route via 10.99.0.1; a route to each other node's podCIDR
               via that node's na-eth0 (the cluster default network across nodes)
      na-cni0  the default network's bridge (isGateway) on the Node's podCIDR, which the
               node-ipam controller (`--allocate-node-cidrs`, 10.244.0.0/16) gave it
      na-dp0   data uplink 1: the master of macvlan networks
      na-dp1   data uplink 2, a port of the premade bridge `na-brd` (bridge networks span nodes)

Why two data uplinks: a link that is a bridge's port cannot be a macvlan master (both take its
receive handler), and a cluster that offers both kinds of network gives each its own NIC.

The control plane is tests/node's (`NodeControlPlane`: kube-scheduler, the DaemonSet,
node-lifecycle and ResourceClaim controllers, ...) with the node-ipam controller too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.kube.real_api import RealKubeApi
from tests.node import real_node
from tests.node.containerd import RUNTIME_PATH
from tests.node.real_node import NodeControlPlane, NodeError, NodeNamespaces, RealNode

CLUSTER_CIDR = "10.244.0.0/16"
FABRIC_GATEWAY = "10.99.0.1"
DATA_BRIDGE = "na-brd"
MACVLAN_MASTER = "na-dp0"
# what each node's `links` makes: none of it is a pod's leftover
OWN_LINKS = frozenset({"lo", "na-eth0", "na-dp0", "na-dp1", DATA_BRIDGE})


class ClusterControlPlane(NodeControlPlane):
    """tests/node's control plane, also handing each Node a podCIDR."""

    controllers: tuple[str, ...] = (*NodeControlPlane.controllers, "node-ipam-controller")
    controller_flags: tuple[str, ...] = (
        *NodeControlPlane.controller_flags,
        "--allocate-node-cidrs=true",
        f"--cluster-cidr={CLUSTER_CIDR}",
        "--node-cidr-mask-size=24",
    )


class Fabric:
    """The data-centre switch: a network namespace held by a process, with the management and
    data bridges; every node's uplinks are veths whose peers are its ports."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        script = "ip link set lo up && echo ready && exec sleep infinity"
        self.proc = subprocess.Popen(
            ["unshare", "--net", "--", "sh", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"PATH": RUNTIME_PATH},
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != b"ready":
            raise NodeError("the fabric's namespace did not start")
        for argv in (
            ("ip", "link", "add", "na-mgmt", "type", "bridge"),
            ("ip", "addr", "add", f"{FABRIC_GATEWAY}/24", "dev", "na-mgmt"),
            ("ip", "link", "set", "na-mgmt", "up"),
            ("ip", "link", "add", "na-data", "type", "bridge"),
            ("ip", "link", "set", "na-data", "up"),
        ):
            self.run(*argv)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def run(self, *argv: str) -> str:
        done = subprocess.run(
            ["nsenter", f"--target={self.pid}", "--net", "--", *argv],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            env={"PATH": RUNTIME_PATH},
        )
        if done.returncode != 0:
            raise NodeError(f"fabric: {' '.join(argv)} failed: {done.stderr.strip()}")
        return done.stdout

    def plug(self, port: str, bridge: str) -> None:
        """`port` (a veth end moved here) a port of `bridge`, up."""
        self.run("ip", "link", "set", port, "master", bridge)
        self.run("ip", "link", "set", port, "up")

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def management_ip(index: int) -> str:
    return f"10.99.0.{10 + index}"


def uplinks(fabric: Fabric, index: int) -> Callable[[NodeNamespaces], None]:
    """The `links` of node `index` (the module docstring's picture)."""

    def make(node: NodeNamespaces) -> None:
        ports = {"na-eth0": f"na-f{index}m", "na-dp0": f"na-f{index}d0", "na-dp1": f"na-f{index}d1"}
        for link, port in ports.items():
            node.run("ip", "link", "add", link, "type", "veth", "peer", "name", port,
                     "netns", str(fabric.pid))  # fmt: skip
            node.run("ip", "link", "set", link, "up")
            fabric.plug(port, "na-mgmt" if link == "na-eth0" else "na-data")
        for argv in (
            ("ip", "addr", "add", f"{management_ip(index)}/24", "dev", "na-eth0"),
            ("ip", "route", "add", "default", "via", FABRIC_GATEWAY, "dev", "na-eth0"),
            ("ip", "addr", "add", f"{real_node.SERVICE_IP}/32", "dev", "lo"),
            # the premade data bridge: up, an address of its own, no router adverts (what the
            # bridge plugin would otherwise change on a node bridge: SEC-VALUES)
            ("ip", "link", "add", DATA_BRIDGE, "type", "bridge"),
            ("ip", "link", "set", DATA_BRIDGE, "address", f"02:00:00:00:0d:{index:02x}"),
            ("ip", "link", "set", "na-dp1", "master", DATA_BRIDGE),
            ("ip", "link", "set", DATA_BRIDGE, "up"),
            ("sysctl", "-qw", f"net.ipv6.conf.{DATA_BRIDGE}.accept_ra=0"),
            # the node routes between pods (the default network's bridge is their gateway)
            ("sysctl", "-qw", "net.ipv4.ip_forward=1"),
        ):
            node.run(*argv)

    return make


@dataclasses.dataclass
class RealCluster:
    control: NodeControlPlane
    fabric: Fabric
    nodes: list[RealNode]

    @property
    def api(self) -> RealKubeApi:
        return self.nodes[0].api

    def kubectl(self, *args: str, timeout: float = 120.0) -> str:
        return self.nodes[0].kubectl(*args, timeout=timeout)

    def node(self, name: str) -> RealNode:
        (found,) = [node for node in self.nodes if node.name == name]
        return found

    def node_of(self, pod: dict[str, Any]) -> RealNode:
        return self.node(pod["spec"]["nodeName"])

    def route_pod_cidrs(self) -> None:
        """Each node's route to every other node's podCIDR, through that node's na-eth0."""
        for node in self.nodes:
            for index, other in enumerate(self.nodes, start=1):
                if other is not node:
                    node.namespaces.run("ip", "route", "replace", other.cluster_subnet,
                                        "via", management_ip(index), "dev", "na-eth0")  # fmt: skip

    def deploy(self, image_archive: Path) -> None:
        """The image loaded on every node, deploy/ applied once (`RealNode.deploy` on the first
        node), and the DaemonSet's pod Ready on each node."""
        for node in self.nodes[1:]:
            node.load_image(image_archive)
        self.nodes[0].deploy(image_archive)
        for node in self.nodes[1:]:
            node.wait_daemon_ready()
            conflist = node.fs("/etc/cni/net.d/00-netattach.conflist")
            real_node.wait_until("00-netattach.conflist installed", conflist.exists, 30.0)


@contextlib.contextmanager
def real_cluster(directory: Path, count: int = 3) -> Iterator[RealCluster]:
    """The cluster of the module docstring: `count` nodes Ready (netattach not yet deployed)."""
    reason = real_node.unavailable_reason()
    if reason is not None:
        raise NodeError(reason)
    directory.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        control = real_node.start_control_plane(stack, directory, ClusterControlPlane)
        fabric = Fabric()
        stack.callback(fabric.close)
        fabric.start()
        nodes = []
        for index in range(1, count + 1):
            base = directory / f"node-{index}"
            base.mkdir()
            nodes.append(
                real_node.start_node(
                    stack,
                    control,
                    base,
                    name=f"na-node{index}-{os.urandom(2).hex()}",
                    links=uplinks(fabric, index),
                    own_links=OWN_LINKS,
                    own_addresses=frozenset({f"{management_ip(index)}/24"}),
                    cluster_subnet=None,
                )
            )
        cluster = RealCluster(control=control, fabric=fabric, nodes=nodes)
        cluster.route_pod_cidrs()
        yield cluster
