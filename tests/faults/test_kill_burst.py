"""kill -9 of the daemon in the middle of a 100-pod ADD burst, on both feeds.

The runtime's view: some ADDs were answered, the rest got "try again" (11) when the daemon
vanished; it restarts the daemon and DELs every pod. Afterwards nothing may remain: no interface
in a sandbox or on the node (only the bridges the networks made), no host-local allocation, no
pod record, cache entry, lock, status file or interrupted-write temporary, and no delegate
process of those pods. The kill itself and the DEL-everything check are the e2e tier's
`kill_mid_burst_then_del_all`; this tier runs it at full size, 100 pods, on both feeds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.burst_harness import kill_mid_burst_then_del_all
from tests.e2e.daemon_harness import DaemonNode, plugin_processes
from tests.e2e.harness import Cluster, Pod, bridge_list, host_local, probe
from tests.e2e.kube_daemon_harness import NS, api_pods, statuses
from tests.e2e.kube_harness import RemoteKubeApi
from tests.kube import objects

pytestmark = pytest.mark.netns

BURST = 100
# Each pod's probe sleeps this long in ADD and DEL, so the kill finds many ADDs half done.
PROBE_SLEEP = 0.1


def burst_network(cluster: Cluster, log: Path) -> dict[str, Any]:
    """A bridge + host-local network of its own, then the probe: each pod gets an interface, an
    address and a host veth on it, besides the default network's."""
    ipam = host_local(cluster.ipam, "10.81.0.0/24")
    return bridge_list(None, ipam, probe(log, sleep=PROBE_SLEEP))


def only_bridges_left(cluster: Cluster, network: dict[str, Any], pods: list[Pod]) -> None:
    """The node holds the two networks' bridges and nothing else; no delegate of the pods runs."""
    extra = set(cluster.node_links()) - {cluster.default_bridge, network["plugins"][0]["bridge"]}
    assert extra == set(), f"links left on the node: {sorted(extra)}"
    assert plugin_processes({pod.container_id for pod in pods}) == []


@pytest.mark.req("RT-ATOMIC", "RT-DEL")
def test_kill_9_mid_burst_of_100_pods_then_del_frees_everything(
    daemon: DaemonNode, tmp_path: Path
) -> None:
    cluster = daemon.cluster
    log = tmp_path / "probe.log"
    network = burst_network(cluster, log)
    cluster.add_nad("blue", "net-a", network)
    pods = [cluster.pod("blue", f"web-{n}", "net-a") for n in range(BURST)]
    daemon.start()

    kill_mid_burst_then_del_all(daemon, pods, log)

    only_bridges_left(cluster, network, pods)
    assert daemon.stop() == 0


@pytest.mark.req("RT-ATOMIC", "RT-DEL")
def test_kill_9_mid_burst_of_100_api_pods_then_del_frees_everything(
    kube_daemon: DaemonNode, kube_api: RemoteKubeApi, tmp_path: Path
) -> None:
    daemon, cluster = kube_daemon, kube_daemon.cluster
    log = tmp_path / "probe.log"
    network = burst_network(cluster, log)
    kube_api.create(objects.nad("net-a", NS, config=network))
    pods = api_pods(kube_api, cluster, BURST, "net-a")
    daemon.start()

    kill_mid_burst_then_del_all(daemon, pods, log)

    assert statuses(kube_api) == {}  # every published network-status taken away again
    only_bridges_left(cluster, network, pods)
    assert daemon.stop() == 0
