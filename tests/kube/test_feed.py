"""The Kubernetes feed's cache: list, then watch, through disconnects, restarts and 410 Gone.

Each test drives the real `KubeFeed` (lightkube over HTTP) against the `fake_api` fixture, in
`asyncio.run` with an overall deadline; waits poll with their own deadline instead of sleeping
(tests/kube/feed_harness.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from netattach.cluster import kube, model
from netattach.cni import errors
from tests.kube import objects
from tests.kube.api import KubeApi
from tests.kube.feed_harness import (
    FAST,
    eventually,
    feed_with_api_down,
    names,
    node_name,
    run_bounded,
    running_feed,
    server_names,
)

NETWORKS = model.NETWORKS_ANNOTATION


@pytest.mark.req("KUBE-CACHE", "KUBE-REAL")
def test_list_then_watch_mirrors_this_nodes_pods_and_every_namespace_nad_and_policy(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str
) -> None:
    ns, node = kube_namespace, node_name()
    fake_api.create(objects.pod("mine", ns, node_name=node))
    fake_api.create(objects.pod("elsewhere", ns, node_name=node_name()))
    fake_api.create(objects.pod("unscheduled", ns))
    fake_api.create(objects.nad("blue", ns, config={"cniVersion": "1.0.0", "type": "macvlan"}))
    fake_api.create(objects.policy("deny", ns))

    async def body() -> None:
        async with running_feed(kubeconfig, node) as (_, view):
            # the first list: only this node's pods, every NAD, namespace and policy
            assert names(view, model.POD, ns) == {"mine"}
            assert view.lookup_namespace(ns) is not None
            assert view.lookup_namespace("default") is not None
            assert names(view, model.NAD, ns) == {"blue"}
            assert names(view, model.POLICY, ns) == {"deny"}

            # then the watch: ADDED, MODIFIED, DELETED of every kind
            fake_api.create(objects.pod("second", ns, node_name=node))
            fake_api.create(objects.pod("not-mine", ns, node_name=node_name()))
            fake_api.patch("Pod", "mine", {"metadata": {"annotations": {NETWORKS: "blue"}}}, ns)
            fake_api.create(objects.nad("green", ns, config={"cniVersion": "1.0.0"}))
            fake_api.delete("NetworkAttachmentDefinition", "blue", ns)
            fake_api.patch("MultiNetworkPolicy", "deny", {"spec": {"policyTypes": ["Ingress"]}}, ns)
            fake_api.patch("Namespace", ns, {"metadata": {"labels": {"team": "a"}}})

            def mine_annotated() -> bool:
                pod = view.lookup_pod(ns, "mine")
                return pod is not None and model.annotation(pod, NETWORKS) == "blue"

            await eventually(lambda: names(view, model.POD, ns) == {"mine", "second"}, "ADDED")
            await eventually(mine_annotated, "MODIFIED pod")
            await eventually(lambda: names(view, model.NAD, ns) == {"green"}, "NAD changes")
            await eventually(
                lambda: (
                    (view.lookup(model.POLICY, ns, "deny") or {}).get("spec", {}).get("policyTypes")
                    == ["Ingress"]
                ),
                "MODIFIED policy",
            )
            await eventually(
                lambda: model.labels(view.lookup_namespace(ns) or {}).get("team") == "a",
                "MODIFIED namespace",
            )
            fake_api.delete("Pod", "mine", ns)
            await eventually(lambda: view.lookup_pod(ns, "mine") is None, "DELETED pod")
            assert view.lookup_pod(ns, "not-mine") is None

    run_bounded(body())


@pytest.mark.req("KUBE-CACHE")
def test_objects_are_trimmed_to_the_fields_netattach_reads(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str
) -> None:
    ns, node = kube_namespace, node_name()
    ours = {NETWORKS: "blue", model.STATUS_ANNOTATION: "[]"}
    fake_api.create(
        objects.pod(
            "web",
            ns,
            node_name=node,
            labels={"app": "web"},
            annotations={**ours, "example.com/big": "x" * 4096},
            status={"phase": "Running", "podIP": "10.1.2.3", "podIPs": [{"ip": "10.1.2.3"}]},
        )
    )
    fake_api.create(
        objects.nad(
            "blue",
            ns,
            config='{"cniVersion": "1.0.0", "type": "macvlan"}',
            annotations={"k8s.v1.cni.cncf.io/resourceName": "intel/sriov", "note": "dropped"},
        )
    )
    spec = {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress"]}
    fake_api.create(objects.policy("only-web", ns, spec=spec, policy_for=f"{ns}/blue"))
    server_pod = fake_api.get("Pod", "web", ns)
    assert server_pod is not None

    async def body() -> None:
        async with running_feed(kubeconfig, node) as (_, view):
            pod = view.lookup_pod(ns, "web")
            assert pod == {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "web",
                    "namespace": ns,
                    "uid": server_pod["metadata"]["uid"],
                    "resourceVersion": server_pod["metadata"]["resourceVersion"],
                    "labels": {"app": "web"},
                    "annotations": ours,
                },
                "spec": {"nodeName": node},
                "status": {"phase": "Running"},  # addresses come from network-status, not here
            }
            nad = view.lookup_nad(ns, "blue")
            assert nad is not None
            assert nad["apiVersion"] == "k8s.cni.cncf.io/v1"
            assert nad["kind"] == model.NAD
            assert nad["spec"] == {"config": '{"cniVersion": "1.0.0", "type": "macvlan"}'}
            assert model.meta(nad)["annotations"] == {
                "k8s.v1.cni.cncf.io/resourceName": "intel/sriov"
            }
            policy = view.lookup(model.POLICY, ns, "only-web")
            assert policy is not None
            assert policy["spec"] == spec
            assert model.annotation(policy, "k8s.v1.cni.cncf.io/policy-for") == f"{ns}/blue"
            namespace = view.lookup_namespace(ns)
            assert namespace is not None
            assert set(namespace) == {"apiVersion", "kind", "metadata"}
            assert set(model.meta(namespace)) <= {"name", "uid", "resourceVersion", "labels"}

    run_bounded(body())


@pytest.mark.req("KUBE-CACHE")
@pytest.mark.needs_fake(
    "bookmarks every 0.1 s and the request log (set_bookmark_interval, requests)"
)
def test_watches_ask_for_bookmarks_and_a_rewatch_resumes_from_the_bookmarks_version(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str
) -> None:
    ns, node = kube_namespace, node_name()
    fake_api.set_bookmark_interval(0.1)
    fake_api.create(objects.pod("mine", ns, node_name=node))

    async def body() -> None:
        async with running_feed(kubeconfig, node) as (feed, view):
            await asyncio.to_thread(fake_api.wait_for_watches, 4)
            watches = [r for r in fake_api.requests if r.watch]
            assert {r.query.get("allowWatchBookmarks") for r in watches} == {"true"}
            pod_watch = next(r for r in watches if r.path == "/api/v1/pods")
            assert pod_watch.query["fieldSelector"] == f"spec.nodeName={node}"

            # A write the pod watch does not see; only a bookmark can tell the feed about it.
            fake_api.create(objects.pod("elsewhere", ns, node_name=node_name()))
            latest = fake_api.resource_version
            assert feed.resource_version(model.POD) != latest
            await eventually(
                lambda: feed.resource_version(model.POD) == latest, "a bookmark's version"
            )

            fake_api.clear_requests()
            await asyncio.to_thread(fake_api.restart)

            def rewatched() -> bool:
                return any(r.watch and r.path == "/api/v1/pods" for r in fake_api.requests)

            await eventually(rewatched, "the pod watch again after the restart")
            again = next(r for r in fake_api.requests if r.watch and r.path == "/api/v1/pods")
            assert again.query["resourceVersion"] == latest
            # resumed, not relisted
            assert not [r for r in fake_api.requests if r.path == "/api/v1/pods" and not r.watch]
            assert view.lookup_pod(ns, "mine") is not None

    run_bounded(body())


@pytest.mark.req("KUBE-CACHE")
@pytest.mark.needs_fake("restarts the API server mid-watch (restart)")
def test_an_api_server_restart_mid_watch_is_survived(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str
) -> None:
    ns, node = kube_namespace, node_name()

    async def body() -> None:
        async with running_feed(kubeconfig, node) as (_, view):
            await asyncio.to_thread(fake_api.wait_for_watches, 4)
            await asyncio.to_thread(fake_api.restart, 0.5)
            fake_api.create(objects.pod("after", ns, node_name=node))
            fake_api.create(objects.nad("after", ns, config={"cniVersion": "1.0.0"}))
            fake_api.create(objects.policy("after", ns))
            await eventually(lambda: view.lookup_pod(ns, "after") is not None, "pod after")
            await eventually(lambda: view.lookup_nad(ns, "after") is not None, "NAD after")
            await eventually(
                lambda: view.lookup(model.POLICY, ns, "after") is not None, "policy after"
            )

    run_bounded(body())


@pytest.mark.req("KUBE-CACHE")
@pytest.mark.needs_fake(
    "stops the API server and compacts its history to force a 410 (stop, compact)"
)
def test_410_gone_relists_and_the_store_ends_equal_to_the_server(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str
) -> None:
    ns, node = kube_namespace, node_name()
    fake_api.create(objects.pod("kept", ns, node_name=node))
    fake_api.create(objects.pod("deleted-in-gap", ns, node_name=node))
    fake_api.create(objects.nad("deleted-in-gap", ns, config={"cniVersion": "1.0.0"}))

    async def body() -> None:
        async with running_feed(kubeconfig, node) as (_, view):
            await asyncio.to_thread(fake_api.wait_for_watches, 4)
            assert names(view, model.POD, ns) == {"kept", "deleted-in-gap"}
            await asyncio.to_thread(fake_api.stop)
            # While the feed cannot watch: changes, then a compaction of their history.
            fake_api.delete("Pod", "deleted-in-gap", ns)
            fake_api.delete("NetworkAttachmentDefinition", "deleted-in-gap", ns)
            fake_api.create(objects.pod("created-in-gap", ns, node_name=node))
            fake_api.create(objects.nad("created-in-gap", ns, config={"cniVersion": "1.0.0"}))
            fake_api.compact()
            fake_api.clear_requests()
            await asyncio.to_thread(fake_api.start)

            def relisted(path: str) -> bool:
                return any(r.path == path and not r.watch for r in fake_api.requests)

            await eventually(lambda: relisted("/api/v1/pods"), "a new list of pods")
            nads = "/apis/k8s.cni.cncf.io/v1/network-attachment-definitions"
            await eventually(lambda: relisted(nads), "a new list of NADs")
            expired = [r for r in fake_api.requests if r.watch and r.path == "/api/v1/pods"]
            assert expired, "the re-watch from the old resourceVersion came first"
            await eventually(
                lambda: names(view, model.POD, ns) == {"kept", "created-in-gap"}, "pods relisted"
            )
            await eventually(
                lambda: names(view, model.NAD, ns) == {"created-in-gap"}, "NADs relisted"
            )
            assert names(view, model.NAD, ns) == server_names(fake_api, model.NAD, ns)
            assert names(view, model.POLICY, ns) == server_names(fake_api, "MultiNetworkPolicy", ns)
            # and the watch goes on from the new list
            fake_api.create(objects.pod("after-relist", ns, node_name=node))
            await eventually(lambda: view.lookup_pod(ns, "after-relist") is not None, "watch")

    run_bounded(body())


@pytest.mark.req("KUBE-CACHE")
@pytest.mark.needs_fake("fails the first lists (inject_error) and reads the request log")
def test_a_failing_first_list_is_retried_with_backoff_before_the_view_syncs(
    fake_api: KubeApi, kubeconfig: Path
) -> None:
    fake_api.inject_error(500, method="GET", path=r"^/api/v1/pods$", times=2)

    async def body() -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        async with running_feed(kubeconfig, node_name()) as (_, view):
            assert view.synced
            waited = loop.time() - started
        lists = [r.status for r in fake_api.requests if r.path == "/api/v1/pods" and not r.watch]
        assert lists == [500, 500, 200]
        # two back-offs of at least initial * (1 - jitter), the second twice the first
        assert waited >= 0.05 * 0.8 + 0.1 * 0.8

    run_bounded(body())


@pytest.mark.req("KUBE-CACHE")
@pytest.mark.needs_fake("fails the NAD list (inject_error) and reads the request log")
def test_the_view_is_not_synced_until_every_kind_has_listed(
    fake_api: KubeApi, kubeconfig: Path
) -> None:
    fake_api.inject_error(503, method="GET", path=r"/network-attachment-definitions$", times=3)

    async def body() -> None:
        async with running_feed(kubeconfig, node_name(), synced=False) as (_, view):
            await eventually(
                lambda: any(r.status == 503 for r in fake_api.requests), "the failing list"
            )
            assert not view.synced
            assert await view.wait_synced(5.0)

    run_bounded(body())


@pytest.mark.req("KUBE-CACHE", "KUBE-BOOKMARK")
@pytest.mark.needs_fake(
    "uninstalls a CRD (set_crd_installed): on the shared server, every test's policies go"
)
def test_a_crd_that_is_not_installed_does_not_keep_the_view_from_syncing(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str
) -> None:
    fake_api.create(objects.policy("later", kube_namespace))
    # Its paths are then `404 page not found` in text/plain, as a real server answers them.
    fake_api.set_crd_installed("MultiNetworkPolicy", False)

    async def body() -> None:
        async with running_feed(kubeconfig, node_name()) as (feed, view):
            assert view.lookup(model.POLICY, kube_namespace, "later") is None
            assert feed.resource_version(model.POLICY) is None
            fake_api.set_crd_installed("MultiNetworkPolicy", True)
            # looked for again after missing_crd_recheck
            await eventually(
                lambda: view.lookup(model.POLICY, kube_namespace, "later") is not None,
                "the policy once its CRD is served",
            )

    run_bounded(body())
    statuses = [r.status for r in fake_api.requests if r.path.endswith("/multi-networkpolicies")]
    # Not found until the CRD is served (once, or more when the view took over a recheck
    # interval to sync on a loaded machine), then listed.
    assert 200 in statuses
    assert set(statuses[: statuses.index(200)]) == {404}


@pytest.mark.req("KUBE-CACHE")
def test_a_pod_the_cache_has_not_seen_is_read_directly_and_kept(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str
) -> None:
    ns, node = kube_namespace, node_name()
    created = fake_api.create(objects.pod("new", ns, node_name=node))
    fake_api.create(objects.pod("other-node", ns, node_name=node_name()))

    async def body() -> None:
        async with contextlib.aclosing(
            kube.KubeFeed(node_name=node, kubeconfig=kubeconfig, timing=FAST)
        ) as feed:
            view = feed.store  # it reads through the feed
            pod = await view.fetch_pod(ns, "new")
            assert pod is not None
            assert model.uid_of(pod) == created["metadata"]["uid"]
            assert view.lookup_pod(ns, "new") == pod  # kept for the next lookup
            other = await feed.fetch_pod(ns, "other-node")
            assert other is not None
            assert view.lookup_pod(ns, "other-node") is None  # no watch would ever remove it
            assert await feed.fetch_pod(ns, "missing") is None

    run_bounded(body())


@pytest.mark.req("KUBE-CACHE")
@pytest.mark.needs_fake("stops the API server (stop)")
def test_a_direct_read_is_bounded_and_says_try_again_when_the_api_is_down(
    fake_api: KubeApi, kubeconfig: Path
) -> None:
    async def body() -> None:
        async with feed_with_api_down(fake_api, kubeconfig) as (feed, elapsed):
            with pytest.raises(errors.TryAgainLaterError, match="cannot read pod default/web"):
                await feed.fetch_pod("default", "web")
            assert elapsed() <= FAST.fetch_timeout + 0.5

    run_bounded(body())


@pytest.mark.req("KUBE-CACHE")
def test_a_direct_read_does_not_resurrect_a_pod_the_watch_saw_deleted(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str
) -> None:
    ns, node = kube_namespace, node_name()
    fake_api.create(objects.pod("short-lived", ns, node_name=node))
    stale = fake_api.get("Pod", "short-lived", ns)
    assert stale is not None

    async def body() -> None:
        async with running_feed(kubeconfig, node) as (feed, view):
            fake_api.delete("Pod", "short-lived", ns)
            await eventually(lambda: view.lookup_pod(ns, "short-lived") is None, "DELETED")
            # The answer of a read sent before the deletion, arriving after it:
            fake_api.create(objects.pod("short-lived", ns, node_name=node_name()))
            recreated = await feed.fetch_pod(ns, "short-lived")
            assert recreated is not None
            assert view.lookup_pod(ns, "short-lived") is None  # on another node: not kept
            assert model.uid_of(recreated) != stale["metadata"]["uid"]

    run_bounded(body())
