"""Tests of netattach.pods.locks: one operation at a time per container (RT-SERIAL).

Ordering is proven with events and timestamps written to files, never with "it took at least N
seconds": a waiter records when it got the lock, the holder records when it let go, and the
test compares the two (CLOCK_MONOTONIC is one clock for every process of the machine).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from netattach.cni import errors
from netattach.pods import locks

CID = "c0ffee1234"
OTHER = "beef5678"


async def _hold_while(
    held: locks.ContainerLocks,
    container_id: str,
    order: list[str],
    inside: asyncio.Event,
    release: asyncio.Event,
) -> None:
    async with held.hold(container_id):
        order.append(f"{container_id} in")
        inside.set()
        await release.wait()
        order.append(f"{container_id} out")


@pytest.mark.req("RT-SERIAL")
def test_a_second_holder_of_the_same_container_waits_for_the_first(tmp_path: Path) -> None:
    async def scenario() -> list[str]:
        held = locks.ContainerLocks(tmp_path)
        order: list[str] = []
        inside, release = asyncio.Event(), asyncio.Event()
        first = asyncio.create_task(_hold_while(held, CID, order, inside, release))
        await inside.wait()

        async def second() -> None:
            async with held.hold(CID):
                order.append("second in")

        waiter = asyncio.create_task(second())
        # Let the waiter poll the lock many times while the first still holds it.
        for _ in range(20):
            await asyncio.sleep(0.005)
        assert not waiter.done()
        release.set()
        await asyncio.gather(first, waiter)
        return order

    assert asyncio.run(scenario()) == [f"{CID} in", f"{CID} out", "second in"]


@pytest.mark.req("RT-SERIAL")
def test_different_containers_do_not_wait_for_each_other(tmp_path: Path) -> None:
    async def scenario() -> list[str]:
        # A short timeout: if OTHER waited for CID, it would fail with TryAgainLater.
        held = locks.ContainerLocks(tmp_path, timeout=5.0)
        order: list[str] = []
        inside, release = asyncio.Event(), asyncio.Event()
        first = asyncio.create_task(_hold_while(held, CID, order, inside, release))
        await inside.wait()
        async with held.hold(OTHER):
            order.append(f"{OTHER} in while {CID} is held")
        release.set()
        await first
        return order

    assert asyncio.run(scenario()) == [
        f"{CID} in",
        f"{OTHER} in while {CID} is held",
        f"{CID} out",
    ]


@pytest.mark.req("RT-SERIAL")
def test_a_holder_that_times_out_gets_try_again_later_naming_the_container(
    tmp_path: Path,
) -> None:
    async def scenario() -> errors.TryAgainLaterError:
        order: list[str] = []
        inside, release = asyncio.Event(), asyncio.Event()
        first = asyncio.create_task(
            _hold_while(locks.ContainerLocks(tmp_path), CID, order, inside, release)
        )
        await inside.wait()
        impatient = locks.ContainerLocks(tmp_path, timeout=0.05)
        try:
            with pytest.raises(errors.TryAgainLaterError) as caught:
                async with impatient.hold(CID):
                    order.append("impatient in")  # pragma: no cover - the lock is held
        finally:
            release.set()
            await first
        assert order == [f"{CID} in", f"{CID} out"]
        return caught.value

    failure = asyncio.run(scenario())
    assert failure.code == 11
    assert CID in failure.msg
    assert "0.05s" in failure.details


@pytest.mark.req("RT-SERIAL")
def test_the_lock_is_released_when_the_body_raises(tmp_path: Path) -> None:
    async def scenario() -> list[str]:
        order: list[str] = []
        held = locks.ContainerLocks(tmp_path)

        async def failing_body() -> None:
            async with held.hold(CID):
                order.append("first in")
                raise RuntimeError("plugin blew up")

        with pytest.raises(RuntimeError, match="plugin blew up"):
            await failing_body()
        # Were the lock still held, this would time out with TryAgainLaterError.
        async with locks.ContainerLocks(tmp_path, timeout=0.5).hold(CID):
            order.append("second in")
        return order

    assert asyncio.run(scenario()) == ["first in", "second in"]


@pytest.mark.req("RT-SERIAL")
def test_the_lock_is_released_when_the_holder_is_cancelled(tmp_path: Path) -> None:
    async def scenario() -> None:
        order: list[str] = []
        inside, never = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(
            _hold_while(locks.ContainerLocks(tmp_path), CID, order, inside, never)
        )
        await inside.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        async with locks.ContainerLocks(tmp_path, timeout=0.5).hold(CID):
            pass

    asyncio.run(scenario())


@pytest.mark.req("RT-SERIAL")
def test_a_bad_container_id_is_refused_before_any_file_is_made(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with locks.ContainerLocks(tmp_path).hold("../escape"):
            pass  # pragma: no cover - refused before

    with pytest.raises(errors.InvalidEnvironmentError) as caught:
        asyncio.run(scenario())
    assert caught.value.code == 4
    assert not (tmp_path / "escape.lock").exists()
    assert not (tmp_path / "locks").exists()


# ---------------------------------------------------------------------------------------------
# across processes: the thin plugin's processes and the daemon share the flock

_CHILD = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from netattach.pods import locks

    state_dir, container_id, acquired, released, proceed = sys.argv[1:6]

    async def main() -> None:
        async with locks.ContainerLocks(Path(state_dir)).hold(container_id):
            Path(acquired).write_text(str(time.monotonic_ns()))
            if proceed:
                # Hold until the parent says so (bounded, so a failed test cannot hang).
                deadline = time.monotonic() + 30
                while not Path(proceed).exists() and time.monotonic() < deadline:
                    time.sleep(0.01)
            else:
                time.sleep(0.3)
            Path(released).write_text(str(time.monotonic_ns()))

    asyncio.run(main())
    """
)


