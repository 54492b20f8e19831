"""Events on the pod (KUBE-EVENTS) and authentication to the API."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from pathlib import Path
from typing import Any

import pytest

from netattach.cluster import kube_events
from tests.kube import objects
from tests.kube.api import KubeApi
from tests.kube.feed_harness import (
    FAST,
    feed_for,
    feed_with_api_down,
    node_name,
    run_bounded,
    running_feed,
)
from tests.kube.real_api import with_token_only


@pytest.mark.req("KUBE-EVENTS")
def test_record_event_creates_an_event_involving_the_pod(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str
) -> None:
    ns, node = kube_namespace, node_name()
    pod = fake_api.create(objects.pod("web", ns, node_name=node))
    message = f"[{ns}/web:blue] NetworkAttachmentDefinition {ns}/blue not found"

    async def body() -> None:
        async with running_feed(kubeconfig, node) as (feed, _):
            await feed.record_event(
                ns,
                "web",
                reason="NetworkAttachmentDefinitionNotFound",
                message=message,
                type_="Warning",
            )
            assert await feed.flush_events(5.0)

    run_bounded(body())
    (event,) = fake_api.events_for(ns, "web")
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "web",
        "namespace": ns,
        "uid": pod["metadata"]["uid"],  # from the cache: this very pod
    }
    assert (event["type"], event["reason"], event["message"]) == (
        "Warning",
        "NetworkAttachmentDefinitionNotFound",
        message,
    )
    assert event["source"] == {"component": "netattach", "host": node}
    assert event["reportingComponent"] == "netattach"
    assert event["count"] == 1
    assert event["firstTimestamp"] == event["lastTimestamp"]


@pytest.mark.req("KUBE-EVENTS")
def test_events_go_out_in_order_and_a_repeat_is_counted_not_duplicated(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str
) -> None:
    ns = kube_namespace
    fake_api.create(objects.pod("web", ns))

    async def body() -> None:
        async with contextlib.aclosing(feed_for(kubeconfig)) as feed:
            for ifname in ("eth0", "net1", "net2"):
                await feed.record_event(
                    ns, "web", reason="AddedInterface", message=f"Add {ifname} [10.0.0.1/24]"
                )
            for _ in range(3):
                await feed.record_event(
                    ns, "web", reason="FailedAttachNetwork", message="boom", type_="Warning"
                )
            assert await feed.flush_events(5.0)

    run_bounded(body())
    events = fake_api.events_for(ns, "web")
    assert [(e["reason"], e["message"], e["count"]) for e in events] == [
        ("AddedInterface", "Add eth0 [10.0.0.1/24]", 1),
        ("AddedInterface", "Add net1 [10.0.0.1/24]", 1),
        ("AddedInterface", "Add net2 [10.0.0.1/24]", 1),
        ("FailedAttachNetwork", "boom", 3),
    ]


@pytest.mark.req("KUBE-EVENTS")
@pytest.mark.needs_fake("stops the API server (stop)")
def test_record_event_returns_at_once_and_never_raises_when_the_api_is_down(
    fake_api: KubeApi, kubeconfig: Path
) -> None:
    async def body() -> None:
        async with feed_with_api_down(fake_api, kubeconfig) as (feed, elapsed):
            await feed.record_event("default", "web", reason="AddedInterface", message="x")
            await feed.record_event("default", "web", reason="AddedInterface", message="y")
            assert elapsed() < 0.1  # an ADD's answer does not wait for Events
            assert await feed.flush_events(2 * FAST.event_timeout + 1.0)

    run_bounded(body())


def test_a_wrong_bearer_token_keeps_the_view_unsynced(
    fake_api: KubeApi, kubeconfig: Path, tmp_path: Path
) -> None:
    # The wrong token as the sole credential: a client certificate beside it would authenticate.
    wrong = with_token_only(kubeconfig, tmp_path / "wrong-token", secrets.token_urlsafe(24))

    async def body() -> None:
        async with running_feed(wrong, node_name(), synced=False) as (_, view):
            assert not await view.wait_synced(0.5)

    run_bounded(body())
    if fake_api.is_fake:
        assert fake_api.requests
        assert {r.status for r in fake_api.requests} == {401}


def ours(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """netattach's Events (a real cluster's components may record their own on the pod)."""
    return [e for e in events if e.get("reportingComponent") == "netattach"]


@pytest.mark.req("KUBE-EVENTS")
def test_events_wait_while_cni_calls_are_under_way_and_go_out_when_they_end(
    fake_api: KubeApi, kubeconfig: Path, kube_namespace: str
) -> None:
    """A burst of pods starts before its Events go out: the sender waits while the daemon's
    server has a call under way (`idle` clear)."""
    ns = kube_namespace
    fake_api.create(objects.pod("web", ns, node_name=node_name()))  # never scheduled
    held: list[object] = []

    async def body() -> None:
        idle = asyncio.Event()  # a call under way
        async with contextlib.aclosing(feed_for(kubeconfig, idle=idle)) as feed:
            await feed.record_event(ns, "web", reason="AddedInterface", message="Add net1 []")
            assert not await feed.flush_events(0.3)  # held back
            held.extend(ours(fake_api.events_for(ns, "web")))
            idle.set()  # the call ended
            assert await feed.flush_events(5.0)

    run_bounded(body())
    assert held == []
    assert [e["reason"] for e in ours(fake_api.events_for(ns, "web"))] == ["AddedInterface"]


@pytest.mark.req("KUBE-EVENTS")
def test_under_a_steady_load_events_still_go_out_late(
    fake_api: KubeApi,
    kubeconfig: Path,
    kube_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ns = kube_namespace
    fake_api.create(objects.pod("web", ns, node_name=node_name()))  # never scheduled
    monkeypatch.setattr(kube_events, "EVENT_DEFER_MAX", 0.2)

    async def body() -> None:
        busy = asyncio.Event()  # calls under way, and never all ended
        async with contextlib.aclosing(feed_for(kubeconfig, idle=busy)) as feed:
            await feed.record_event(ns, "web", reason="AddedInterface", message="Add net1 []")
            assert await feed.flush_events(5.0)

    run_bounded(body())
    assert [e["reason"] for e in ours(fake_api.events_for(ns, "web"))] == ["AddedInterface"]


@pytest.mark.req("KUBE-REAL")
def test_the_feed_authenticates_with_a_client_certificate(
    admin_kubeconfig: Path, fake_api: KubeApi, kube_namespace: str
) -> None:
    """The local cluster's client-certificate kubeconfig (certificate and key embedded as data,
    no token): the feed lists, watches and writes as that identity."""
    ns, node = kube_namespace, node_name()
    fake_api.create(objects.pod("web", ns, node_name=node))

    async def body() -> None:
        async with running_feed(admin_kubeconfig, node) as (feed, view):
            assert view.lookup_pod(ns, "web") is not None
            await feed.record_event(ns, "web", reason="AddedInterface", message="Add net1 []")
            assert await feed.flush_events(5.0)

    run_bounded(body())
    assert [e["reason"] for e in ours(fake_api.events_for(ns, "web"))] == ["AddedInterface"]
