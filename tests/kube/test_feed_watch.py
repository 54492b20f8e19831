"""The feed's watches read every event a real API server sends (KUBE-BOOKMARK).

kube-apiserver 1.28 sends BOOKMARKs whose object is a skeleton that is not a valid Pod
(`spec.containers: null`); the fake sends the same. A watch that decodes it as a Pod breaks on
every bookmark and never advances its resourceVersion from them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path

import pytest

from netattach.cluster import model
from tests import logging_state
from tests.kube import objects
from tests.kube.api import KubeApi
from tests.kube.feed_harness import FAST, eventually, node_name, run_bounded, running_feed

KUBE_LOGGER = "netattach.cluster.kube"


def pod_watches(api: KubeApi) -> int:
    return sum(1 for r in api.requests if r.watch and r.path == "/api/v1/pods")


@pytest.mark.req("KUBE-BOOKMARK", "KUBE-CACHE")
@pytest.mark.needs_fake(
    "bookmarks every 0.1 s (set_bookmark_interval): a real server sends one about a minute"
)
def test_skeleton_bookmarks_advance_the_resource_version_without_breaking_the_watch(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    ns, node = kube_namespace, node_name()
    fake_api.set_bookmark_interval(0.1)  # skips on a real server: it sends one a minute
    fake_api.create(objects.pod("mine", ns, node_name=node))
    caplog.set_level(logging.DEBUG, logger=KUBE_LOGGER)

    async def body() -> None:
        async with running_feed(kubeconfig, node) as (feed, view):
            await asyncio.to_thread(fake_api.wait_for_watches, 4)
            # A write the pod watch does not see: only a bookmark can carry its version.
            fake_api.create(objects.pod("elsewhere", ns, node_name=node_name()))
            latest = fake_api.resource_version
            await eventually(
                lambda: feed.resource_version(model.POD) == latest, "a bookmark's version"
            )
            await asyncio.sleep(0.5)  # several more bookmarks on every watch
            bookmarks = [
                r for r in fake_api.requests if r.watch and r.query.get("allowWatchBookmarks")
            ]
            assert len(bookmarks) == 4, "one watch per kind, none restarted"
            assert pod_watches(fake_api) == 1
            assert view.lookup_pod(ns, "mine") is not None

    run_bounded(body())
    trouble = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert trouble == [], [r.getMessage() for r in trouble]


@pytest.mark.req("KUBE-BOOKMARK")
@pytest.mark.needs_fake(
    "serves an object the client cannot decode (version skew): a real server stores valid ones"
)
def test_an_object_the_client_cannot_decode_is_logged_once_and_skipped(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    ns, node = kube_namespace, node_name()
    caplog.set_level(logging.DEBUG, logger=KUBE_LOGGER)

    async def body() -> None:
        async with running_feed(kubeconfig, node) as (feed, view):
            fake_api.create(objects.pod("good", ns, node_name=node))
            await eventually(lambda: view.lookup_pod(ns, "good") is not None, "a good pod")
            odd = objects.pod("odd", ns, node_name=node)
            odd["spec"]["priority"] = "high"  # an int32 in every API version lightkube knows
            fake_api.create(odd)
            fake_api.patch("Pod", "odd", {"metadata": {"labels": {"again": "1"}}}, ns)
            fake_api.create(objects.pod("after", ns, node_name=node))
            await eventually(lambda: view.lookup_pod(ns, "after") is not None, "the next pod")
            assert view.lookup_pod(ns, "odd") is None  # skipped
            assert feed.resource_version(model.POD) == fake_api.resource_version
            fake_api.delete("Pod", "odd", ns)
            fake_api.delete("Pod", "good", ns)
            await eventually(lambda: view.lookup_pod(ns, "good") is None, "DELETED after it")
            assert pod_watches(fake_api) == 1, "the watch was never restarted"

    run_bounded(body())
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert f"Pod {ns}/odd" in warnings[0]
    assert "cannot decode" in warnings[0]
    assert "priority" in warnings[0]


def test_at_debug_the_feed_shows_its_decisions_and_not_the_http_clients_requests(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str
) -> None:
    ns, node = kube_namespace, node_name()

    async def body() -> None:
        async with running_feed(kubeconfig, node) as (_, view):
            fake_api.create(objects.pod("mine", ns, node_name=node))
            await eventually(lambda: view.lookup_pod(ns, "mine") is not None, "the pod")

    with logging_state.configured("debug") as stream:
        run_bounded(body())
    lines = stream.getvalue().splitlines()
    assert any(
        "netattach.cluster.kube: watching pods from resourceVersion" in line for line in lines
    )
    assert [line for line in lines if " netattach." not in line] == []  # no httpx2, httpcore2...


@pytest.mark.req("KUBE-BOOKMARK")
@pytest.mark.needs_fake(
    "serves an object the client cannot decode (version skew): a real server stores valid ones"
)
def test_an_undecodable_object_in_a_list_is_skipped_and_the_view_still_syncs(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    ns, node = kube_namespace, node_name()
    for name in ("a", "b", "c", "d"):
        fake_api.create(objects.pod(name, ns, node_name=node))
    odd = objects.pod("odd", ns, node_name=node)
    odd["spec"]["priority"] = "high"
    fake_api.create(odd)
    caplog.set_level(logging.INFO, logger=KUBE_LOGGER)
    paged = dataclasses.replace(FAST, list_chunk=2)  # the odd pod is on a page of its own

    async def body() -> None:
        async with running_feed(kubeconfig, node, timing=paged) as (feed, view):
            assert {model.name_of(p) for p in view.objects(model.POD)} == {"a", "b", "c", "d"}
            assert feed.resource_version(model.POD) == fake_api.resource_version

    run_bounded(body())
    pages = [r for r in fake_api.requests if r.path == "/api/v1/pods" and not r.watch]
    assert [r.query.get("limit") for r in pages] == ["2", "2", "2"]
    assert [bool(r.query.get("continue")) for r in pages] == [False, True, True]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert f"Pod {ns}/odd" in warnings[0]


@pytest.mark.req("KUBE-CACHE")
@pytest.mark.needs_fake(
    "uninstalls a watched CRD (set_crd_installed): on the shared server, every test's policies go"
)
def test_a_crd_deleted_while_watched_empties_its_kind_until_it_is_served_again(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    ns = kube_namespace
    fake_api.create(objects.policy("deny", ns))
    caplog.set_level(logging.INFO, logger=KUBE_LOGGER)

    async def body() -> None:
        async with running_feed(kubeconfig, node_name()) as (feed, view):
            assert view.lookup(model.POLICY, ns, "deny") is not None
            # its watch ends, and a watch again is `404 page not found`, as on a real server
            fake_api.set_crd_installed("MultiNetworkPolicy", False)  # skips on a real server
            await eventually(
                lambda: view.lookup(model.POLICY, ns, "deny") is None, "the kind emptied"
            )
            assert feed.resource_version(model.POLICY) is None
            fake_api.set_crd_installed("MultiNetworkPolicy", True)
            await eventually(
                lambda: view.lookup(model.POLICY, ns, "deny") is not None, "served again"
            )

    run_bounded(body())
    trouble = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert trouble == []
