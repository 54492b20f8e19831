"""Delegates are reaped through pidfds in the event loop, not by a thread per child."""

import asyncio
import threading
from pathlib import Path

from netattach.runtime import children, execute


def waitpid_threads() -> list[str]:
    # Python 3.11's ThreadedChildWatcher names its threads "asyncio-waitpid-<pid>".
    return [t.name for t in threading.enumerate() if "waitpid" in t.name]


async def run_one_child(during: list[list[str]]) -> execute.ExecOutcome:
    runner = execute.SubprocessExec()
    task = asyncio.create_task(
        runner.run(
            Path("/bin/sh"),
            env={"PATH": "/usr/bin:/bin"},
            stdin=b"sleep 0.3\n",
            timeout=10,
        )
    )
    await asyncio.sleep(0.05)
    during.append(waitpid_threads())
    return await task


def test_with_pidfds_a_child_runs_and_is_reaped_without_a_thread() -> None:
    during: list[list[str]] = []

    async def main() -> tuple[bool, execute.ExecOutcome]:
        used = children.watch_children_with_pidfds()
        return used, await run_one_child(during)

    used, outcome = asyncio.run(main())

    assert used  # this kernel (>= 5.3) and Python 3.11 can
    assert outcome.returncode == 0
    assert during == [[]]


def test_the_default_watcher_would_have_started_a_thread() -> None:
    # The contrast that makes the test above mean something: without pidfds, a thread per child.
    during: list[list[str]] = []

    async def main() -> execute.ExecOutcome:
        return await run_one_child(during)

    asyncio.set_child_watcher(asyncio.ThreadedChildWatcher())  # the 3.11 default
    outcome = asyncio.run(main())

    assert outcome.returncode == 0
    assert len(during[0]) == 1
