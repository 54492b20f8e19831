"""POL-CTRL: the order the policy controller's writes go in (`controller.publisher`).

The requests are recorded, not sent (what a real API server does with them is the kube tier's,
tests/kube/test_policy_controller.py): a group's first object before the other writes, one
request per name with its newest body, and a delete only once every write asked with it or
before is done, so a resharded group's new shards exist before its old ones go.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from netattach.cni import errors
from netattach.controller.publisher import Publisher
from netattach.policy.groups import Write

pytestmark = pytest.mark.req("POL-CTRL")


def put(name: str, version: int = 1) -> Write:
    return Write(name, {"metadata": {"name": name}, "spec": {"version": version}})


class Recorded(Publisher):
    """A Publisher whose requests are recorded; a name in `held` waits for its release."""

    def __init__(self, workers: int) -> None:
        super().__init__(None, workers=workers, retry_delay=0.2)  # type: ignore[arg-type]
        self.sent: list[tuple[str, Any]] = []
        self.held: dict[str, asyncio.Event] = {}
        self.failing: set[str] = set()

    async def _send(self, write: Write) -> None:
        gate = self.held.get(write.name)
        if gate is not None:
            await gate.wait()
        if write.name in self.failing:
            self.failing.discard(write.name)
            raise errors.CNIError("refused")
        body = None if write.body is None else write.body["spec"]["version"]
        self.sent.append((write.name, body))


async def _until(publisher: Recorded, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not publisher.idle():  # noqa: ASYNC110 (idle is a state, not an event)
            await asyncio.sleep(0.001)


def test_a_new_group_goes_first_and_a_name_is_written_once_with_its_newest_body() -> None:
    async def scenario() -> list[tuple[str, Any]]:
        publisher = Recorded(workers=1)
        running = asyncio.ensure_future(publisher.run())
        try:
            publisher.ask([put("old-1-0")])
            await _until(publisher)
            publisher.sent.clear()
            publisher.ask([put("old-1-0", 2), put("other-1-0")])
            publisher.ask([put("old-1-0", 3), put("new-1-0")])  # old-1-0 again before its turn
            await _until(publisher)
            return publisher.sent
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)

    sent = asyncio.run(scenario())
    # new-1-0 and other-1-0 were never written: first, in the order asked; then old-1-0 once
    assert sent == [("other-1-0", 1), ("new-1-0", 1), ("old-1-0", 3)]


def test_a_delete_waits_for_every_write_asked_with_it_or_before() -> None:
    async def scenario() -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
        publisher = Recorded(workers=4)
        running = asyncio.ensure_future(publisher.run())
        try:
            publisher.held["g-2-0"] = asyncio.Event()
            # a group resharded from one object to two: the new ones, then the old one goes
            publisher.ask([put("g-2-0"), put("g-2-1"), Write("g-1-0", None)])
            publisher.ask([put("later-1-0")])  # asked after: the delete does not wait for it
            await asyncio.sleep(0.05)
            before = list(publisher.sent)
            publisher.held["g-2-0"].set()
            await _until(publisher)
            return before, publisher.sent
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)

    before, sent = asyncio.run(scenario())
    assert ("g-1-0", None) not in before  # g-2-0 was still on its way
    assert {"g-2-1", "later-1-0"} <= {name for name, _ in before}
    assert sent.index(("g-1-0", None)) > sent.index(("g-2-0", 1))


def test_a_failed_write_is_sent_again_unless_a_newer_one_came() -> None:
    async def scenario() -> list[tuple[str, Any]]:
        publisher = Recorded(workers=1)
        running = asyncio.ensure_future(publisher.run())
        try:
            publisher.failing = {"a-1-0", "b-1-0"}
            publisher.ask([put("a-1-0"), put("b-1-0")])
            await asyncio.sleep(0.05)  # both failed, both to be tried again in 0.2 s
            assert not publisher.idle()
            publisher.ask([put("b-1-0", 2)])  # newer than b's failed write
            await _until(publisher)
            return publisher.sent
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)

    assert asyncio.run(scenario()) == [("b-1-0", 2), ("a-1-0", 1)]
