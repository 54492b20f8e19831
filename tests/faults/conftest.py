"""Fixtures of the fault tier: the e2e tier's cluster, daemon and fake API, and a daemon shared
by the tests of one module (a daemon start costs about a second; the fuzz, hostile-input,
delegate and damaged-state modules run many short cases against one)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import cluster
from tests.e2e.daemon_harness import DaemonNode, daemon, native_shim, shim_zipapp
from tests.e2e.harness import Cluster, net_a
from tests.e2e.kube_daemon_harness import kube_api, kube_daemon
from tests.netns_fixtures import Node, netns_unavailable_reason, unique

# re-exported fixtures
__all__ = ["cluster", "daemon", "kube_api", "kube_daemon", "native_shim", "shim_zipapp"]


@pytest.fixture(scope="module")
def module_cluster() -> Iterator[Cluster]:
    """A `Cluster` (node namespace, manifests, state, host-local dir) for a whole module; every
    namespace it made is removed at the module's end."""
    from netattach.netns import links, namespace

    reason = netns_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    root = Path(tempfile.mkdtemp(prefix="na-faults-"))
    made: list[str] = []
    node_name = unique("node")
    node = Node(name=node_name, path=namespace.create(node_name))

    def make_pod() -> str:
        name = unique("pod")
        made.append(name)
        return namespace.create(name)

    try:
        links.set_up(node.path, "lo")
        links.set_node_forwarding(node.path)
        ipam = root / "ipam"
        ipam.mkdir()
        yield Cluster(root / "cluster", node, ipam, make_pod)
    finally:
        for name in made:
            namespace.remove(name)
        namespace.remove(node_name)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def module_daemon(module_cluster: Cluster, native_shim: Path) -> Iterator[DaemonNode]:
    """A daemon for `module_cluster`, not started, installing the static C shim as on a node:
    the module configures and starts it once. Stopped at the module's end, whatever its tests
    did."""
    node = DaemonNode(module_cluster)
    try:
        yield node
    finally:
        node.close()


@pytest.fixture(scope="module")
def running(module_daemon: DaemonNode) -> DaemonNode:
    """The module's daemon, started, with one network: NAD `blue/net-a`, a bridge with
    host-local on 10.81.0.0/24. A module whose cases need other networks defines its own."""
    net_a(module_daemon.cluster)
    module_daemon.start()
    return module_daemon
