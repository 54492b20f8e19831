"""What the delegate-policy tests share (SEC-DELEGATE, SEC-KEYS, SEC-NODE, SEC-VALUES): the
policy granted on top of the harness's, stand-ins for the node's NICs and uplink, the shape of a
refusal, and the proof that a refused pod left nothing behind.

The test's node namespace stands for the node: a veth end `na-up-*` with an address and the
default route through a gateway on its link is its uplink; other veth ends stand for NICs.
"""

from __future__ import annotations

from typing import Any

from netattach.netns import links
from tests.e2e.harness import NOTHING, Cluster, Pod, Reply, host_local
from tests.netns_fixtures import ip_in, unique

NS = "blue"


def grant(cluster: Cluster, **lists: Any) -> None:
    """The cluster's delegate policy: the harness's (default types and the test plugins) with
    `lists` on top."""
    cluster.settings["delegatePolicy"] = {**cluster.settings["delegatePolicy"], **lists}


def nic(cluster: Cluster, role: str) -> str:
    """A veth end in the node namespace named `na-<role>-*`, standing for a host NIC."""
    name, peer = unique(role), unique("peer")
    links.add_veth_pair(cluster.node.path, name, peer)
    return name


def refused(reply: Reply, nad: str, key: str, value: str, rule: str) -> None:
    assert reply.rc == 1, reply
    assert reply.code == 7
    msg = reply.out["msg"]
    assert f"NetworkAttachmentDefinition {NS}/{nad} refused by the delegate policy: " in msg
    assert f"{key} {value} " in msg
    assert rule in msg


def pod_selecting(cluster: Cluster, ns: str, nad: str, config: Any) -> tuple[list[str], Pod]:
    """NAD `nad` of `config` in `ns`, then pod `web` selecting it: the node's links from before
    the pod (for `nothing_attached`), and the pod."""
    cluster.add_nad(ns, nad, config)
    before = cluster.node_links()
    return before, cluster.pod(ns, "web", nad)


def nothing_attached(cluster: Cluster, pod: Pod, node_links: list[str]) -> None:
    """No record, no allocation, no interface in the pod, no new link on the node (the veths
    standing for NICs, in `node_links`, aside)."""
    left = cluster.leftovers()
    left["host veths"] = [name for name in left["host veths"] if name not in node_links]
    assert left == NOTHING
    assert cluster.interfaces(pod.netns) == {}
    assert cluster.node_links() == node_links


def ip(cluster: Cluster, *args: str) -> None:
    """`ip ARGS` in the test's node namespace (never the host's)."""
    ip_in(str(cluster.node.path), *args)


def uplink(cluster: Cluster, address: str, gateway: str) -> str:
    """A stand-in for the node's uplink: `address` on it and the default route via `gateway`."""
    name = nic(cluster, "up")
    ip(cluster, "address", "add", address, "dev", name)
    ip(cluster, "route", "add", "default", "via", gateway, "dev", name)
    return name


def node_state(cluster: Cluster) -> tuple[dict[str, tuple[str, ...]], list[dict[str, Any]]]:
    """The node's links with their addresses, and its routes: what an attack must not change."""
    found = links.read_interfaces(cluster.node.path)
    addresses = {name: state.addresses for name, state in found.items() if name != "lo"}
    return addresses, cluster.routes(cluster.node.path)


def macvlan(master: str | None, subnet: str, cluster: Cluster, **extra: Any) -> dict[str, Any]:
    plugin: dict[str, Any] = {"cniVersion": "1.0.0", "type": "macvlan", **extra}
    if master is not None:
        plugin["master"] = master
    plugin["ipam"] = host_local(cluster.ipam, subnet)
    return plugin
