"""Many pods at once through the daemon, for the burst tests of the e2e and fault tiers: the
burst's sizes, a traced cheap default network under a delegate bound, the spans of the probe's
calls, the gauges scraped meanwhile, and a kill -9 in the middle of a burst."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.e2e.daemon_harness import DaemonNode, Sampler, install_trace, plugin_processes, wait_for
from tests.e2e.harness import DEFAULT_NETWORK, NOTHING, Cluster, Pod, PodProbe, Reply
from tests.netns_fixtures import PLUGIN_DIR

BURST = 100
LIMIT = 4
PROBE_SLEEP = 0.2


def probe_spans(entries: list[PodProbe], command: str) -> dict[str, tuple[int, int]]:
    """container ID -> [start, end] of its one probe call for `command`."""
    starts: dict[str, int] = {}
    spans: dict[str, tuple[int, int]] = {}
    for entry in entries:
        if entry.command != command:
            continue
        if entry.what == "start":
            assert entry.container_id not in starts, f"two probe {command}s for {entry}"
            starts[entry.container_id] = entry.ns
        elif entry.what == "end":
            spans[entry.container_id] = (starts[entry.container_id], entry.ns)
    return spans


class Gauges(Sampler):
    """Scrapes /metrics while a burst runs: the most delegates running and queued seen."""

    def __init__(self, daemon: DaemonNode) -> None:
        super().__init__(every=0.25)
        self.daemon = daemon
        self.running: list[float] = []
        self.queued: list[float] = []

    def sample(self) -> None:
        samples = self.daemon.metrics()
        self.running.append(samples[("netattach_delegates_running", frozenset())])
        self.queued.append(samples[("netattach_delegates_queued", frozenset())])


KILL_BURST = 30


def traced_loopback_default(daemon: DaemonNode, tmp_path: Path) -> tuple[Path, Path]:
    """Configure the daemon for a bounded burst: at most LIMIT delegates at once, the reference
    `loopback` plugin as the default network, run through a wrapper that logs each execution.
    The trace log and a path for the probe's log, both in `tmp_path`."""
    cluster = daemon.cluster
    trace_dir, trace_log, probe_log = tmp_path / "trace", tmp_path / "trace.log", tmp_path / "p.log"
    install_trace(trace_dir, "loopback", trace_log)
    daemon.settings["binDirs"] = [str(trace_dir), str(PLUGIN_DIR), str(cluster.bin)]
    daemon.settings["maxConcurrentDelegates"] = LIMIT
    cluster.write_network_file(
        "00-default.conflist",
        {"cniVersion": "1.0.0", "name": DEFAULT_NETWORK, "plugins": [{"type": "loopback"}]},
    )
    return trace_log, probe_log


def kill_mid_burst_then_del_all(daemon: DaemonNode, pods: list[Pod], log: Path) -> None:
    """SIGKILL the daemon while ADDs of `pods` run, restart it, DEL them all: nothing is left.

    A kill can interrupt an atomic write and leave its temporary; the restarted daemon removes
    those at start, so not even a file may remain.
    """
    cluster = daemon.cluster

    def ended() -> int:
        return sum(1 for p in cluster.probe_log(log) if p.command == "ADD" and p.what == "end")

    with ThreadPoolExecutor(max_workers=len(pods)) as pool:
        futures = [pool.submit(daemon.shim, "ADD", pod) for pod in pods]
        wait_for("a few probe ADDs to end", lambda: ended() >= 4, 30, every=0.01)
        daemon.kill()
        added: list[Reply] = [f.result() for f in futures]

    outcomes = [0 if r.rc == 0 else r.code for r in added]
    assert set(outcomes) <= {0, 11}, [r for r in added if r.rc and r.code != 11]
    assert 11 in outcomes, "the kill came after the burst"
    for reply in added:
        if reply.rc:
            assert str(daemon.socket) in reply.out["msg"], reply
    # Delegates the daemon had started are in their own sessions: they finish on their own.
    cids = {pod.container_id for pod in pods}
    wait_for("orphaned delegates to finish", lambda: not plugin_processes(cids), 30, every=0.1)
    assert cluster.leftovers() != NOTHING

    daemon.start()
    with ThreadPoolExecutor(max_workers=len(pods)) as pool:
        deleted = list(pool.map(lambda pod: daemon.shim("DEL", pod), pods))

    assert [(r.rc, r.out) for r in deleted] == [(0, None)] * len(pods), daemon.log_text()
    assert cluster.leftovers() == NOTHING
    assert "corrupt" not in daemon.log_text()
    assert sorted(p.name for p in (cluster.state / "locks").iterdir()) == []
    assert state_files(cluster) == []


def state_files(cluster: Cluster) -> list[Path]:
    """Every file under the daemon's state directory."""
    return sorted(p for p in cluster.state.rglob("*") if p.is_file())
