"""The shim's start-up: `CNI_COMMAND=VERSION` (answered locally, no daemon), process start to exit.

Every form given is measured in one run, alternating, after WARMUP unrecorded runs each; the
runtime's PATH (`/usr/sbin:/usr/bin:/sbin:/bin`), so the zipapp's `/usr/bin/env python3` finds
the host's python3 as a kubelet's would.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from bench import stats

RUNTIME_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
WARMUP = 3


def run_version(program: Path) -> float:
    """One VERSION call; milliseconds from spawn to exit.

    `posix_spawn` with stdin and stdout on files and a blocking `waitpid`: what is timed is the
    program, not Python's subprocess machinery (pipes, a reader loop), which alone adds ~1 ms.
    """
    with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as stdout:
        stdin.write(json.dumps({"cniVersion": "1.0.0"}).encode())
        stdin.seek(0)
        actions = [
            (os.POSIX_SPAWN_DUP2, stdin.fileno(), 0),
            (os.POSIX_SPAWN_DUP2, stdout.fileno(), 1),
        ]
        env = {"PATH": RUNTIME_PATH, "CNI_COMMAND": "VERSION"}
        t0 = time.perf_counter()
        pid = os.posix_spawn(str(program), [str(program)], env, file_actions=actions)
        _, status = os.waitpid(pid, 0)
        elapsed = (time.perf_counter() - t0) * 1e3
        stdout.seek(0)
        out = stdout.read()
    code = os.waitstatus_to_exitcode(status)
    if code != 0 or b"supportedVersions" not in out:
        raise RuntimeError(f"{program} VERSION failed with {code}: {out!r}")
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
