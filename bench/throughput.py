"""Pods per second: N pods ADDed all at once, then DELed all at once, contender by contender.

The pods (default network + 2 bridge attachments each) get a namespace each, made before the
clock starts and shared by the contenders in turn (each DEL leaves them empty). The floor runs the
same delegates with at most `maxConcurrentDelegates` (the daemon's default) plugin processes at
once, as the daemon does. For the daemons, the burst of the largest N is also watched for
memory: VmHWM reset just before it (proc(5) clear_refs), VmRSS polled during it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from bench import contenders as contenders_mod
from bench import daemons as daemons_mod
from bench import guard as guard_mod
from bench import latency, topology

RETRIES = 3


@dataclasses.dataclass
class BurstResult:
    pods: int
    add: contenders_mod.Burst
    delete: contenders_mod.Burst
    retried_dels: int = 0
    memory: dict[str, int] | None = None

    def to_json(self) -> dict[str, Any]:
        """Pods per second count the calls that succeeded; failures are kept with the first
        message (a contender that refuses part of a burst is a finding, not a crash)."""
        out: dict[str, Any] = {"pods": self.pods}
        for op, done in (("add", self.add), ("del", self.delete)):
            ok = self.pods - len(done.failures)
            out[f"{op}_ms"] = done.ms
            out[f"{op}_ok"] = ok
            out[f"{op}_pods_per_s"] = ok / (done.ms / 1e3)
            if done.failures:
                out[f"{op}_first_failure"] = done.failures[min(done.failures)]
        out["retried_dels"] = self.retried_dels
        if self.memory is not None:
            out["memory_kib"] = self.memory
        return out


def delete_again(
    contender: contenders_mod.Contender, calls: list[contenders_mod.PodCall], failed: list[int]
) -> None:
    """DEL each pod whose burst DEL failed, one at a time, as a runtime retries: nothing may
    stay attached (the leak check would fail the run)."""
    for index in failed:
        for attempt in range(RETRIES):
            try:
                contender.delete(calls[index])
                break
            except contenders_mod.CallFailedError:
                if attempt == RETRIES - 1:
                    raise


def burst(
    contender: contenders_mod.Contender,
    calls: list[contenders_mod.PodCall],
    daemon: daemons_mod.Daemon | None,
) -> BurstResult:
    """ADD every pod at once, then DEL every pod at once, then DEL again what failed."""
    before: dict[str, int] = {}
    poller = None
    if daemon is not None:
        before = daemons_mod.memory(daemon.pid)
        daemons_mod.reset_peak(daemon.pid)
        poller = daemons_mod.RssPoller(daemon.pid).__enter__()
    try:
        add = contender.burst("ADD", calls)
        dele = contender.burst("DEL", calls)
    finally:
        if poller is not None:
            poller.__exit__()
    memory = None
    if daemon is not None and poller is not None:
        after = daemons_mod.memory(daemon.pid)
        memory = {
            "rss_before": before["VmRSS"],
            "peak_hwm": after["VmHWM"],
            "peak_polled": poller.peak_kib,
            "rss_after": after["VmRSS"],
            "polls": poller.samples,
        }
    delete_again(contender, calls, sorted(dele.failures))
    return BurstResult(len(calls), add, dele, len(dele.failures), memory)


def measure(
    guard: guard_mod.Guard,
    contenders: Sequence[contenders_mod.Contender],
    pods: Sequence[topology.PodSpec],
    sizes: Sequence[int],
    daemons: dict[str, daemons_mod.Daemon],
) -> dict[int, dict[str, BurstResult]]:
    results: dict[int, dict[str, BurstResult]] = {}
    largest = max(sizes)
    for index, size in enumerate(sizes):
        names = [f"q{i}" for i in range(size)]
        paths = [guard.netns(what) for what in names]
        try:
            results[size] = {}
            for contender in latency.rotated(contenders, index):
                calls = [
                    contenders_mod.PodCall(
                        pods[i], paths[i], f"{guard.name(names[i])}-{contender.name}-{size}"
                    )
                    for i in range(size)
                ]
                watched = daemons.get(contender.name) if size == largest else None
                results[size][contender.name] = burst(contender, calls, watched)
        finally:
            for what in names:
                guard.remove_netns(guard.name(what))
    return results
