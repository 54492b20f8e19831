"""`python -m bench` (`make bench`, as root): every scenario in one run, a table, a JSON file.

    python -m bench [--quick] [--runs N] [--shim PATH] [--output FILE]

Writes bench/results/<YYYY-MM-DD>.json (or FILE): every series' summary and samples, the
machine, the git commit. Exit status 1 when a scenario failed or when anything the run made was
left behind (it is removed and checked however the run ends). A peer meta-plugin joins with
NETATTACH_BENCH_PEER=/path/to/binary NETATTACH_BENCH_PEER_CONF=/path/to/conf.json (see
bench/peer-multus.example.json). The last phase runs netattach beside Multus on a real API server
(bench/side_by_side.py; Multus from NETATTACH_BENCH_MULTUS=DIR).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from bench import run, table

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--runs", type=int, help="latency runs per pod shape (default 20)")
    parser.add_argument("--shim", type=Path, help="the shim thick mode runs (default: dist/)")
    parser.add_argument("--output", type=Path, help="the JSON file to write")
    args = parser.parse_args(argv)
    options = run.QUICK if args.quick else run.Options()
    if args.runs is not None:
        if args.runs < 1:
            parser.error(f"--runs must be at least 1, got {args.runs}")
        options = dataclasses.replace(options, runs=args.runs)
    if args.shim is not None:
        options = dataclasses.replace(options, shim=args.shim.resolve())
    try:
        result = run.run(options)
    except run.BenchFailedError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    print(table.render(result))
    out = args.output or RESULTS / f"{result['date']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written {out}")
    if not result["cleanup"]["clean"]:
        print("bench: FAILED: the run left something behind (see cleanup above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
