"""What a test needs to know of a process it started, from /proc."""

from __future__ import annotations

import time
from pathlib import Path


def process_alive(pid: int) -> bool:
    """Whether `pid` runs: it exists and is not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):  # gone, or reaped while being read
        return False
    return state != "Z"


def check_gone_with_its_child(pids: Path) -> None:
    """The plugin's shell and the child it started, their pids written to `pids` (child first),
    are both gone within 5 s: a killed plugin leaves nothing running."""
    child, shell = (int(p) for p in pids.read_text().split())
    deadline = time.monotonic() + 5
    while (process_alive(child) or process_alive(shell)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process_alive(child), "the plugin's child survived the timeout"
    assert not process_alive(shell)
