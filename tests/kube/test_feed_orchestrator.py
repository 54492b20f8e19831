"""The orchestrator on the Kubernetes feed: an ADD of a pod the watch has not delivered yet reads
it directly, publishes its status and Events through the API; DEL and CHECK work from the record
with the API gone (RT-NOAPI). Delegates are the exec-seam fakes of tests/unit (no root), through
tests/kube/orchestrator_harness.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from netattach.cluster import model
from netattach.cni import errors
from netattach.daemon import service
from tests.kube import objects
from tests.kube.api import KubeApi
from tests.kube.feed_harness import node_name, run_bounded
from tests.kube.orchestrator_harness import call, configure, feed_and_orchestrator
from tests.unit.fake_plugins import FakePlugins


@pytest.mark.req("KUBE-CACHE", "KUBE-STATUS", "KUBE-EVENTS", "RT-NOAPI")
@pytest.mark.needs_fake(
    "fails lists, restarts and stops the API server (inject_error, restart, stop)"
)
def test_add_reads_a_new_pod_directly_and_del_and_check_need_no_api(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str, tmp_path: Path
) -> None:
    ns, node = kube_namespace, node_name()
    plugins = FakePlugins(tmp_path / "bin", ["bridge", "macvlan"])
    fake_api.create(objects.nad("blue", ns, config={"cniVersion": "1.0.0", "type": "macvlan"}))

    async def body() -> None:
        async with feed_and_orchestrator(tmp_path, kubeconfig, node, plugins) as (feed, orch, _):
            # A pod watch that cannot deliver (it fails to reconnect after a restart): the ADD
            # comes before the watch has seen the pod, as right after a pod's creation.
            fake_api.inject_error(500, method="GET", path=r"^/api/v1/pods$", times=1000)
            await asyncio.to_thread(fake_api.restart, 0.1)
            pod = fake_api.create(
                objects.pod(
                    "web", ns, node_name=node, annotations={model.NETWORKS_ANNOTATION: "blue"}
                )
            )
            uid = pod["metadata"]["uid"]
            await orch.add(call("ADD", ns, uid), {"cniVersion": "1.0.0"})
            assert await feed.flush_events(5.0)

            fake_api.stop()  # RT-NOAPI: the API is gone from here on
            await orch.check(call("CHECK", ns, uid))
            fake_api.delete("Pod", "web", ns)  # deleted meanwhile (the watch cannot tell)
            await orch.delete(call("DEL", ns, uid))

    run_bounded(body())
    assert ("macvlan", "DEL") in plugins.commands()
    direct_reads = [
        r for r in fake_api.requests if r.method == "GET" and r.path.endswith(f"/{ns}/pods/web")
    ]
    assert [r.status for r in direct_reads] == [200]
    status_patches = [r for r in fake_api.requests if r.method == "PATCH" and "/pods/" in r.path]
    assert len(status_patches) == 1
    published = json.loads(
        status_patches[0].body["metadata"]["annotations"][model.STATUS_ANNOTATION]
    )
    assert [e["name"] for e in published] == ["cluster-default", f"{ns}/blue"]
    events = [(e["reason"], e["message"]) for e in fake_api.events_for(ns, "web")]
    assert [reason for reason, _ in events] == ["AddedInterface", "AddedInterface"]
    assert events[1][1].startswith("Add net1 ")


def test_the_daemon_serves_feed_kubernetes_through_a_view_that_reads_directly(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str, tmp_path: Path
) -> None:
    ns, node = kube_namespace, node_name()
    created = fake_api.create(objects.pod("web", ns, node_name=node))
    daemon = service.Daemon(configure(tmp_path, kubeconfig, node))
    assert daemon.orchestrator.view is daemon.view
    assert daemon.view is daemon.feed.store
    assert daemon.orchestrator.sink is daemon.feed
    found: list[model.KubeObject | None] = []

    async def body() -> None:
        try:
            found.append(await daemon.view.fetch_pod(ns, "web"))  # no watch runs: the API's
        finally:
            await daemon.feed.aclose()

    run_bounded(body())
    (pod,) = found
    assert pod is not None
    assert model.uid_of(pod) == created["metadata"]["uid"]


def test_a_kubeconfig_that_cannot_be_read_fails_at_start_up(tmp_path: Path) -> None:
    with pytest.raises(errors.InvalidNetworkConfigError, match=r"feed\.kubernetes: cannot load"):
        service.Daemon(configure(tmp_path, tmp_path / "missing-kubeconfig", node_name()))
