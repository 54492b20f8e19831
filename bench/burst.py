"""`make bench-burst` (`python -m bench.burst`, root): fifty pods with three networks each added
at once, as after a node reboot, to the daemon inside a memory cgroup with the DaemonSet's limit
(REL-BURST).

The node of `make bench` (a namespace, the directory feed, the native shim): the daemon is
started inside a cgroup of its own (v1 or v2) with `deploy/`'s limit, so its delegates are forked
into it as in the DaemonSet's pod; every pod is the cluster default network and two bridge
networks (host-local), ADDed at once, then DELed at once. Twice: with Debian's plugins, and with
each `bridge` a heavy stand-in (tests/heavy_plugin.c: ~60 MiB resident for the length of the
real plugin's run, as a cilium-cni-sized plugin); and the heavy burst once more with the
admission by memory off (`bench/ungated_daemon.py`: `maxConcurrentDelegates` alone), to show
what it prevents. Measured: the cgroup's peak memory (the
kernel's `memory.peak` / `memory.max_usage_in_bytes`, and `memory.current` sampled every 5 ms),
its OOM kills, whether the daemon lived, each pod's ADD time (p50/p99) and the burst's.

Usage: python -m bench.burst [--pods N] [--limit-mib N] [--heavy-mib N]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import yaml
from tests import heavy_plugin

from bench import contenders, daemons, node, run, stats, topology
from bench import guard as guard_mod

ROOT = Path(__file__).resolve().parent.parent
CGROUP = Path("/sys/fs/cgroup")
PORT = 19131


def deploy_limit() -> int:
    """The memory limit of the netattach container in deploy/daemonset.yaml, in bytes."""
    daemonset = yaml.safe_load((ROOT / "deploy" / "daemonset.yaml").read_text())
    (container,) = [
        c for c in daemonset["spec"]["template"]["spec"]["containers"] if c["name"] == "netattach"
    ]
    text = str(container["resources"]["limits"]["memory"])
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * factor
    return int(text)


class MemoryCgroup:
    """A memory cgroup of the run's (na-<tag>-...), v2 where the host has it, else v1."""

    def __init__(self, name: str, limit: int) -> None:
        self.v2 = (CGROUP / "cgroup.controllers").exists()
        self.path = (CGROUP if self.v2 else CGROUP / "memory") / name
        self.path.mkdir()
        limit_file = "memory.max" if self.v2 else "memory.limit_in_bytes"
        (self.path / limit_file).write_text(str(limit))
        self.samples: list[int] = []

    def wrapper(self, program: list[str]) -> list[str]:
        """`program` started inside this cgroup (the shell joins it, then execs)."""
        procs = self.path / "cgroup.procs"
        return ["sh", "-c", f'echo $$ > {procs} && exec "$0" "$@"', *program]

    def _read(self, name: str) -> str:
        return (self.path / name).read_text()

    def current(self) -> int:
        return int(self._read("memory.current" if self.v2 else "memory.usage_in_bytes"))

    def peak(self) -> int:
        if self.v2:
            peak = self.path / "memory.peak"  # Linux 5.19
            return int(peak.read_text()) if peak.exists() else max(self.samples, default=0)
        return int(self._read("memory.max_usage_in_bytes"))

    def oom_kills(self) -> int:
        text = self._read("memory.events" if self.v2 else "memory.oom_control")
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def remove(self) -> None:
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)  # the last process is still leaving

    def sample_while(self, done: threading.Event) -> None:
        while not done.is_set():
            try:
                self.samples.append(self.current())
            except OSError:
                return
            time.sleep(0.005)


def heavy_bin(directory: Path, heavy_mib: int) -> Path:
    """A bin directory whose `bridge` is the heavy stand-in around Debian's."""
    directory.mkdir(parents=True)
    stand_in = heavy_plugin.build(directory / "heavy-stand-in")
    script = directory / "bridge"
    script.write_text(
        "#!/bin/sh\n"
        f"NETATTACH_HEAVY_MIB={heavy_mib} NETATTACH_HEAVY_REAL={contenders.PLUGIN_DIR}/bridge "
        f"exec {stand_in}\n"
    )
    script.chmod(0o755)
    return directory


