"""POL-CTRL, POL-SPAN on a real API server: the policy controller (two replicas, one Lease)
publishes each policy peer's pods as PolicyPeerGroups; a node's Kubernetes feed reads only the
groups its pods' policies name, and compiles from them the rules it would compile from every pod;
a leader change, a time with no controller at all, an API server restart and a node that was
away lose nothing.

Pods are API objects only (no kubelet): `spec.nodeName` set, their network-status written at
creation. Every selector this test writes names labels of its own run, so pods other tests left
in the shared cluster are in none of its groups.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kube.api import KubeApi
from tests.kube.cluster import LocalCluster
from tests.kube.policy_scene import (
    PATH,
    Loop,
    NodeSpan,
    build_scene,
    controller,
    loop,
    node_rules,
    replica,
    wait_for,
)
from tests.kube.real_api import RealKubeApi

pytestmark = [pytest.mark.req("POL-CTRL"), pytest.mark.req("POL-SPAN"), pytest.mark.timeout(300)]


@pytest.fixture
def real_api(fake_api: KubeApi) -> Iterator[RealKubeApi]:
    if not isinstance(fake_api, RealKubeApi):
        pytest.skip("the policy controller's Lease and groups are proven on a real API server")
    yield fake_api
    for item in fake_api.http.get(PATH).json().get("items") or []:
        fake_api.http.request("DELETE", f"{PATH}/{item['metadata']['name']}")


def test_two_replicas_one_leads_and_a_nodes_span_compiles_its_full_rules(
    real_api: RealKubeApi, kubeconfig: Path, loop: Loop
) -> None:
    scene = build_scene(real_api)
    first, second = controller(kubeconfig, scene, "a"), controller(kubeconfig, scene, "b")
    runs = {"a": loop.start(first.run()), "b": loop.start(second.run())}
    try:
        wait_for("a leader", lambda: first.leading.is_set() or second.leading.is_set())
        leader, follower = (first, second) if first.leading.is_set() else (second, first)
        time.sleep(1.0)
        assert not follower.leading.is_set()  # one Lease, one writer
        wait_for("the groups published", scene.converged)
        lease = real_api.http.get(
            f"/apis/coordination.k8s.io/v1/namespaces/{scene.ns[0]}/leases/"
            "netattach-policy-controller"
        ).json()
        assert lease["spec"]["holderIdentity"] == leader.lease.identity
        for node in (1, 2):
            full, spanned = loop.run(node_rules(kubeconfig, scene, node))
            assert spanned == full, node
            # db (on na-n1) is governed, with peers on both nodes; na-n2's pods are not
            assert bool(any(full.values())) == (node == 1), full

        # the leader stops: the follower takes the Lease and follows the next change
        runs[leader.lease.identity].cancel()
        wait_for("the follower leading", follower.leading.is_set)
        scene.relabel(f"{scene.ns[1]}/batch", {"app": "web"})  # now a peer of db-from-web
        wait_for("the change published by the new leader", scene.converged)
        assert f"{scene.ns[1]}/batch" in set().union(*scene.published().values())
        full, spanned = loop.run(node_rules(kubeconfig, scene, 1))
        assert spanned == full
    finally:
        for future in runs.values():
            future.cancel()
        loop.run(first.aclose())
        loop.run(second.aclose())


def test_with_no_controller_the_groups_stay_and_the_next_leader_catches_up(
    real_api: RealKubeApi, kubeconfig: Path, loop: Loop
) -> None:
    scene = build_scene(real_api)
    first = controller(kubeconfig, scene, "a")
    run = loop.start(first.run())
    wait_for("the groups published", scene.converged)
    run.cancel()
    loop.run(first.aclose())
    before = scene.published()

    # no controller: a new peer, a removed one; the published groups stay as they were
    scene.pod(0, "late", 2, {"app": "web"}, 5)
    scene.relabel(f"{scene.ns[0]}/web", {"app": "gone"})
    time.sleep(1.0)
    assert scene.published() == before
    assert not scene.converged()

    second = controller(kubeconfig, scene, "b")
    run = loop.start(second.run())
    try:
        wait_for("the next leader caught up", scene.converged)
        assert scene.published() != before
        assert f"{scene.ns[0]}/late" in set().union(*scene.published().values())
        full, spanned = loop.run(node_rules(kubeconfig, scene, 1))
        assert spanned == full
    finally:
        run.cancel()
        loop.run(second.aclose())


def _follows(loop: Loop, node: NodeSpan) -> bool:
    full, spanned = loop.run(node.rules())
    return bool(spanned == full)


def test_an_api_server_restart_loses_nothing_and_a_node_that_was_away_catches_up(
    kube_cluster: LocalCluster | None, real_api: RealKubeApi, kubeconfig: Path, loop: Loop
) -> None:
    if kube_cluster is None:
        pytest.skip("restarts the API server: the tier's own local cluster only")
    scene = build_scene(real_api)
    run = loop.start(replica(kubeconfig, scene, "a"))
    node = loop.run(NodeSpan(kubeconfig, scene, 1).start())
    try:
        wait_for("the groups published", scene.converged)
        full, spanned = loop.run(node.rules())
        assert spanned == full
        assert any(full.values())

        # every connection and watch broken (a stopping kube-apiserver refuses new connections
        # at once and ends its watches up to ~15 s later: the controller may lose its Lease and
        # start again, as its pod would); the node's feed does not restart, and a pod made
        # after it (a peer of db) reaches the groups and the node
        kube_cluster.restart_apiserver(down=3.0)
        scene.pod(1, "fresh", 2, {"app": "web"}, 7)
        wait_for("the pod published after the restart", scene.converged, 60.0)
        assert f"{scene.ns[1]}/fresh" in set().union(*scene.published().values())
        wait_for("the node's feed following", lambda: _follows(loop, node), 60.0)
        assert "10.9.0.7" in repr(loop.run(node.rules())[1])

        # the node away (its feed stopped) while a peer comes and another goes; back, it reads
        # the groups as they are now
        loop.run(node.aclose())
        scene.pod(0, "late", 2, {"app": "web"}, 6)
        scene.relabel(f"{scene.ns[0]}/web", {"app": "gone"})
        wait_for("the changes published", scene.converged)
        node = loop.run(NodeSpan(kubeconfig, scene, 1).start())
        full, spanned = loop.run(node.rules())
        assert spanned == full
        assert "10.9.0.6" in repr(spanned)  # late, a peer of db since the node went away
    finally:
        run.cancel()
        loop.run(node.aclose())


__all__ = ["loop"]  # the fixture this module uses
