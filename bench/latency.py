"""Pod ADD and DEL latency: every contender on the same pod, alternating run by run.

For each kind of network and number of attachments, round r makes a fresh pod namespace and
every contender, in an order rotated by r, ADDs the pod into it and DELs it again (each with a
container ID of its own). Round 0 warms caches and is not counted.

Every DEL waits `SETTLE` seconds after its ADD, for every contender alike. Measured: three bridge
DELs run right after their ADDs take ~64 ms, the same DELs 0.1 s or 0.3 s later ~75 ms — the
kernel is still finishing the new links' setup in the background at first. Without the pause the
floor's DEL, which starts at once, was ~10 ms cheaper than any DEL that reaches the plugins
through a shim, and than any DEL a real runtime makes (seconds or days after the ADD).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from bench import contenders as contenders_mod
from bench import guard as guard_mod
from bench import topology

Samples = dict[str, dict[str, list[float]]]  # contender -> {"add": [...], "del": [...]}

SETTLE = 0.2  # seconds between a pod's ADD and its DEL


def rotated(items: Sequence[contenders_mod.Contender], shift: int) -> list[Any]:
    shift %= len(items)
    return [*items[shift:], *items[:shift]]


def one_pod(
    contender: contenders_mod.Contender, call: contenders_mod.PodCall
) -> tuple[float, float]:
    """ADD then DEL; a failed ADD is still DELed before the error goes on."""
    try:
        add_ms = contender.add(call)
    except contenders_mod.CallFailedError:
        contender.delete(call)
        raise
    time.sleep(SETTLE)
    return add_ms, contender.delete(call)


def measure_pod(
    guard: guard_mod.Guard,
    contenders: Sequence[contenders_mod.Contender],
    pod: topology.PodSpec,
    runs: int,
    numbers: Iterator[int],
) -> Samples:
    """`runs` counted rounds of every contender on `pod`; `numbers` names the namespaces."""
    samples: Samples = {c.name: {"add": [], "del": []} for c in contenders}
    for round_ in range(runs + 1):
        what = f"p{next(numbers)}"
        netns = guard.netns(what)
        try:
            for contender in rotated(contenders, round_):
                call = contenders_mod.PodCall(
                    pod, netns, f"{guard.name(what)}-{contender.name}-{round_}"
                )
                add_ms, del_ms = one_pod(contender, call)
                if round_ > 0:
                    samples[contender.name]["add"].append(add_ms)
                    samples[contender.name]["del"].append(del_ms)
        finally:
            guard.remove_netns(guard.name(what))
    return samples
