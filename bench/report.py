"""The table and the JSON file every latency benchmark ends with."""

from __future__ import annotations

import datetime
import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent


def report(
    name: str, title: str, contender: str, runs: int, samples: dict[str, list[float]]
) -> Path:
    """Print medians of `<contender>_add/_del` beside `direct_add/_del`; write the samples."""
    medians = {key: statistics.median(values) for key, values in samples.items()}
    print(f"{title}, median of {runs} runs (ms)")
    print(f"{'':8}{contender:>10}{'direct':>10}{'overhead':>10}{'ratio':>8}")
    for op in ("add", "del"):
        ours, floor = medians[f"{contender}_{op}"], medians[f"direct_{op}"]
        print(f"{op.upper():8}{ours:10.2f}{floor:10.2f}{ours - floor:10.2f}{ours / floor:8.2f}")
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H%M%SZ")
    out = HERE / "results" / f"{name}-{stamp}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps({"runs": runs, "median_ms": medians, "samples_ms": samples}, indent=2)
    )
    print(f"written {out.relative_to(HERE.parent)}")
    return out
