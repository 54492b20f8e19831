"""`netattach daemon` as the benchmark runs it: settings, start, readiness, memory, stop.

Each daemon runs in the benchmark's node namespace (`nsenter --net=<node> -- netattach daemon
--config FILE`; nsenter execs it, so the PID is the daemon's), with its own state directory,
socket and CNI directories under the work directory, metrics on 127.0.0.1:<port> of the node
namespace, and `maxConcurrentDelegates` left at its default.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench import guard as guard_mod
from bench import node as node_mod
from bench import topology

DAEMON = Path(sys.executable).parent / "netattach"
ROOT = Path(__file__).resolve().parent.parent
PLUGIN_DIR = "/usr/lib/cni"
READY_TIMEOUT = 60.0
RUNTIME_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


@dataclasses.dataclass
class Daemon:
    name: str  # "thick-dir", "thick-kube"
    root: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def socket(self) -> Path:
        return self.root / "run" / "netattach.sock"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def log(self) -> Path:
        return self.root / "daemon.log"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


def write_settings(
    daemon: Daemon, topo: topology.Topology, node_name: str, feed: dict[str, Any]
) -> Path:
    settings = {
        "clusterNetwork": topology.DEFAULT_NETWORK,
        "networksDir": str(topo.networks_dir),
        "binDirs": [PLUGIN_DIR],
        "stateDir": str(daemon.state),
        "feed": feed,
        "nodeName": node_name,
        "logLevel": "warning",
        "daemonSocket": str(daemon.socket),
        "cniConfDir": str(daemon.root / "conf"),
        "cniBinDir": str(daemon.root / "bin"),
        "readiness": {"mode": "wait", "timeout": READY_TIMEOUT},
        "metrics": {"enabled": True, "address": f"127.0.0.1:{daemon.port}"},
    }
    path = daemon.root / "daemon.yaml"
    daemon.root.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=2))
    return path


def start(
    guard: guard_mod.Guard,
    daemon: Daemon,
    node_path: str,
    settings: Path,
    runner: node_mod.NodeRunner,
    *,
    extra_env: dict[str, str] | None = None,
    wrapper: list[str] | None = None,
) -> None:
    """Start the daemon; return once it installed its CNI config and its cache synced."""
    argv = ["nsenter", f"--net={node_path}", "--", *(wrapper or [str(DAEMON)])]
    argv += ["daemon", "--config", str(settings)]
    with daemon.log.open("ab") as log:
        daemon.proc = guard.spawn(
            argv,
            cwd=ROOT,  # so that a wrapper such as `python -m bench.traced_daemon` imports bench
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={"PATH": os.environ.get("PATH", RUNTIME_PATH), **(extra_env or {})},
        )
    deadline = time.monotonic() + READY_TIMEOUT
    conflist = daemon.root / "conf" / "00-netattach.conflist"
    while not (conflist.exists() and synced(runner, daemon)):
        if daemon.proc.poll() is not None:
            raise RuntimeError(
                f"{daemon.name} exited with {daemon.proc.returncode}: {daemon.log.read_text()}"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(f"{daemon.name} not ready after {READY_TIMEOUT:g}s")
        time.sleep(0.05)


def synced(runner: node_mod.NodeRunner, daemon: Daemon) -> bool:
    reply = runner.http(daemon.port, "/metrics")
    if reply.get("status") != 200:
        return False
    return any(
        line.split() == ["netattach_cache_synced", "1.0"]
        for line in str(reply.get("body", "")).splitlines()
    )


def stop(daemon: Daemon) -> None:
    if daemon.proc is not None:
        guard_mod.stop_process(daemon.proc)


def problems_logged(daemon: Daemon) -> list[str]:
    """ERROR lines and tracebacks in the daemon's log."""
    if not daemon.log.exists():
        return []
    return [
        line
        for line in daemon.log.read_text(errors="replace").splitlines()
        if " ERROR " in line or "Traceback" in line
    ]


# -- memory -----------------------------------------------------------------------------------


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of `pid`, in KiB."""
    found: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0])
    return found


def reset_peak(pid: int) -> None:
    """Reset VmHWM to the current RSS (proc(5): clear_refs, value 5)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


class RssPoller:
    """Polls a process's VmRSS on a thread; `peak_kib` is the most seen."""

    def __init__(self, pid: int, every: float = 0.02) -> None:
        self.pid = pid
        self.every = every
        self.peak_kib = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                rss = memory(self.pid)["VmRSS"]
            except (OSError, KeyError):
                return
            self.peak_kib = max(self.peak_kib, rss)
            self.samples += 1
            self._stop.wait(self.every)

    def __enter__(self) -> RssPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
