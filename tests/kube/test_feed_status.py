"""The network-status annotation: one merge patch of that annotation alone, retried (KUBE-STATUS),
and a DEL that needs no API when the cache knows the pod is gone (RT-NOAPI)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from pathlib import Path

import pytest

from netattach.cluster import model
from netattach.cni import errors
from tests.kube import objects
from tests.kube.api import PATCH_CONTENT_TYPES, KubeApi
from tests.kube.feed_harness import FAST, feed_for, node_name, run_bounded, running_feed

STATUS = model.STATUS_ANNOTATION
ENTRIES: list[dict[str, object]] = [
    {"name": "cluster-default", "interface": "eth0", "ips": ["10.1.2.3"], "default": True},
    {
        "name": "blue/macvlan",
        "interface": "net1",
        "ips": ["192.168.1.5"],
        "mac": "02:00:00:00:00:01",
    },
]


def pod_patches(api: KubeApi, name: str) -> list[tuple[int, object]]:
    return [(r.status, r.body) for r in api.requests if r.method == "PATCH" and name in r.path]


def annotations_of(api: KubeApi, name: str, namespace: str) -> dict[str, str]:
    pod = api.get("Pod", name, namespace)
    assert pod is not None
    found: dict[str, str] = pod["metadata"].get("annotations") or {}
    return found


@pytest.mark.req("KUBE-STATUS")
@pytest.mark.needs_fake("reads the PATCH the feed sent (requests)")
def test_publish_status_is_one_merge_patch_of_that_annotation_alone(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str
) -> None:
    ns = kube_namespace
    others = {model.NETWORKS_ANNOTATION: "blue/macvlan", "example.com/keep": "me"}
    fake_api.create(objects.pod("web", ns, labels={"app": "web"}, annotations=others))

    async def body() -> None:
        async with contextlib.aclosing(feed_for(kubeconfig)) as feed:
            await feed.publish_status(ns, "web", ENTRIES)

    run_bounded(body())
    patches = [r for r in fake_api.requests if r.method == "PATCH"]
    assert len(patches) == 1
    (patch,) = patches
    assert patch.path == f"/api/v1/namespaces/{ns}/pods/web"
    assert patch.content_type == PATCH_CONTENT_TYPES["merge"]
    assert patch.body == {"metadata": {"annotations": {STATUS: json.dumps(ENTRIES, indent=4)}}}
    found = annotations_of(fake_api, "web", ns)
    assert json.loads(found[STATUS]) == ENTRIES
    assert {k: v for k, v in found.items() if k != STATUS} == others
    pod = fake_api.get("Pod", "web", ns)
    assert pod is not None
    assert pod["metadata"]["labels"] == {"app": "web"}


@pytest.mark.req("KUBE-STATUS")
@pytest.mark.needs_fake("answers a 409 and a 503 (inject_error)")
def test_publish_status_is_retried_after_a_conflict_and_an_unavailable_server(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str
) -> None:
    ns = kube_namespace
    fake_api.create(objects.pod("web", ns))
    fake_api.inject_error(409, method="PATCH", path=r"/pods/web$")
    fake_api.inject_error(503, method="PATCH", path=r"/pods/web$")

    async def body() -> None:
        async with contextlib.aclosing(feed_for(kubeconfig)) as feed:
            await feed.publish_status(ns, "web", ENTRIES)

    run_bounded(body())
    assert [status for status, _ in pod_patches(fake_api, "web")] == [409, 503, 200]
    assert json.loads(annotations_of(fake_api, "web", ns)[STATUS]) == ENTRIES


@pytest.mark.req("KUBE-STATUS")
@pytest.mark.needs_fake("answers a 429 with Retry-After (inject_error)")
def test_publish_status_honours_retry_after_on_429(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str
) -> None:
    ns = kube_namespace
    fake_api.create(objects.pod("web", ns))
    fake_api.inject_error(429, method="PATCH", path=r"/pods/web$")  # Retry-After: 1

    async def body() -> None:
        async with contextlib.aclosing(feed_for(kubeconfig)) as feed:
            loop = asyncio.get_running_loop()
            started = loop.time()
            await feed.publish_status(ns, "web", ENTRIES)
        assert loop.time() - started >= 1.0

    run_bounded(body())
    assert [status for status, _ in pod_patches(fake_api, "web")] == [429, 200]


@pytest.mark.req("KUBE-STATUS")
@pytest.mark.needs_fake("answers 503 past the budget (inject_error)")
def test_publish_status_gives_up_within_its_budget_with_try_again_later(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str
) -> None:
    ns = kube_namespace
    fake_api.create(objects.pod("web", ns))
    fake_api.inject_error(503, method="PATCH", path=r"/pods/web$", times=1000)

    async def body() -> None:
        async with contextlib.aclosing(feed_for(kubeconfig)) as feed:
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(errors.TryAgainLaterError, match=f"network-status of {ns}/web"):
                await feed.publish_status(ns, "web", ENTRIES)
        assert loop.time() - started <= FAST.status_budget + 0.5

    run_bounded(body())
    assert len(pod_patches(fake_api, "web")) > 2


@pytest.mark.req("KUBE-STATUS")
@pytest.mark.needs_fake("answers a 403 (inject_error)")
def test_publish_status_refused_for_good_fails_at_once(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str
) -> None:
    ns = kube_namespace
    fake_api.create(objects.pod("web", ns))
    fake_api.inject_error(403, method="PATCH", path=r"/pods/web$", message="forbidden by RBAC")

    async def body() -> None:
        async with contextlib.aclosing(feed_for(kubeconfig)) as feed:
            with pytest.raises(errors.IOFailureError) as raised:
                await feed.publish_status(ns, "web", ENTRIES)
            assert "forbidden by RBAC" in raised.value.details

    run_bounded(body())
    assert [status for status, _ in pod_patches(fake_api, "web")] == [403]


@pytest.mark.req("KUBE-STATUS")
def test_publish_status_of_a_deleted_pod_is_tolerated(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str
) -> None:
    async def body() -> None:
        async with contextlib.aclosing(feed_for(kubeconfig)) as feed:
            await feed.publish_status(kube_namespace, "gone", ENTRIES)  # no error: as Multus

    run_bounded(body())


@pytest.mark.req("KUBE-STATUS", "RT-UID")
def test_a_status_with_the_pods_uid_never_lands_on_a_recreated_pod_of_that_name(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A real server answers the UID-guarded PATCH with 422 (metadata.uid is immutable), the
    fake too: neither is an I/O failure, only a debug line."""
    caplog.set_level(logging.DEBUG, logger="netattach.cluster.kube")
    ns = kube_namespace
    old = fake_api.create(objects.pod("web", ns))
    fake_api.delete("Pod", "web", ns)
    fake_api.create(objects.pod("web", ns, annotations={STATUS: "[]"}))

    async def body() -> None:
        async with contextlib.aclosing(feed_for(kubeconfig)) as feed:
            await feed.publish_status(ns, "web", ENTRIES, uid=old["metadata"]["uid"])
            await feed.remove_status(ns, "web", uid=old["metadata"]["uid"])

    run_bounded(body())
    assert annotations_of(fake_api, "web", ns)[STATUS] == "[]"
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [text for level, text in lines if level >= logging.INFO] == []
    assert any(
        level == logging.DEBUG and "another pod's now" in text and "nothing written" in text
        for level, text in lines
    ), lines


