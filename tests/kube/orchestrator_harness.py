"""The orchestrator on the Kubernetes feed, for the tests that drive ADD, CHECK and DEL through
it: settings for a node of the test's own, a CNI call, and a feed with an orchestrator reading
through it. Delegates are the exec-seam fakes of tests/unit (no root)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from netattach.cluster import kube
from netattach.cni import env
from netattach.pods import locks, orchestrator, records
from netattach.runtime import chain
from netattach.settings import settings
from tests.kube.feed_harness import FAST
from tests.unit.fake_plugins import FakePlugins


def configure(tmp_path: Path, kubeconfig: Path, node: str) -> settings.Settings:
    """Settings for `node` on the feed at `kubeconfig`, with a bridge cluster network."""
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
    """A CNI call for the pod `web` in `namespace` with `uid`."""
    return env.Environment(
        command=command,
        container_id="c1",
        netns="/run/netns/na-kube",
        ifname="eth0",
        args=(("K8S_POD_NAMESPACE", namespace), ("K8S_POD_NAME", "web"), ("K8S_POD_UID", uid)),
    )


@asynccontextmanager
async def feed_and_orchestrator(
    tmp_path: Path, kubeconfig: Path, node: str, plugins: FakePlugins | None = None
) -> AsyncIterator[tuple[kube.KubeFeed, orchestrator.Orchestrator, FakePlugins]]:
    """A synced feed running in the background and an orchestrator reading through it, whose
    delegates are `plugins` (a fake bridge unless given; they live in tmp_path/bin)."""
    cfg = configure(tmp_path, kubeconfig, node)
    if plugins is None:
        plugins = FakePlugins(tmp_path / "bin", ["bridge"])
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
        yield feed, orch, plugins
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await feed.aclose()
