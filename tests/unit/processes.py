"""What a test needs to know of a process it started, from /proc."""

from __future__ import annotations

from pathlib import Path


def process_alive(pid: int) -> bool:
    """Whether `pid` runs: it exists and is not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):  # gone, or reaped while being read
        return False
    return state != "Z"
