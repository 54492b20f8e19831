"""`make bench-ipam` (`python -m bench.ipam`, as root, after `make k8s`): netattach's IPAM measured
on one node beside host-local (bench/ipam_node.py) and across 10 simulated nodes on the real API
server (bench/ipam_cluster.py); a table of the figures beside IPAM-FAST's targets, and
bench/results/ipam-<stamp>.json. Exit status 1 when a target is not met, something leaked or an
address was given twice.

    python -m bench.ipam [--runs N] [--nodes N] [--pods N]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

from bench import ipam_cluster, ipam_node

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_ADD_OVERHEAD_MS = 1.0
TARGET_REQUESTS_PER_ALLOCATION = 0.1


def render(result: dict[str, Any]) -> tuple[str, bool]:
    """The table, and whether every target is met and nothing went wrong."""
    node, cluster = result["node"], result["cluster"]
    lines = [f"one node, pod with 2 bridge networks, p50 of {node['runs']} runs (ms)"]
    lines.append(f"{'':26}{'ADD':>9}{'DEL':>9}")
    for kind, label in (("bridge", "host-local"), ("ipam", "netattach IPAM")):
        ops = node["latency"][kind]["thick-dir"]
        lines.append(f"{label:26}{ops['add']['p50']:9.2f}{ops['del']['p50']:9.2f}")
    over = node["overhead"]["thick-dir"]
    lines.append(f"{'overhead':26}{over['add_p50_ms']:9.2f}{over['del_p50_ms']:9.2f}")
    lines.append("")
    lines.append(
        f"{cluster['pods']} pods over {cluster['nodes']} nodes, real API server "
        f"(pool {cluster['pool_subnet']}, blocks of 16)"
    )
    lines.append(
        f"{'':10}{'total s':>9}{'ADD p50':>9}{'ADD p99':>9}{'claims':>8}{'requests':>10}"
        f"{'per alloc':>11}{'twice':>7}"
    )
    for phase in ("fill", "steady"):
        p = cluster[phase]
        lines.append(
            f"{phase:10}{p['wall_ms'] / 1000:9.2f}{p['add_ms']['p50']:9.2f}"
            f"{p['add_ms']['p99']:9.2f}{p['claims']:8d}{sum(p['requests'].values()):10d}"
            f"{p['requests_per_allocation']:11.3f}{p['duplicates']:7d}"
        )
    claim, alone = cluster["fill"]["claim_ms"], cluster["claim_alone_ms"]
    lines.append(
        f"block claim (list + create), alone: p50 {alone['p50']:.1f} ms, p90 "
        f"{alone['p90']:.1f} ms; during the fill (10 nodes at once, one process): p50 "
        f"{claim['p50']:.1f} ms, p90 {claim['p90']:.1f} ms"
    )
    checks = [
        ("ADD p50 overhead over host-local", over["add_p50_ms"], TARGET_ADD_OVERHEAD_MS),
        (
            "API requests per allocation, steady",
            cluster["steady"]["requests_per_allocation"],
            TARGET_REQUESTS_PER_ALLOCATION,
        ),
    ]
    lines.append("")
    lines.append("targets")
    ok = True
    for what, value, target in checks:
        met = value <= target
        ok &= met
        lines.append(f"  {what:40}{value:8.3f} <= {target:<6g}{'met' if met else 'NOT met'}")
    twice = cluster["fill"]["duplicates"] + cluster["steady"]["duplicates"]
    lines.append(f"  {'addresses given twice':40}{twice:8d}")
    lines.append(f"  {'leaks':40}{len(node['leaks']):8d}  {'; '.join(node['leaks'][:3])}")
    ok &= twice == 0 and not node["leaks"]
    return "\n".join(lines), ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ipam", description=__doc__)
    parser.add_argument("--runs", type=int, default=40, help="one-node rounds per pod (40)")
    parser.add_argument("--nodes", type=int, default=10, help="simulated nodes (10)")
    parser.add_argument("--pods", type=int, default=1000, help="pods over them (1,000)")
    args = parser.parse_args(argv)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H%M%SZ")
    result = {
        "date": stamp,
        "node": ipam_node.measure(args.runs),
        "cluster": ipam_cluster.measure(args.nodes, args.pods),
    }
    text, ok = render(result)
    print(text)
    out = RESULTS / f"ipam-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
