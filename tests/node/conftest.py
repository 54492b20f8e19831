"""Fixtures of tests/node (tests/node/harness.py describes the parts).

node_host     session: the node namespace and the tier's containerd (fails, never skips,
              under NETATTACH_REQUIRE_NETNS=1 when this machine cannot run it)
cluster       per test: tests/e2e's one-node cluster (manifests, networks, state, host-local
              dir, the default network `cluster-default` on a bridge of its own) on that node
daemon        per test: `netattach daemon` on the directory feed (not started), installing
              into containerd's CNI dirs; stopped at teardown, and the node's links cleared
kube_api      per test: the in-repo API server in the node namespace, namespace `blue` in it
kube_daemon   `daemon` on the Kubernetes feed of `kube_api`, its node named after the namespace
feed          per test, twice: the directory feed's `daemon`, then `kube_daemon` and its API
kubelet       per test: CRI calls on containerd; at teardown every sandbox left is stopped and
              removed (the daemon started again for it if the test stopped it)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Cluster
from tests.e2e.kube_harness import RemoteKubeApi
from tests.kube import objects
from tests.netns_fixtures import netns_unavailable_reason
from tests.node import containerd
from tests.node.harness import Feed, Kubelet, NodeDaemon, NodeHost, require
from tests.node.harness import node_host as make_node_host

NS = "blue"


@pytest.fixture(scope="session")
def node_host() -> Iterator[NodeHost]:
    require(netns_unavailable_reason() or containerd.unavailable_reason(), "tests/node")
    with make_node_host() as host:
        yield host


def _no_netns() -> str:
    raise AssertionError("in tests/node containerd makes every pod's network namespace")


@pytest.fixture
def cluster(node_host: NodeHost, tmp_path: Path) -> Cluster:
    ipam = tmp_path / "ipam"
    ipam.mkdir()
    return Cluster(tmp_path / "cluster", node_host.node, ipam, _no_netns)


@pytest.fixture
def daemon(cluster: Cluster, node_host: NodeHost) -> Iterator[NodeDaemon]:
    node = NodeDaemon(cluster, node_host)
    try:
        yield node
    finally:
        node.close()
        node_host.clear_links()


@pytest.fixture
def kube_api(node_host: NodeHost) -> Iterator[RemoteKubeApi]:
    api = RemoteKubeApi.launch(node_host.node.path)
    try:
        api.create(objects.namespace(NS))
        yield api
    finally:
        api.close()


@pytest.fixture
def kube_daemon(kube_api: RemoteKubeApi, daemon: NodeDaemon) -> NodeDaemon:
    kubeconfig = kube_api.write_kubeconfig(daemon.cluster.root / "kubeconfig")
    daemon.settings["feed"] = {"kubernetes": {"kubeconfig": str(kubeconfig)}}
    daemon.settings["nodeName"] = daemon.cluster.node.name
    return daemon


@pytest.fixture(params=["directory", "kubernetes"])
def feed(request: pytest.FixtureRequest, daemon: NodeDaemon) -> Feed:
    """The test once on each feed: its daemon on the directory feed, then on the API server."""
    if request.param == "directory":
        return Feed(daemon, None)
    api = request.getfixturevalue("kube_api")
    return Feed(request.getfixturevalue("kube_daemon"), api)


@pytest.fixture
def kubelet(node_host: NodeHost, daemon: NodeDaemon) -> Iterator[Kubelet]:
    driver = Kubelet(node_host)
    try:
        yield driver
    finally:
        if driver.sandbox_ids():
            if not daemon.alive():
                daemon.start()
            driver.remove_all()