def _start_child(
    state_dir: Path, container_id: str, tmp_path: Path, *, proceed: Path | None = None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            _CHILD,
            str(state_dir),
            container_id,
            str(tmp_path / "child-acquired"),
            str(tmp_path / "child-released"),
            "" if proceed is None else str(proceed),
        ],
        stderr=subprocess.PIPE,
    )


def _wait_for(path: Path, child: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while not path.exists():
        if child.poll() is not None:
            _, err = child.communicate()
            pytest.fail(f"the child exited ({child.returncode}) before {path.name}: {err!r}")
        if time.monotonic() > deadline:  # pragma: no cover - a hung child
            child.kill()
            pytest.fail(f"the child did not write {path.name} within 30s")
        time.sleep(0.01)


@pytest.mark.req("RT-SERIAL")
def test_the_lock_holds_across_processes(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    child = _start_child(state_dir, CID, tmp_path)
    try:
        _wait_for(tmp_path / "child-acquired", child)

        async def parent() -> int:
            async with locks.ContainerLocks(state_dir, timeout=30).hold(CID):
                return time.monotonic_ns()

        parent_acquired = asyncio.run(parent())
    finally:
        _, err = child.communicate(timeout=30)
    assert child.returncode == 0, err
    released = tmp_path / "child-released"
    # The parent got the lock only after the child had finished its body.
    assert released.exists()
    assert parent_acquired >= int(released.read_text())
    assert int(released.read_text()) >= int((tmp_path / "child-acquired").read_text())


@pytest.mark.req("RT-SERIAL")
def test_another_containers_lock_in_another_process_does_not_block(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    proceed = tmp_path / "proceed"
    child = _start_child(state_dir, OTHER, tmp_path, proceed=proceed)
    try:
        _wait_for(tmp_path / "child-acquired", child)

        async def parent() -> bool:
            async with locks.ContainerLocks(state_dir, timeout=30).hold(CID):
                # The child holds OTHER until told to proceed: it has not let go yet.
                return (tmp_path / "child-released").exists()

        child_had_released = asyncio.run(parent())
    finally:
        proceed.write_text("go")
        _, err = child.communicate(timeout=30)
    assert child.returncode == 0, err
    assert child_had_released is False
