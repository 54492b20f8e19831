"""netattach's IPAM on one node beside host-local, same delegates, one run (IPAM-FAST).

The node of `make bench` (bench/run.py: a node namespace, the fake API, both daemons through the
native shim, as a runtime runs them): a pod with two bridge networks whose IPAM is host-local
(`bridge` kind) and the same pod whose two networks' IPAM is netattach's (`ipam` kind: the daemon
picks the address and runs the bridge plugin with `static`), ADDed and DELed in alternating
chunks. The overhead is the ipam pod's p50 minus the bridge pod's, on the directory feed's
daemon; the node's blocks have room throughout (a /16 per network: one block each, claimed in
the uncounted warm-up).

Usage: python -m bench.ipam_node [--runs N]
"""

from __future__ import annotations

import argparse
import itertools
import json
from typing import Any

from bench import guard as guard_mod
from bench import latency, run, stats
from netattach.ipam import ledger

KINDS = ("bridge", "ipam")
CHUNK = 5  # rounds of one kind before the other's
# the daemon on the directory feed: its blocks are its own (LocalSource). The fake API of the
# bench node does not serve IPBlocks; bench/ipam_cluster.py measures the Kubernetes source on
# the real API server (an ADD makes no request of it while the blocks have room, either way)
DAEMONS = ("thick-dir",)


def measure(runs: int = 40) -> dict[str, Any]:
    options = run.Options(runs=runs, kinds=KINDS, counts=(2,), bursts=(1,))
    with guard_mod.Guard() as guard:
        shim = next(iter(run.shim_forms(guard, None).values()))
        node = run.Node(guard, options, shim)
        contenders = [c for c in node.contenders if c.name in DAEMONS]
        numbers = itertools.count(1)
        samples: dict[str, dict[str, dict[str, list[float]]]] = {
            kind: {c.name: {"add": [], "del": []} for c in contenders} for kind in KINDS
        }
        for chunk, start in enumerate(range(0, runs, CHUNK)):
            for kind in KINDS if chunk % 2 == 0 else KINDS[::-1]:
                rounds = min(CHUNK, runs - start)
                got = latency.measure_pod(
                    guard, contenders, node.latency_pods[(kind, 2)], rounds, numbers
                )
                for who, ops in got.items():
                    for op, values in ops.items():
                        samples[kind][who][op].extend(values)
        result: dict[str, Any] = {"runs": runs, "latency": {}, "overhead": {}}
        for kind in KINDS:
            result["latency"][kind] = {
                who: {op: stats.summary(values) for op, values in ops.items()}
                for who, ops in samples[kind].items()
            }
        for who in DAEMONS:
            result["overhead"][who] = {
                f"{op}_p50_ms": stats.percentile(samples["ipam"][who][op], 50)
                - stats.percentile(samples["bridge"][who][op], 50)
                for op in ("add", "del")
            }
        result["leaks"] = [leak for leak in node.leaks() if ": ipam/" not in leak]
        for who, state in node.state_dirs().items():
            for book in ledger.load_all(state / "ipam") if state.exists() else []:
                result["leaks"] += [f"{who}: {a} of pool {book.pool} held" for a in book.held]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    print(json.dumps(measure(args.runs), indent=2))


if __name__ == "__main__":
    main()
