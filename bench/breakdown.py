"""Where thick mode's time goes: a pod's ADD and DEL through the daemon, phase by phase.

    python -m bench.breakdown [--runs N] [--strace-pods N]     (root; `make bench-breakdown`)

The pod of the historic figure (the default network + 2 bridge attachments), through five
contenders alternated run by run in one node namespace:

    floor            the delegates executed directly
    plain            the shim -> `netattach daemon` (directory feed), as shipped
    traced           the shim -> the daemon under bench.traced_daemon's timing probes
    no-fsync         the same, with every os.fsync a no-op (what the fsyncs cost, causally)
    traced-kube      the traced daemon on the Kubernetes feed (the fake API in the node)

From the probes: per request, the exclusive time of each phase (a phase's time minus the phases
inside it), so the phases add up to the daemon's handling time; the shim's share is the
contender's time minus the daemon's handling. Then `strace -c -f` and `strace -c` (daemon
threads only) attached to the plain daemon over --strace-pods more pods: syscall counts per pod.
Prints a table, writes bench/results/breakdown-<date>.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import itertools
import json
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench import contenders as contenders_mod
from bench import daemons, latency, machine, node, stats, topology
from bench import guard as guard_mod
from bench import run as run_mod

RESULTS = Path(__file__).resolve().parent / "results"
TRACED = [sys.executable, "-m", "bench.traced_daemon"]
PORTS = {"plain": 19130, "traced": 19131, "no-fsync": 19132, "traced-kube": 19133}
SYSCALLS_SHOWN = 12
# Shown whatever their rank: the durable-write path and process creation.
WATCHED = ("fsync", "fdatasync", "rename", "renameat2", "unlink", "openat", "vfork", "execve")
EPSILON = 1e-7


# -- the probes' spans ---------------------------------------------------------------------------


def load_spans(path: Path) -> list[tuple[str, str, float, float]]:
    spans: list[tuple[str, str, float, float]] = []
    for line in path.read_text().splitlines():
        name, request, start, end = json.loads(line)
        spans.append((str(name), str(request), float(start), float(end)))
    return spans


def exclusive_times(spans: list[tuple[str, str, float, float]]) -> dict[str, dict[str, float]]:
    """request -> probe -> time (ms) spent in that probe and in no probe inside it."""
    by_request: dict[str, list[tuple[str, str, float, float]]] = defaultdict(list)
    for span in spans:
        if span[1] != "-":
            by_request[span[1]].append(span)
    out: dict[str, dict[str, float]] = {}
    for request, found in by_request.items():
        found.sort(key=lambda s: (s[2], -s[3]))
        inner = [0.0] * len(found)
        stack: list[int] = []
        for index, (_, _, start, end) in enumerate(found):
            while stack and found[stack[-1]][3] < start + EPSILON:
                stack.pop()
            if stack:
                _, _, outer_start, outer_end = found[stack[-1]]
                if outer_start <= start + EPSILON and end <= outer_end + EPSILON:
                    inner[stack[-1]] += end - start
            stack.append(index)
        phases: dict[str, float] = defaultdict(float)
        for index, (name, _, start, end) in enumerate(found):
            phases[name] += (end - start - inner[index]) * 1e3
        out[request] = dict(phases)
    return out


def counts(spans: list[tuple[str, str, float, float]]) -> dict[str, dict[str, int]]:
    """request -> probe -> calls."""
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for name, request, _, _ in spans:
        if request != "-":
            out[request][name] += 1
    return out


def connection_overhead(spans: list[tuple[str, str, float, float]]) -> dict[str, float]:
    """request -> ms of its connection outside the handler (reading, parsing, replying)."""
    connections = [s for s in spans if s[0] == "connection"]
    out: dict[str, float] = {}
    for name, request, start, end in spans:
        if name != "handle":
            continue
        for _, _, c_start, c_end in connections:
            if c_start <= start and end <= c_end:
                out[request] = ((c_end - c_start) - (end - start)) * 1e3
                break
    return out


def mean(values: Any) -> float:
    return statistics.fmean(list(values))


def summarize(trace: Path) -> dict[str, Any]:
    """Per command: the median handling time and, per phase, mean exclusive ms and calls."""
    spans = load_spans(trace)
    phases = exclusive_times(spans)
    calls = counts(spans)
    outside = connection_overhead(spans)
    out: dict[str, Any] = {}
    for command in ("ADD", "DEL"):
        # round 0 warms caches and is not counted (container IDs end with -<round>)
        requests = sorted(r for r in phases if r.startswith(f"{command}:") and not r.endswith("-0"))
        if not requests:
            continue
        names = sorted({name for r in requests for name in phases[r]})
        handle = [sum(phases[r].values()) for r in requests]
        out[command] = {
            "requests": len(requests),
            "handle_p50_ms": statistics.median(handle),
            "connection_outside_handler_ms": mean(outside.get(r, 0.0) for r in requests),
            "phases_ms": {n: mean(phases[r].get(n, 0.0) for r in requests) for n in names},
            "calls": {n: mean(calls[r].get(n, 0) for r in requests) for n in names},
        }
    return out


# -- strace ------------------------------------------------------------------------------------


def strace_summary(path: Path) -> dict[str, dict[str, float]]:
    """`strace -c` output: syscall -> {seconds, calls, errors}."""
    table: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        fields = line.split()
        if len(fields) < 5 or not fields[0][0].isdigit() or fields[-1] == "total":
            continue
        errors = float(fields[4]) if len(fields) == 6 else 0.0
        table[fields[-1]] = {
            "seconds": float(fields[1]),
            "calls": float(fields[3]),
            "errors": errors,
        }
    return table


def traced_pods(
    guard: guard_mod.Guard,
    contender: contenders_mod.Contender,
    pod: topology.PodSpec,
    pods: int,
    argv: list[str],
) -> dict[str, dict[str, float]]:
    """Run `pods` ADD+DEL under `strace -c` (argv before the -p options); the summary."""
    out = guard.work / f"strace-{len(list(guard.work.glob('strace-*')))}.txt"
    tracer = guard.spawn([*argv, "-o", str(out)], stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached
    latency.measure_pod(guard, [contender], pod, pods - 1, itertools.count(10_000 * pods))
    tracer.send_signal(signal.SIGINT)
    tracer.wait(30)
    return strace_summary(out)


def per_pod(table: dict[str, dict[str, float]], pods: int) -> dict[str, dict[str, float]]:
    """Calls and wall-clock ms per pod, most frequent first."""
    return {
        name: {"calls": row["calls"] / pods, "ms": row["seconds"] * 1e3 / pods}
        for name, row in sorted(table.items(), key=lambda kv: -kv[1]["calls"])
    }


# -- the run -----------------------------------------------------------------------------------


def measure(
    guard: guard_mod.Guard, runs: int, strace_pods: int, networks: int = 2
) -> dict[str, Any]:
    topo = topology.Topology(guard.work, guard.name)
    node_name, node_path, runner, api, kubeconfig = node.kube_node(guard, topo)
    pod = topo.pod("web", "bridge", networks)
    created = api.create(topo.pod_object(pod, node_name))
    pod = dataclasses.replace(pod, uid=created["metadata"]["uid"])
    topo.write_manifests([pod], node_name)

    directory = {"directory": str(topo.manifests)}
    setups: dict[str, tuple[dict[str, Any], list[str] | None, dict[str, str]]] = {
        "plain": (directory, None, {}),
        "traced": (directory, TRACED, {}),
        "no-fsync": (directory, TRACED, {"NETATTACH_BENCH_NO_FSYNC": "1"}),
        "traced-kube": ({"kubernetes": {"kubeconfig": str(kubeconfig)}}, TRACED, {}),
    }
    running: dict[str, daemons.Daemon] = {}
    found: list[contenders_mod.Contender] = [
        contenders_mod.Floor(runner, topo, run_mod.DEFAULT_MAX_CONCURRENT_DELEGATES)
    ]
    shim = next(iter(run_mod.shim_forms(guard, None).values()))
    for name, (feed, wrapper, extra) in setups.items():
        daemon = daemons.Daemon(name, guard.work / name, PORTS[name])
        settings = daemons.write_settings(daemon, topo, node_name, feed)
        env = {**extra, "NETATTACH_BENCH_TRACE": str(daemon.root / "trace.jsonl")}
        guard.on_undo(f"stop {name}", functools.partial(daemons.stop, daemon))
        daemons.start(guard, daemon, node_path, settings, runner, extra_env=env, wrapper=wrapper)
        running[name] = daemon
        config = contenders_mod.shim_config(daemon.root / "conf")
        found.append(contenders_mod.MetaPlugin(name, runner, [str(shim)], config))

    samples = latency.measure_pod(guard, found, pod, runs, itertools.count(1))
    plain = found[1]
    syscalls: dict[str, Any] = {}
    if shutil.which("strace") is not None and strace_pods > 0:
        pid = running["plain"].pid
        follow = ["strace", "-f", "-c", "-w", "-p", str(pid)]
        everything = traced_pods(guard, plain, pod, strace_pods, follow)
        tids = [f"-p{t.name}" for t in Path(f"/proc/{pid}/task").iterdir()]
        own = traced_pods(guard, plain, pod, strace_pods, ["strace", "-c", "-w", *tids])
        syscalls = {
            "pods": strace_pods,
            "daemon_and_delegates_per_pod": per_pod(everything, strace_pods),
            "daemon_threads_per_pod": per_pod(own, strace_pods),
        }
    for daemon in running.values():
        daemons.stop(daemon)
    phases = {
        name: summarize(running[name].root / "trace.jsonl")
        for name in ("traced", "no-fsync", "traced-kube")
    }
    return {
        "pod": f"default + {networks} bridge attachments",
        "runs": runs,
        "latency": {
            who: {op: stats.summary(values) for op, values in ops.items()}
            for who, ops in samples.items()
        },
        "phases": phases,
        "syscalls": syscalls,
    }


# -- the table ---------------------------------------------------------------------------------


def render(result: dict[str, Any]) -> str:
    lat = result["latency"]
    lines = [
        f"thick-mode breakdown: a pod with {result['pod']}, {result['runs']} runs, alternated",
        f"{'':13}{'ADD p50':>9}{'ADD p99':>9}{'DEL p50':>9}{'DEL p99':>9}",
    ]
    for who, ops in lat.items():
        lines.append(
            f"{who:13}{ops['add']['p50']:9.1f}{ops['add']['p99']:9.1f}"
            f"{ops['del']['p50']:9.1f}{ops['del']['p99']:9.1f}"
        )
    for who, by_command in result["phases"].items():
        for command, s in by_command.items():
            shim_ms = lat[who][command.lower()]["p50"] - s["handle_p50_ms"]
            lines += [
                "",
                f"{who} {command}: contender p50 {lat[who][command.lower()]['p50']:.1f} ms = "
                f"daemon handling p50 {s['handle_p50_ms']:.1f} ms + shim, socket and HTTP "
                f"{shim_ms:.1f} ms (of which the daemon's connection outside its handler "
                f"{s['connection_outside_handler_ms']:.1f} ms)",
                f"  {'phase (exclusive time)':34}{'ms':>7}{'calls':>7}",
            ]
            for name, ms in sorted(s["phases_ms"].items(), key=lambda kv: -kv[1]):
                label = "handler, in no probe" if name == "handle" else name
                lines.append(f"  {label:34}{ms:7.2f}{s['calls'][name]:7.1f}")
    sys_ = result["syscalls"]
    if sys_:
        for key, title in (
            ("daemon_threads_per_pod", "daemon threads only"),
            ("daemon_and_delegates_per_pod", "daemon and its delegates (-f)"),
        ):
            lines += [
                "",
                f"strace -c -w, {title}: per pod (ADD + DEL), most frequent first "
                "(wall ms, inflated by ptrace; idle waits such as epoll_wait and futex included)",
                f"  {'syscall':18}{'calls':>8}{'wall ms':>9}",
            ]
            rows = list(sys_[key].items())
            shown = rows[:SYSCALLS_SHOWN] + [r for r in rows[SYSCALLS_SHOWN:] if r[0] in WATCHED]
            for name, row in shown:
                lines.append(f"  {name:18}{row['calls']:8.1f}{row['ms']:9.2f}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--strace-pods", type=int, default=20)
    parser.add_argument("--networks", type=int, default=2, help="bridge attachments per pod")
    args = parser.parse_args()

    def run(guard: guard_mod.Guard) -> dict[str, Any]:
        described = machine.describe(guard.work)
        result = measure(guard, args.runs, args.strace_pods, args.networks)
        return {**result, "machine": described, "git": machine.git()}

    result, clean = guard_mod.guarded("bench.breakdown", run)
    print(render(result))
    out = RESULTS / f"breakdown-{datetime.date.today().isoformat()}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written {out}")
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
