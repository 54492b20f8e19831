"""The orchestrator on the Kubernetes feed: an ADD of a pod the watch has not delivered yet reads
it directly, publishes its status and Events through the API; DEL and CHECK work from the record
with the API gone (RT-NOAPI). Delegates are the exec-seam fakes of tests/unit (no root)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from netattach.cluster import kube, model
from netattach.cni import env, errors
from netattach.daemon import service
from netattach.pods import locks, orchestrator, records
from netattach.runtime import chain
from netattach.settings import settings
from tests.kube import objects
from tests.kube.api import KubeApi
from tests.kube.test_feed import FAST, node_name, run_bounded
from tests.unit.fake_plugins import FakePlugins


def configure(tmp_path: Path, kubeconfig: Path, node: str) -> settings.Settings:
    (tmp_path / "networks").mkdir()
    (tmp_path / "networks" / "default.conf").write_text(
        json.dumps({"cniVersion": "1.0.0", "name": "cluster-default", "type": "bridge"})
    )
    return settings.parse_settings(
        {
            "clusterNetwork": "cluster-default",
            "networksDir": str(tmp_path / "networks"),
            "binDirs": [str(tmp_path / "bin")],
            "stateDir": str(tmp_path / "state"),
            "nodeName": node,
            "feed": {"kubernetes": {"kubeconfig": str(kubeconfig)}},
        },
        source="test",
    )


def call(command: str, namespace: str, uid: str) -> env.Environment:
    return env.Environment(
        command=command,
        container_id="c1",
        netns="/run/netns/na-kube",
        ifname="eth0",
        args=(("K8S_POD_NAMESPACE", namespace), ("K8S_POD_NAME", "web"), ("K8S_POD_UID", uid)),
    )


@pytest.mark.req("KUBE-CACHE", "KUBE-STATUS", "KUBE-EVENTS", "RT-NOAPI")
@pytest.mark.needs_fake(
    "fails lists, restarts and stops the API server (inject_error, restart, stop)"
)
def test_add_reads_a_new_pod_directly_and_del_and_check_need_no_api(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str, tmp_path: Path
) -> None:
    ns, node = kube_namespace, node_name()
    cfg = configure(tmp_path, kubeconfig, node)
    plugins = FakePlugins(tmp_path / "bin", ["bridge", "macvlan"])
    fake_api.create(objects.nad("blue", ns, config={"cniVersion": "1.0.0", "type": "macvlan"}))

    async def body() -> None:
        feed = kube.KubeFeed(node_name=node, kubeconfig=kubeconfig, timing=FAST)
        view = feed.store  # it reads through the feed
        orch = orchestrator.Orchestrator(
            settings=cfg,
            view=view,
            sink=feed,
            runtime=chain.Runtime(
                path=[str(plugins.directory)], cache_dir=tmp_path / "cache", executor=plugins
            ),
            records=records.PodRecords(tmp_path / "state"),
            locks=locks.ContainerLocks(tmp_path / "state"),
        )
        task = asyncio.create_task(feed.run())
        try:
            assert await view.wait_synced(10.0)
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
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await feed.aclose()

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