@pytest.mark.req("KUBE-STATUS")
@pytest.mark.needs_fake("reads the PATCH the feed sent (requests)")
def test_remove_status_sets_the_annotation_to_null_and_leaves_the_others(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str
) -> None:
    ns = kube_namespace
    created = fake_api.create(
        objects.pod("web", ns, annotations={model.NETWORKS_ANNOTATION: "blue", STATUS: "[]"})
    )

    async def body() -> None:
        async with contextlib.aclosing(feed_for(kubeconfig)) as feed:
            await feed.remove_status(ns, "web", uid=created["metadata"]["uid"])
            await feed.remove_status(ns, "never-was")  # 404: nothing to remove

    run_bounded(body())
    assert annotations_of(fake_api, "web", ns) == {model.NETWORKS_ANNOTATION: "blue"}
    (status, body_sent), *_ = pod_patches(fake_api, "web")
    assert status == 200
    assert body_sent == {
        "metadata": {"annotations": {STATUS: None}, "uid": created["metadata"]["uid"]}
    }


@pytest.mark.req("RT-NOAPI", "KUBE-STATUS")
@pytest.mark.needs_fake("stops the API server (stop)")
def test_del_of_a_pod_the_cache_knows_is_gone_needs_no_api(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str
) -> None:
    ns, node = kube_namespace, node_name()
    fake_api.create(objects.pod("alive", ns, node_name=node))

    async def body() -> None:
        async with running_feed(kubeconfig, node) as (feed, view):
            assert view.lookup_pod(ns, "alive") is not None
            fake_api.stop()
            loop = asyncio.get_running_loop()
            started = loop.time()
            await feed.remove_status(ns, "deleted-already")
            assert loop.time() - started < 0.5
            # A pod still in the cache: the API is tried, within the remove budget, and the
            # failure is a CNI error the orchestrator logs (the DEL itself goes on).
            started = loop.time()
            with pytest.raises(errors.TryAgainLaterError):
                await feed.remove_status(ns, "alive")
            assert loop.time() - started <= FAST.remove_budget + 0.5

    run_bounded(body())


@pytest.mark.req("KUBE-STATUS")
@pytest.mark.needs_fake("rotates the server's token (set_token)")
def test_a_rotated_token_is_read_again_from_its_file(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str, tmp_path: Path
) -> None:
    """A kubeconfig `tokenFile` is what the in-cluster service account config uses: the token
    is read again from the file when the API answers 401."""
    ns = kube_namespace
    fake_api.create(objects.pod("web", ns))
    token_file = tmp_path / "token"
    token_file.write_text(fake_api.connection().token or "", encoding="utf-8")
    text = kubeconfig.read_text(encoding="utf-8")
    old_line = next(line for line in text.splitlines() if line.strip().startswith("token:"))
    rotating = tmp_path / "kubeconfig-token-file"
    rotating.write_text(
        text.replace(old_line, f"    tokenFile: {json.dumps(str(token_file))}"), encoding="utf-8"
    )

    async def body() -> None:
        async with contextlib.aclosing(feed_for(rotating)) as feed:
            await feed.publish_status(ns, "web", ENTRIES)
            fake_api.set_token("rotated-token")
            token_file.write_text("rotated-token\n", encoding="utf-8")
            await feed.publish_status(ns, "web", [])

    run_bounded(body())
    # the old token refused once, then the one read again from the file
    assert [status for status, _ in pod_patches(fake_api, "web")] == [200, 401, 200]
    assert annotations_of(fake_api, "web", ns)[STATUS] == "[]"


@pytest.mark.req("KUBE-STATUS")
@pytest.mark.needs_fake("shows that no PATCH was sent (requests)")
def test_status_entries_that_are_not_json_are_an_internal_error(
    fake_api: KubeApi, kubeconfig: Path
) -> None:
    async def body() -> None:
        async with contextlib.aclosing(feed_for(kubeconfig)) as feed:
            with pytest.raises(errors.InternalError):
                await feed.publish_status("default", "web", [{"ips": {1, 2}}])

    run_bounded(body())
    assert not [r for r in fake_api.requests if r.method == "PATCH"]
