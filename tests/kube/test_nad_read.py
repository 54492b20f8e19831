"""A NAD missing from the watch cache is read from the API before an ADD fails for it
(KUBE-NADREAD), as a missing pod is: the first ADD after an API restart, while the NAD watch has
not caught up, attaches a NAD that exists; a NAD the API does not have either is 101, after one
read. Scripted faults (a watch that cannot come back) need the in-repo fake."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from netattach.cluster import model
from netattach.cni import errors
from tests.kube import objects
from tests.kube.api import KubeApi, RequestRecord
from tests.kube.feed_harness import node_name, run_bounded
from tests.kube.orchestrator_harness import call, feed_and_orchestrator
from tests.unit.fake_plugins import FakePlugins

NAD_COLLECTION = r"^/apis/k8s\.cni\.cncf\.io/v1/network-attachment-definitions$"


def nad_reads(fake_api: KubeApi, namespace: str, name: str) -> list[RequestRecord]:
    path = f"/apis/k8s.cni.cncf.io/v1/namespaces/{namespace}/network-attachment-definitions/{name}"
    return [r for r in fake_api.requests if r.method == "GET" and r.path == path]


def add_after_an_api_restart(
    fake_api: KubeApi, kubeconfig: Path, namespace: str, tmp_path: Path, *, nad_exists: bool
) -> tuple[FakePlugins, BaseException | None]:
    """Sync a feed, restart the API with the NAD watch unable to come back, create the pod
    (and the NAD, when `nad_exists`), then ADD; the plugins run and the ADD's error."""
    node = node_name()
    plugins = FakePlugins(tmp_path / "bin", ["bridge", "macvlan"])
    failure: list[BaseException] = []

    async def body() -> None:
        async with feed_and_orchestrator(tmp_path, kubeconfig, node, plugins) as (feed, orch, _):
            # The NAD watch cannot list or watch again after the restart: its cache keeps
            # what it had before (no NAD), as while a reflector backs off after a restart.
            fake_api.inject_error(500, method="GET", path=NAD_COLLECTION, times=1000)
            await asyncio.to_thread(fake_api.restart, 0.1)
            if nad_exists:
                config = {"cniVersion": "1.0.0", "type": "macvlan"}
                fake_api.create(objects.nad("blue", namespace, config=config))
            pod = fake_api.create(
                objects.pod(
                    "web",
                    namespace,
                    node_name=node,
                    annotations={model.NETWORKS_ANNOTATION: "blue"},
                )
            )
            assert feed.store.lookup_nad(namespace, "blue") is None
            try:
                await orch.add(
                    call("ADD", namespace, pod["metadata"]["uid"]), {"cniVersion": "1.0.0"}
                )
            except errors.CNIError as exc:
                failure.append(exc)

    run_bounded(body())
    return plugins, (failure[0] if failure else None)


@pytest.mark.req("KUBE-NADREAD", "KUBE-CACHE")
@pytest.mark.needs_fake(
    "fails the NAD list and restarts the API server (inject_error, restart), reads the request log"
)
def test_the_first_add_after_an_api_restart_reads_a_nad_the_cache_lacks(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str, tmp_path: Path
) -> None:
    plugins, failure = add_after_an_api_restart(
        fake_api, kubeconfig, kube_namespace, tmp_path, nad_exists=True
    )

    assert failure is None
    assert ("macvlan", "ADD") in plugins.commands()
    assert [r.status for r in nad_reads(fake_api, kube_namespace, "blue")] == [200]


@pytest.mark.req("KUBE-NADREAD")
@pytest.mark.needs_fake("counts the reads the daemon made (requests)")
def test_a_nad_the_api_lacks_too_is_101_after_one_read(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str, tmp_path: Path
) -> None:
    plugins, failure = add_after_an_api_restart(
        fake_api, kubeconfig, kube_namespace, tmp_path, nad_exists=False
    )

    assert isinstance(failure, errors.AttachmentNotFoundError)
    assert failure.msg.endswith(f"NetworkAttachmentDefinition {kube_namespace}/blue not found")
    assert ("macvlan", "ADD") not in plugins.commands()
    assert [r.status for r in nad_reads(fake_api, kube_namespace, "blue")] == [404]
