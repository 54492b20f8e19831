"""Test programs in C built static (`gcc -static`): they run in any container, whatever its libc."""

from __future__ import annotations

import subprocess
from pathlib import Path

CFLAGS = ("-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-static")


def build(source: Path, out: Path) -> Path:
    """`source` compiled into `out`; a failure names the compiler's complaint."""
    done = subprocess.run(
        ["gcc", *CFLAGS, "-o", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"gcc could not build {source.name}:\n{done.stderr}")
    return out
