"""Steps the feed tests share: a fast timing, a node of the test's own, a bounded `asyncio.run`,
polling with a deadline, and a feed running in the background.

Each feed test drives the real `KubeFeed` (lightkube over HTTP) against the `fake_api` fixture,
in `asyncio.run` with an overall deadline; waits poll with their own deadline instead of sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

from netattach.cluster import kube, kube_client, model, store
from tests.kube.api import KubeApi

FAST = kube_client.KubeTiming(
    request_timeout=5.0,
    fetch_timeout=2.0,
    status_budget=3.0,
    remove_budget=2.0,
    event_timeout=3.0,
    watch_timeout=60.0,
    watch_idle_timeout=30.0,
    missing_crd_recheck=0.5,
    backoff=kube_client.Backoff(initial=0.05, cap=0.3),
    retry=kube_client.Backoff(initial=0.05, cap=0.2),
)
DEADLINE = 30.0


def node_name() -> str:
    """A node of the test's own: on a real cluster no kubelet runs pods bound to it."""
    return f"netattach-test-node-{secrets.token_hex(4)}"


def run_bounded(body: Coroutine[Any, Any, None], deadline: float = DEADLINE) -> None:
    """Run `body` in a fresh event loop; fail it after `deadline` seconds."""

    async def bounded() -> None:
        async with asyncio.timeout(deadline):
            await body

    asyncio.run(bounded())


async def eventually(check: Callable[[], object], what: str, timeout: float = 5.0) -> None:
    """Poll `check` until it is true; fail naming `what` after `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout:g}s: {what}")
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def running_feed(
    kubeconfig: Path, node: str, *, timing: kube_client.KubeTiming = FAST, synced: bool = True
) -> AsyncIterator[tuple[kube.KubeFeed, store.ClusterStore]]:
    """A feed running in the background (synced first, unless `synced=False`)."""
    view = store.ClusterStore()
    feed = kube.KubeFeed(view, node_name=node, kubeconfig=kubeconfig, timing=timing)
    task = asyncio.create_task(feed.run())
    try:
        if synced:
            assert await view.wait_synced(10.0), "the feed did not sync within 10s"
        yield feed, view
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await feed.aclose()


def feed_for(
    kubeconfig: Path, timing: kube_client.KubeTiming = FAST, idle: asyncio.Event | None = None
) -> kube.KubeFeed:
    """A feed of a node of its own that is not run: for what it does directly (reads, status,
    Events), with no list or watch. `idle`: the daemon's server's, set while no CNI call is under
    way (None: Events never wait)."""
    return kube.KubeFeed(
        store.ClusterStore(), node_name=node_name(), kubeconfig=kubeconfig, timing=timing, idle=idle
    )


@contextlib.asynccontextmanager
async def feed_with_api_down(
    api: KubeApi, kubeconfig: Path
) -> AsyncIterator[tuple[kube.KubeFeed, Callable[[], float]]]:
    """A feed (`feed_for`) whose API server has just stopped, and the seconds since it stopped."""
    async with contextlib.aclosing(feed_for(kubeconfig)) as feed:
        api.stop()
        loop = asyncio.get_running_loop()
        started = loop.time()
        yield feed, lambda: loop.time() - started


def names(view: store.ClusterStore, kind: str, namespace: str) -> set[str]:
    """The names of the objects of `kind` in `namespace` the view holds."""
    return {
        model.name_of(obj) for obj in view.objects(kind) if model.namespace_of(obj) == namespace
    }


def server_names(api: KubeApi, kind: str, namespace: str) -> set[str]:
    """The names of the objects of `kind` in `namespace` the API server holds."""
    return {obj["metadata"]["name"] for obj in api.list(kind, namespace)}
