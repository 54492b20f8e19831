"""MultiNetworkPolicy at scale: parse, compile and render times, and what the tables hold.

Over the corpus of `bench.policy_corpus` (default 1,000 policies over 500 pods) it times
`policy.model.parse_policies`, `policy.compile.compile_pods` (every pod a target) and
`policy.render.render_table` for every pod, the median of REPEATS runs each. It counts, in the
rendered nftables text, the tables, rules and set elements; beside them, the rules a
per-peer-per-port translation (kuryr-kubernetes' security-group approach: one rule per
(peer address or CIDR, port) pair of each policy rule) makes of the same IR. The times are
taken with the garbage collector set as `netattach daemon` sets it (`daemon.heap`), the process
that compiles for real; it is put back after. Usage:
python -m bench.policy_scale [--policies N] [--pods N] [--repeats N]
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import statistics
import sys
import time
from collections.abc import Mapping
from typing import Any

from bench import policy_corpus
from netattach.daemon import heap
from netattach.policy import compile as compile_mod
from netattach.policy import ir as ir_mod
from netattach.policy import model, render

_ELEMENTS = re.compile(r"^\t\telements = \{ (.*) \}$")


def count_table(text: str) -> dict[str, int]:
    """Rules, allow rules, sets and set elements of one rendered table."""
    rules = allow = sets = elements = 0
    in_chain = False
    for line in text.splitlines():
        if line.startswith("\tchain "):
            in_chain = True
        elif line.startswith("\tset "):
            sets += 1
        elif line == "\t}":
            in_chain = False
        elif in_chain and line.startswith("\t\t") and not line.startswith("\t\ttype "):
            rules += 1
            if " accept " in line and 'comment "policy ' in line:
                allow += 1
        match = _ELEMENTS.match(line)
        if match:
            elements += len(match.group(1).split(", "))
    return {"rules": rules, "allow_rules": allow, "sets": sets, "set_elements": elements}


def per_peer_per_port(rules: Mapping[str, ir_mod.InterfaceRules]) -> int:
    """Rules of the same IR with one rule per (peer network, port range) pair, no sets."""
    total = 0
    for ir in rules.values():
        for direction in (ir.ingress, ir.egress):
            if direction is None:
                continue
            total += 1  # the isolation's final drop, as in ours
            for rule in direction.rules:
                total += max(1, len(rule.peers or ())) * max(1, len(rule.ports or ()))
    return total


def measure(policies: int, pods: int, repeats: int) -> dict[str, Any]:
    saved = gc.get_threshold()
    heap.tune()
    try:
        return _measure(policies, pods, repeats)
    finally:
        gc.set_threshold(*saved)


def _measure(policies: int, pods: int, repeats: int) -> dict[str, Any]:
    corpus = policy_corpus.build_corpus(policies=policies, pods=pods)
    parse_ms: list[float] = []
    compile_ms: list[float] = []
    render_ms: list[float] = []
    tables: dict[str, str] = {}
    compiled: dict[str, dict[str, ir_mod.InterfaceRules]] = {}
    invalid = 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        parsed, bad = model.parse_policies(corpus.policies)  # type: ignore[arg-type]
        t1 = time.perf_counter()
        compiled = compile_mod.compile_pods(
            corpus.pods,  # type: ignore[arg-type]
            corpus.namespaces,  # type: ignore[arg-type]
            corpus.pods,  # type: ignore[arg-type]
            parsed,
        )
        t2 = time.perf_counter()
        tables = {}
        for key, rules in compiled.items():
            text = render.render_table(key, rules)
            if text is not None:
                tables[key] = text
        t3 = time.perf_counter()
        invalid = len(bad)
        parse_ms.append((t1 - t0) * 1e3)
        compile_ms.append((t2 - t1) * 1e3)
        render_ms.append((t3 - t2) * 1e3)
    if invalid:
        raise RuntimeError(f"the policy corpus has {invalid} invalid policies")
    counts = {"rules": 0, "allow_rules": 0, "sets": 0, "set_elements": 0}
    for text in tables.values():
        for key, value in count_table(text).items():
            counts[key] += value
    expanded = sum(per_peer_per_port(rules) for rules in compiled.values())
    interfaces = sum(len(rules) for rules in compiled.values())
    total = [p + c + r for p, c, r in zip(parse_ms, compile_ms, render_ms, strict=True)]
    return {
        "policies": policies,
        "pods": pods,
        "namespaces": len(corpus.namespaces),
        "repeats": repeats,
        "parse_ms": statistics.median(parse_ms),
        "compile_ms": statistics.median(compile_ms),
        "render_ms": statistics.median(render_ms),
        "total_ms": statistics.median(total),
        "pods_with_table": len(tables),
        "governed_interfaces": interfaces,
        "nft_bytes": sum(len(t) for t in tables.values()),
        **counts,
        "per_peer_per_port_rules": expanded,
        "rule_ratio": expanded / counts["rules"] if counts["rules"] else 0.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--policies", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(measure(args.policies, args.pods, args.repeats), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
