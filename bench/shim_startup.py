"""The shim's start-up: `CNI_COMMAND=VERSION` (answered locally, no daemon), process start to exit.

Every form given is measured in one run, alternating, after WARMUP unrecorded runs each; the
runtime's PATH (`/usr/sbin:/usr/bin:/sbin:/bin`), so the zipapp's `/usr/bin/env python3` finds
the host's python3 as a kubelet's would.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from bench import stats

RUNTIME_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
WARMUP = 3


def run_version(program: Path) -> float:
    """One VERSION call; milliseconds from start to exit."""
    stdin = json.dumps({"cniVersion": "1.0.0"}).encode()
    t0 = time.perf_counter()
    done = subprocess.run(
        [str(program)],
        input=stdin,
        env={"PATH": RUNTIME_PATH, "CNI_COMMAND": "VERSION"},
        capture_output=True,
        timeout=30,
        check=False,
    )
    elapsed = (time.perf_counter() - t0) * 1e3
    if done.returncode != 0 or b"supportedVersions" not in done.stdout:
        raise RuntimeError(
            f"{program} VERSION failed with {done.returncode}: {done.stdout!r} {done.stderr!r}"
        )
    return elapsed


def measure(programs: dict[str, Path], runs: int) -> dict[str, dict[str, float]]:
    """form name -> summary of `runs` VERSION calls (ms)."""
    for program in programs.values():
        for _ in range(WARMUP):
            run_version(program)
    samples: dict[str, list[float]] = {name: [] for name in programs}
    for _ in range(runs):
        for name, program in programs.items():
            samples[name].append(run_version(program))
    return {name: stats.summary(values) for name, values in samples.items()}
