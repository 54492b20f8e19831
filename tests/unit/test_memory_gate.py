"""Delegates admitted by memory (REL-BURST): the cgroup's limit read as the kernel writes it
(v1 and v2), each program's peak taken from its real children, and a burst of heavy delegates
queued so that their expected memory, with the daemon's, stays inside the limit."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

from netattach import process
from netattach.runtime import memory
from tests.builders import call, nad, orchestrated, pod, view_of

BRIDGE = {"cniVersion": "1.0.0", "name": "net-a", "type": "bridge"}

pytestmark = pytest.mark.req("REL-BURST")

MIB = memory.MIB


def cgroup_tree(tmp_path: Path, own: str, files: dict[str, str]) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    proc = tmp_path / "self-cgroup"
    proc.write_text(own)
    return root, proc


@pytest.mark.parametrize(
    ("own", "files", "expected"),
    [
        # v1: the memory controller's line names the cgroup; the limit in bytes
        ("5:devices:/x\n4:memory:/kubepods/pod1/c1\n", {
            "memory/kubepods/pod1/c1/memory.limit_in_bytes": "268435456\n"}, 256 * MIB),
        # v1 without a limit: a number near 2**63
        ("4:memory:/kubepods/pod1/c1\n", {
            "memory/kubepods/pod1/c1/memory.limit_in_bytes": "9223372036854771712\n"}, None),
        # v2: the unified hierarchy's line
        ("0::/kubepods.slice/pod1/c1\n", {
            "kubepods.slice/pod1/c1/memory.max": "536870912\n"}, 512 * MIB),
        ("0::/kubepods.slice/pod1/c1\n", {"kubepods.slice/pod1/c1/memory.max": "max\n"}, None),
        # a cgroup namespace: the container's cgroup is the root
        ("0::/\n", {"memory.max": "134217728\n"}, 128 * MIB),
        ("0::/gone\n", {}, None),
        # the lowest of the cgroup's and its ancestors' (a pod's limit over its container's)
        ("0::/kubepods/pod1/c1\n", {"kubepods/pod1/memory.max": "104857600\n",
            "kubepods/pod1/c1/memory.max": "max\n"}, 100 * MIB),
        ("4:memory:/kubepods/pod1/c1\n", {
            "memory/kubepods/pod1/memory.limit_in_bytes": "209715200\n",
            "memory/kubepods/pod1/c1/memory.limit_in_bytes": "268435456\n"}, 200 * MIB),
    ],
)  # fmt: skip
def test_the_cgroups_limit_is_read_as_the_kernel_writes_it(
    tmp_path: Path, own: str, files: dict[str, str], expected: int | None
) -> None:
    root, proc = cgroup_tree(tmp_path, own, files)
    assert memory.cgroup_limit(root, proc) == expected


def test_a_childs_peak_resident_set_is_remembered_by_its_program() -> None:
    """The reaper's `wait4` gives each child's highest resident set: a child that touched 80 MiB
    leaves its program's peak at least that."""
    touch = "b = bytearray(80 * 1024 * 1024)\nfor i in range(0, len(b), 4096): b[i] = 1\n"
    outcome = process.run_blocking([sys.executable, "-c", touch], {}, b"", 30.0)
    assert outcome.returncode == 0, outcome.stderr
    deadline = time.monotonic() + 5
    while (process.peak_of(sys.executable) or 0) < 80 * MIB:  # the reaper's thread notes it
        assert time.monotonic() < deadline, process.peak_of(sys.executable)
        time.sleep(0.02)


def test_a_burst_of_heavy_delegates_waits_for_room_and_never_overruns_the_limit() -> None:
    """256 MiB limit, the daemon at 60 MiB, a heavy plugin seen at 55 MiB (expected 68.75):
    two run at once, the others wait; each starts as one ends. The expected total never passes
    the budget, and every one runs."""
    peaks = {"/cni/heavy": 55 * MIB, "/cni/light": 8 * MIB}
    gate = memory.MemoryGate(256 * MIB, resident=lambda: 60 * MIB, peak_of=peaks.get)
    budget = gate.budget()
    assert budget == 256 * MIB - 60 * MIB - int(256 * MIB * 0.1)
    seen: list[int] = []
    running = 0
    most = 0

    async def run(program: str) -> None:
        nonlocal running, most
        async with gate.admission(program):
            running += 1
            most = max(most, running)
            seen.append(gate.admitted)
            await asyncio.sleep(0.02)
            running -= 1

    async def body() -> None:
        await asyncio.gather(*(run("/cni/heavy") for _ in range(8)))

    asyncio.run(body())
    assert len(seen) == 8
    assert max(seen) <= budget
    assert most == 2
    assert gate.admitted == 0
    assert gate.waiting == 0


def test_one_delegate_always_runs_when_none_is_and_light_ones_fill_the_room() -> None:
    """A program never seen (expected 64 MiB x 1.25) larger than the budget still runs alone: a
    burst is slower, never stuck; light plugins run many at once beside it."""
    peaks = {"/cni/light": 8 * MIB}
    gate = memory.MemoryGate(128 * MIB, resident=lambda: 60 * MIB, peak_of=peaks.get)
    assert gate.expected("/cni/new") > gate.budget()
    order: list[str] = []

    async def run(program: str, hold: float) -> None:
        async with gate.admission(program):
            order.append(program)
            await asyncio.sleep(hold)

    async def body() -> None:
        await asyncio.gather(run("/cni/new", 0.05), run("/cni/light", 0.01))
        lights = [run("/cni/light", 0.02) for _ in range(4)]
        await asyncio.gather(*lights)

    asyncio.run(body())
    assert order[0] == "/cni/new"
    assert order.count("/cni/light") == 5


def test_without_a_limit_every_delegate_is_admitted_at_once() -> None:
    gate = memory.MemoryGate(None, resident=lambda: 60 * MIB, peak_of=lambda _: None)
    inside = 0
    most = 0

    async def run() -> None:
        nonlocal inside, most
        async with gate.admission("/cni/x"):
            inside += 1
            most = max(most, inside)
            await asyncio.sleep(0.01)
            inside -= 1

    async def body() -> None:
        await asyncio.gather(*(run() for _ in range(20)))

    asyncio.run(body())
    assert most == 20


def test_a_pod_whose_delegates_waited_for_memory_gets_an_event(tmp_path: Path) -> None:
    """memoryWaitEvent: an ADD whose delegates waited that long, or longer, for memory (here the
    room held by another delegate meanwhile) leaves a Warning Event on its pod that says so; an
    ADD that did not wait leaves none."""
    orch, sink, _ = orchestrated(tmp_path, view_of(pod("net-a"), nad("net-a", BRIDGE)))
    orch.settings = orch.settings.replace(
        daemon=orch.settings.daemon._replace(memory_wait_event=0.1)
    )
    gate = memory.MemoryGate(128 * MIB, resident=lambda: 60 * MIB, peak_of=lambda _: 60 * MIB)
    orch.runtime.invoker.memory = gate

    async def body() -> None:
        async def hold() -> None:
            async with gate.admission("/cni/other"):
                await asyncio.sleep(0.3)

        holder = asyncio.create_task(hold())
        await asyncio.sleep(0.01)
        await orch.add(call(), {})
        await holder
        await orch.add(call(container_id="c2"), {})  # nothing held: no wait

    asyncio.run(body())
    waited = [e for e in sink.events if e[2] == "DelegatesWaitedForMemory"]
    assert len(waited) == 1, sink.events
    (pod_name, kind, _, message) = waited[0]
    assert (pod_name, kind) == ("blue/web", "Warning")
    assert "waited 0." in message
    assert "for memory" in message
