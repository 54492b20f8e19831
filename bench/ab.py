"""Two source trees side by side: thick mode on both feeds and the thin plugin, interleaved.

    python -m bench.ab --base DIR [--runs N] [--networks N] [--only thick|thin]   (root)

DIR is another checkout's `src` (e.g. `git archive main | tar -x -C /tmp/base`, then
/tmp/base/src): its daemons and its `netattach-thin` run beside this tree's, on one node, one
fake API and the same delegates, alternated run by run with the floor (`latency.measure_pod`
rotates the order every round), so that a machine busy with something else weighs on both alike.
The figures to compare are the medians of A (base) and B (this tree) over the floor, from one run.

Every daemon is `python -m netattach.cli.main daemon` with PYTHONPATH naming its tree; the thin
plugins are each tree's `install-cni` launcher. The node holds the objects `make bench` creates
(the burst's 200 pods included), so the thin plugin lists as many manifests as there.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench import contenders as contenders_mod
from bench import daemons, latency, node, topology
from bench import guard as guard_mod
from bench import run as run_mod

HERE = Path(__file__).resolve().parent.parent / "src"
BURST_PODS = 200
PORTS = {"kube-A": 19140, "kube-B": 19141, "dir-A": 19142, "dir-B": 19143}


def install_thin(src: Path, bin_dir: Path) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "netattach.cli.main", "install-cni", "--bin-dir", str(bin_dir)],
        env={**os.environ, "PYTHONPATH": str(src)},
        check=True,
        capture_output=True,
    )
    return bin_dir / "netattach-thin"


def median_over(samples: dict[str, dict[str, list[float]]], who: str, op: str) -> float:
    return statistics.median(samples[who][op]) - statistics.median(samples["floor"][op])


def measure(guard: guard_mod.Guard, base: Path, args: argparse.Namespace) -> str:
    topo = topology.Topology(guard.work, guard.name)
    node_name, node_path, runner, api, kubeconfig = node.kube_node(guard, topo)
    pods = [topo.pod("web", "bridge", args.networks)]
    pods += [topo.pod(f"burst-{i:03d}", "bridge", 2) for i in range(BURST_PODS)]
    uids = [api.create(topo.pod_object(p, node_name))["metadata"]["uid"] for p in pods]
    pods = [dataclasses.replace(p, uid=u) for p, u in zip(pods, uids, strict=True)]
    topo.write_manifests(pods, node_name)
    pod = pods[0]

    trees = {"A": base, "B": HERE}
    found: list[contenders_mod.Contender] = [
        contenders_mod.Floor(runner, topo, run_mod.DEFAULT_MAX_CONCURRENT_DELEGATES)
    ]
    shim = next(iter(run_mod.shim_forms(guard, None).values()))
    if args.only in (None, "thick"):
        feeds: dict[str, dict[str, Any]] = {
            "kube": {"kubernetes": {"kubeconfig": str(kubeconfig)}},
            "dir": {"directory": str(topo.manifests)},
        }
        for (feed_name, feed), (tree, src) in itertools.product(feeds.items(), trees.items()):
            name = f"{feed_name}-{tree}"
            daemon = daemons.Daemon(name, guard.work / name, PORTS[name])
            settings = daemons.write_settings(daemon, topo, node_name, feed)
            guard.on_undo(f"stop {name}", functools.partial(daemons.stop, daemon))
            env = {"PYTHONPATH": str(src)}
            wrapper = [sys.executable, "-m", "netattach.cli.main"]
            if args.trace and name == "kube-B":
                env["NETATTACH_BENCH_TRACE"] = args.trace
                wrapper = [sys.executable, args.trace_script]
            daemons.start(
                guard, daemon, node_path, settings, runner, extra_env=env, wrapper=wrapper
            )
            config = contenders_mod.shim_config(daemon.root / "conf")
            found.append(contenders_mod.MetaPlugin(name, runner, [str(shim)], config))
    if args.only in (None, "thin"):
        for tree, src in trees.items():
            thin = install_thin(src, guard.work / f"thin-{tree}" / "bin")
            state = guard.work / f"thin-{tree}" / "state"
            config = contenders_mod.thin_config(topo, state)
            found.append(contenders_mod.MetaPlugin(f"thin-{tree}", runner, [str(thin)], config))
    samples = latency.measure_pod(guard, found, pod, args.runs, itertools.count(1))
    lines = [f"default + {args.networks} bridge, {args.runs} rounds; p50 ms, and over the floor"]
    for who in samples:
        add = statistics.median(samples[who]["add"])
        dele = statistics.median(samples[who]["del"])
        over = ""
        if who != "floor":
            add_over = median_over(samples, who, "add")
            over = f"  ADD {add_over:+6.2f}  DEL {median_over(samples, who, 'del'):+6.2f}"
        lines.append(f"  {who:8} ADD {add:7.2f}  DEL {dele:7.2f}{over}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--base", type=Path, required=True, help="the other tree's src directory")
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--networks", type=int, default=0)
    parser.add_argument("--only", choices=("thick", "thin"))
    parser.add_argument("--trace-script", help="a wrapper script run as kube-B's daemon (probes)")
    parser.add_argument("--trace", help="where the wrapper writes its spans")
    args = parser.parse_args()
    text, clean = guard_mod.guarded(
        "bench.ab", lambda guard: measure(guard, args.base.resolve(), args)
    )
    print(text)
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
