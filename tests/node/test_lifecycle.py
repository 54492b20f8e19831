"""What happens around the pods' lives on a real node: containerd restarting under running
sandboxes, the daemon being down while containerd asks (and, with `cleanupOnExit`, away during
an upgrade), and a burst of pods.

reference/real-world.md: containerd makes no CNI call at all when it restarts with sandboxes
running; with the daemon stopped every call answers 11 naming the socket, containerd does not
retry, and keeps a NotReady sandbox when the cleanup DEL after a failed ADD fails too (kubelet
retries by stopping it again later).
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.daemon_harness import wait_for
from tests.e2e.harness import DEFAULT_SUBNET, NOTHING, bridge_list, host_local
from tests.e2e.kube_harness import RemoteKubeApi
from tests.netns_fixtures import unique
from tests.node.api_view import api_status, nad_object, pod_object
from tests.node.containerd import CNI_PLUGINS
from tests.node.cri.client import CriError, SandboxSpec
from tests.node.harness import Feed, Kubelet, NodeDaemon, NodeHost, PodSandbox, refusal

# root, network namespaces, containerd: under NETATTACH_REQUIRE_NETNS=1 a skip is a failure
pytestmark = [pytest.mark.netns, pytest.mark.req("KUBE-NODE")]

NS = "blue"
NET_A = "10.91.0.0/24"


def one_network_pod(feed: Feed, kubelet: Kubelet, name: str) -> PodSandbox:
    """A pod selecting `net-a` (the NAD made if missing), run by containerd."""
    feed.add_nad(NS, "net-a", bridge_list(None, host_local(feed.daemon.cluster.ipam, NET_A)))
    uid = feed.add_pod(NS, name, "net-a")
    sandbox = kubelet.run(kubelet.spec(NS, name, uid, "net-a"))
    assert sorted(kubelet.interfaces(sandbox)) == ["eth0", "net1"]
    return sandbox


def ipv4(addresses: tuple[str, ...]) -> list[str]:
    return [a for a in addresses if ipaddress.ip_interface(a).version == 4]


def assert_nothing_left(daemon: NodeDaemon, kubelet: Kubelet) -> None:
    assert kubelet.sandbox_ids() == []
    assert daemon.cluster.leftovers() == NOTHING
    assert kubelet.netns_left() == []


@pytest.mark.req("RT-DEL")
def test_containerd_restarted_with_sandboxes_running_then_they_are_torn_down(
    node_host: NodeHost, feed: Feed, kubelet: Kubelet
) -> None:
    daemon = feed.daemon
    daemon.start()
    pods = [one_network_pod(feed, kubelet, name) for name in ("web", "db")]
    kernel = {pod.id: kubelet.interfaces(pod) for pod in pods}
    calls = (daemon.requests("ADD", "0"), daemon.requests("DEL", "0"))
    assert calls == (2.0, None)

    node_host.containerd.restart()

    # containerd found its sandboxes again, ready, with their interfaces untouched, and made no
    # CNI call to do so
    assert kubelet.sandbox_ids() == sorted(pod.id for pod in pods)
    for pod in pods:
        assert kubelet.status(pod).ready
        assert kubelet.interfaces(pod) == kernel[pod.id]
    assert (daemon.requests("ADD", "0"), daemon.requests("DEL", "0")) == calls

    for pod in pods:
        kubelet.teardown(pod.id)

    assert_nothing_left(daemon, kubelet)
    assert daemon.requests("DEL", "0") is not None


@pytest.mark.req("RT-DELERR")
def test_with_the_daemon_stopped_containerd_reports_the_socket_and_recovers_when_it_is_back(
    feed: Feed, kubelet: Kubelet
) -> None:
    daemon = feed.daemon
    daemon.start()
    running = one_network_pod(feed, kubelet, "web")
    daemon.terminate_quietly()
    assert not daemon.socket.exists()

    # A new pod: RunPodSandbox fails with the shim's error, which names the socket.
    uid = feed.add_pod(NS, "late", "net-a")
    with pytest.raises(CriError) as refused:
        kubelet.run(kubelet.spec(NS, "late", uid, "net-a"))
    assert refused.value.call == "RunPodSandbox"
    assert str(daemon.socket) in refusal(refused), refusal(refused)
    assert "netattach daemon" in refusal(refused)

    # Stopping the running pod fails the same way: its DEL cannot reach the daemon either.
    with pytest.raises(CriError) as stopped:
        kubelet.cri.stop(running.id)
    assert str(daemon.socket) in refusal(stopped), refusal(stopped)
    assert sorted(kubelet.interfaces(running)) == ["eth0", "net1"]

    daemon.start()

    # What kubelet does next: stop and remove every sandbox it no longer wants, the one whose
    # ADD failed included (containerd kept it when the cleanup DEL failed as well).
    left = kubelet.sandbox_ids()
    assert running.id in left
    for sandbox_id in left:
        kubelet.teardown(sandbox_id)

    assert_nothing_left(daemon, kubelet)


def twenty_in_parallel(
    daemon: NodeDaemon,
    kubelet: Kubelet,
    specs: list[SandboxSpec],
    status_of: Callable[[str], list[dict[str, Any]] | None],
) -> None:
    """Run `specs` at once, check each pod's interfaces, addresses and status, tear all down at
    once, and check nothing is left."""
    sandboxes = kubelet.run_many(specs)

    assert len({sandbox.id for sandbox in sandboxes}) == 20
    addresses: set[str] = set()
    for sandbox in sandboxes:
        kernel = kubelet.interfaces(sandbox)
        assert sorted(kernel) == ["eth0", "net1"]
        (eth0,) = ipv4(kernel["eth0"].addresses)
        (net1,) = ipv4(kernel["net1"].addresses)
        assert ipaddress.ip_interface(eth0) in ipaddress.ip_network(DEFAULT_SUBNET)
        assert ipaddress.ip_interface(net1) in ipaddress.ip_network(NET_A)
        addresses.update((eth0, net1))
        status = wait_for(
            f"the network-status of {sandbox.spec.name}",
            lambda name=sandbox.spec.name: status_of(name),
            20.0,
        )
        assert [(e["interface"], e["ips"]) for e in status] == [
            ("eth0", [eth0]),
            ("net1", [net1]),
        ]
    # every pod its own address on each network, and host-local's books agree
    assert len(addresses) == 40
    assert len(daemon.cluster.allocations()) == 40
    assert daemon.requests("ADD", "0") == 20.0

    kubelet.teardown_many([sandbox.id for sandbox in sandboxes])

    assert_nothing_left(daemon, kubelet)


@pytest.mark.req("RT-SERIAL")
def test_twenty_sandboxes_created_then_torn_down_in_parallel_directory_feed(
    daemon: NodeDaemon, kubelet: Kubelet
) -> None:
    cluster = daemon.cluster
    cluster.add_nad(NS, "net-a", bridge_list(None, host_local(cluster.ipam, NET_A)))
    specs = []
    for index in range(20):
        uid = str(uuid.uuid4())
        name = f"web-{index}"
        cluster.add_pod(NS, name, uid, "net-a")
        specs.append(kubelet.spec(NS, name, uid, "net-a"))
    daemon.start()

    twenty_in_parallel(daemon, kubelet, specs, lambda name: cluster.status(NS, name))


@pytest.mark.req("RT-SERIAL")
def test_twenty_sandboxes_created_then_torn_down_in_parallel_kubernetes_feed(
    kube_api: RemoteKubeApi, kube_daemon: NodeDaemon, kubelet: Kubelet
) -> None:
    cluster = kube_daemon.cluster
    kube_api.create(nad_object("net-a", NS, bridge_list(None, host_local(cluster.ipam, NET_A))))
    specs = []
    for index in range(20):
        name = f"web-{index}"
        pod = kube_api.create(pod_object(name, NS, cluster.node.name, "net-a"))
        specs.append(kubelet.spec(NS, name, pod["metadata"]["uid"], "net-a"))
    kube_daemon.start()

    twenty_in_parallel(kube_daemon, kubelet, specs, lambda name: api_status(kube_api, NS, name))


@pytest.mark.parametrize("cleanup", [False, True], ids=["keep-config", "cleanupOnExit"])
def test_while_the_daemon_is_away_a_pod_waits_unless_cleanup_on_exit_hands_it_to_the_default(
    node_host: NodeHost, daemon: NodeDaemon, kubelet: Kubelet, cleanup: bool
) -> None:
    """docs/deploy.md, Upgrade. On a node the default network's own conflist (flannel's
    10-flannel.conflist) is in the same directory, and containerd loads the first one it finds.
    With the config kept (the ConfigMap's `cleanupOnExit: false`), a pod created while no daemon
    runs gets no sandbox (kubelet retries) and never runs without its networks. With
    `cleanupOnExit: true` the config is gone and containerd starts it on the default network
    alone: what the docs warn of, and why the ConfigMap keeps the config."""
    containerd = node_host.containerd
    cluster = daemon.cluster
    cluster.add_nad(NS, "net-a", bridge_list(None, host_local(cluster.ipam, NET_A)))
    uid = str(uuid.uuid4())
    cluster.add_pod(NS, "web", uid, "net-a")
    node_default = containerd.cni_conf_dir / "10-default.conflist"
    node_default.write_text(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": "node-default",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": unique("br"),
                        "ipam": {
                            "type": "host-local",
                            "subnet": "10.79.0.0/24",
                            "dataDir": str(cluster.ipam),
                        },
                    }
                ],
            }
        )
    )
    added = [containerd.cni_bin_dir / name for name in ("bridge", "host-local")]
    for path in added:
        shutil.copy2(CNI_PLUGINS / path.name, path)
    try:
        daemon.settings["cleanupOnExit"] = cleanup
        daemon.start()
        daemon.terminate_quietly()
        assert daemon.conflist.exists() is not cleanup

        if not cleanup:
            with pytest.raises(CriError, match="netattach"):
                kubelet.run(kubelet.spec(NS, "web", uid, "net-a"))
            return
        sandbox = kubelet.run(kubelet.spec(NS, "web", uid, "net-a"))
        assert sorted(kubelet.interfaces(sandbox)) == ["eth0"]  # no net1: silently missing
    finally:
        kubelet.remove_all()
        node_default.unlink()
        for path in added:
            path.unlink()