def one_burst(
    guard: guard_mod.Guard,
    the_node: dict[str, Any],
    variant: str,
    bin_dirs: list[str],
    pods: list[topology.PodSpec],
    limit: int,
    *,
    gated: bool = True,
) -> dict[str, Any]:
    topo, path, runner = the_node["topo"], the_node["path"], the_node["runner"]
    group = MemoryCgroup(guard.name(f"cg{variant[0]}"), limit)
    guard.on_undo(f"remove cgroup {group.path}", group.remove)
    daemon = daemons.Daemon(f"burst-{variant}", guard.work / variant, PORT)
    settings = daemons.write_settings(
        daemon, topo, the_node["name"], {"directory": str(topo.manifests)}
    )
    raw = json.loads(settings.read_text())
    raw["binDirs"] = bin_dirs
    settings.write_text(json.dumps(raw))
    guard.on_undo(f"stop {daemon.name}", lambda: daemons.stop(daemon))  # before the cgroup goes
    program = [str(daemons.DAEMON)] if gated else [sys.executable, "-m", "bench.ungated_daemon"]
    daemons.start(guard, daemon, path, settings, runner, wrapper=group.wrapper(program))
    meta = contenders.MetaPlugin(
        variant, runner, [the_node["shim"]], contenders.shim_config(daemon.root / "conf")
    )
    names = [f"{variant[0]}{i}" for i in range(len(pods))]
    paths = [guard.netns(what) for what in names]
    calls = [
        contenders.PodCall(pod, netns, f"{guard.name(n)}-burst")
        for pod, netns, n in zip(pods, paths, names, strict=True)
    ]
    done = threading.Event()
    sampler = threading.Thread(target=group.sample_while, args=(done,), daemon=True)
    base = group.current()
    sampler.start()
    try:
        reply = runner.call(
            {"op": "exec_many", "calls": [meta._call("ADD", call) for call in calls]}
        )
        adds = [float(each["ms"]) for each in reply["each"] if each["rc"] == 0]
        failed = [each["stdout"][:300] for each in reply["each"] if each["rc"] != 0]
    finally:
        done.set()
        sampler.join()
    alive = daemon.proc is not None and daemon.proc.poll() is None
    # a dead daemon answers no DEL (the netns and work directory go with the run)
    dels = meta.burst("DEL", calls) if alive else contenders.Burst(0.0, {})
    result = {
        "pods": len(pods),
        "limit_mib": limit / (1 << 20),
        "before_mib": base / (1 << 20),
        "peak_mib": group.peak() / (1 << 20),
        "peak_sampled_mib": max(group.samples, default=0) / (1 << 20),
        "oom_kills": group.oom_kills(),
        "daemon_alive": alive,
        "add_ok": len(adds),
        "add_failed": failed[:3],
        "add_ms": stats.summary(adds) if adds else {},
        "burst_ms": float(reply["ms"]),
        "del_failed": len(dels.failures),
    }
    daemons.stop(daemon)
    for what in names:
        guard.remove_netns(guard.name(what))
    return result


def measure(pods: int = 50, limit: int | None = None, heavy_mib: int = 60) -> dict[str, Any]:
    limit = limit or deploy_limit()
    with guard_mod.Guard() as guard:
        topo = topology.Topology(guard.work, guard.name)
        path = node.make_node(guard, topo.macvlan_master, topo.macvlan_peer)
        runner = node.NodeRunner(guard, path)
        guard.on_undo("stop the node runner", runner.close)
        shim = next(iter(run.shim_forms(guard, None).values()))
        specs = [
            dataclasses.replace(topo.pod(f"burst-{i:03d}", "bridge", 2), uid=str(uuid.uuid4()))
            for i in range(pods)
        ]
        node_name = guard.name("node")
        topo.write_manifests(specs, node_name)
        the_node = {"topo": topo, "path": path, "runner": runner, "shim": str(shim),
                    "name": node_name}  # fmt: skip
        result: dict[str, Any] = {"pods": pods, "networks_per_pod": 3}
        result["debian"] = one_burst(
            guard, the_node, "debian", [contenders.PLUGIN_DIR], specs, limit
        )
        heavy = heavy_bin(guard.work / "heavy-bin", heavy_mib)
        result["heavy"] = one_burst(
            guard, the_node, "heavy", [str(heavy), contenders.PLUGIN_DIR], specs, limit
        )
        result["heavy"]["heavy_mib"] = heavy_mib
        result["heavy_count_only"] = one_burst(
            guard, the_node, "ungated", [str(heavy), contenders.PLUGIN_DIR], specs, limit,
            gated=False,
        )  # fmt: skip
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=50)
    parser.add_argument("--limit-mib", type=int, default=0, help="default: deploy/'s limit")
    parser.add_argument("--heavy-mib", type=int, default=60)
    args = parser.parse_args()
    limit = args.limit_mib * (1 << 20) if args.limit_mib else None
    print(json.dumps(measure(args.pods, limit, args.heavy_mib), indent=2))


if __name__ == "__main__":
    main()
