"""What the figures were measured on: the machine, the software, the commit."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _first(path: str, key: str) -> str:
    try:
        for line in Path(path).read_text().splitlines():
            name, _, value = line.partition(":" if ":" in line else "=")
            if name.strip() == key:
                return value.strip().strip('"')
    except OSError:
        pass
    return ""


def _run(*argv: str) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except OSError:
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _filesystem(path: Path) -> str:
    """The filesystem type of the mount holding `path` (fsync costs depend on it)."""
    best, kind = "", ""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return ""
    for line in mounts:
        fields = line.split()
        if len(fields) >= 3 and str(path).startswith(fields[1]) and len(fields[1]) > len(best):
            best, kind = fields[1], fields[2]
    return kind


def describe(work: Path) -> dict[str, Any]:
    return {
        "cpu": _first("/proc/cpuinfo", "model name"),
        "cpus": os.cpu_count(),
        "memory_kib": int((_first("/proc/meminfo", "MemTotal") or "0 kB").split()[0]),
        "kernel": platform.release(),
        "os": _first("/etc/os-release", "PRETTY_NAME"),
        "python": sys.version.split()[0],
        "cni_plugins": _run("dpkg-query", "-W", "-f=${Version}", "containernetworking-plugins"),
        "work_filesystem": _filesystem(work),
        "load_average_at_start": list(os.getloadavg()),
    }


def git() -> dict[str, Any]:
    commit = _run("git", "-C", str(ROOT), "rev-parse", "HEAD")
    changed = _run("git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(changed), "changed_files": changed.splitlines()}
