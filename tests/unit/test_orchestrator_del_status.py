"""DEL never waits on the API (KUBE-NADREAD, RT-NOAPI): the removal of `network-status` starts
with the delegates' DEL and is waited for `STATUS_REMOVAL_WAIT` at most; the rest of it runs in
the background, a new ADD of the pod stops it, and shutdown ends it within a bound."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from pathlib import Path

import pytest

from netattach.pods import orchestrator, status_removals
from tests import builders
from tests.builders import CALL, Sink, call, nad, orchestrated, pod, view_of

DEL = CALL._replace(command="DEL")


class HangingSink(Sink):
    """A sink whose status removal waits for `api_back`, as a patch to an API that is down
    waits out its retries."""

    def __init__(self) -> None:
        super().__init__()
        self.api_back = asyncio.Event()
        self.removals: list[str] = []  # "started", then "done" or "cancelled"

    async def remove_status(self, namespace: str, pod: str, *, uid: str = "") -> None:
        self.removals.append("started")
        try:
            await self.api_back.wait()
        except asyncio.CancelledError:
            self.removals.append("cancelled")
            raise
        await super().remove_status(namespace, pod, uid=uid)
        self.removals.append("done")


def attached(tmp_path: Path) -> tuple[orchestrator.Orchestrator, HangingSink]:
    view = view_of(pod("net-a"), nad("net-a", {"cniVersion": "1.0.0", "type": "macvlan"}))
    sink = HangingSink()
    orch, _, _ = orchestrated(tmp_path, view, sink=sink)
    return orch, sink


async def timed(step: Awaitable[object]) -> float:
    started = time.monotonic()
    await step
    return time.monotonic() - started


@pytest.mark.req("KUBE-NADREAD", "RT-NOAPI")
def test_del_returns_while_the_status_removal_waits_on_the_api(tmp_path: Path) -> None:
    orch, sink = attached(tmp_path)

    async def body() -> None:
        await orch.add(CALL, {"cniVersion": "1.0.0"})
        took = await timed(orch.delete(DEL))
        assert took < status_removals.STATUS_REMOVAL_WAIT + 0.5
        assert sink.removals == ["started"]  # still trying, in the background
        assert orch.records.load(CALL.container_id) is None  # the DEL itself is done
        sink.api_back.set()
        for _ in range(100):
            if sink.removals[-1] == "done":
                break
            await asyncio.sleep(0.01)
        assert sink.removals == ["started", "done"]
        assert ("blue", "web") not in sink.status

    asyncio.run(body())


@pytest.mark.req("KUBE-NADREAD")
def test_a_new_add_of_the_pod_stops_a_removal_still_running(tmp_path: Path) -> None:
    orch, sink = attached(tmp_path)

    async def body() -> None:
        await orch.add(CALL, {"cniVersion": "1.0.0"})
        await orch.delete(DEL)
        await orch.add(CALL, {"cniVersion": "1.0.0"})  # the pod's sandbox made again
        await asyncio.sleep(0)
        assert sink.removals == ["started", "cancelled"]
        sink.api_back.set()
        await asyncio.sleep(0.05)
        assert ("blue", "web") in sink.status  # the status the new ADD published stays

    asyncio.run(body())


def test_shutdown_stops_the_removals_left_running_within_its_bound(tmp_path: Path) -> None:
    orch, sink = attached(tmp_path)

    async def body() -> None:
        await orch.add(CALL, {"cniVersion": "1.0.0"})
        await orch.delete(DEL)
        took = await timed(orch.finish_status_removals(0.1))
        assert took < 0.5
        assert sink.removals == ["started", "cancelled"]

    asyncio.run(body())


def test_a_quick_removal_is_done_when_del_returns(tmp_path: Path) -> None:
    orch, sink = attached(tmp_path)

    async def body() -> None:
        sink.api_back.set()
        await orch.add(CALL, {"cniVersion": "1.0.0"})
        await orch.delete(DEL)
        assert sink.removals == ["started", "done"]

    asyncio.run(body())


@pytest.mark.req("STAT-ANNOT", "RT-DEL")
def test_the_del_of_an_older_sandbox_leaves_the_status_of_the_pods_live_one(
    tmp_path: Path,
) -> None:
    """Kubelet tears a pod's failed sandbox down after the next one attached (the first ADD
    found no daemon; the retry, once the daemon was back, attached). That DEL is of the pod, but
    the status is the live sandbox's: it stays. The cluster tier's rolling update showed a pod
    Running with no network-status for want of this."""
    view = view_of(pod("net-a"), nad("net-a", {"cniVersion": "1.0.0", "type": "macvlan"}))
    orch, sink, _ = orchestrated(tmp_path, view)
    failed, live = call("DEL", container_id="c-failed"), call(container_id="c-live")

    async def body() -> None:
        await orch.add(live, {"cniVersion": "1.0.0"})
        published = sink.status[("blue", "web")]
        await orch.delete(failed)  # no record: its ADD never ran
        assert sink.status[("blue", "web")] == published
        # a sandbox with a record of its own, torn down after the live one attached
        await orch.add(call(container_id="c-old"), {"cniVersion": "1.0.0"})
        published = sink.status[("blue", "web")]
        await orch.delete(call("DEL", container_id="c-old"))
        assert sink.status[("blue", "web")] == published
        # the live one's DEL: the pod has no sandbox left
        await orch.delete(live._replace(command="DEL"))
        assert ("blue", "web") not in sink.status
        # a sandbox of another pod of that name (a UID of its own) is no sandbox of this one
        await orch.add(live, {"cniVersion": "1.0.0"})
        orch.records.save(builders.pod_record("c-next", uid="u2"))
        await orch.delete(live._replace(command="DEL"))
        assert ("blue", "web") not in sink.status

    asyncio.run(body())
