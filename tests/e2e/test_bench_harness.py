"""`python -m bench --quick`: the benchmark harness as `make bench` runs it, with tiny sizes.

The harness runs in a subprocess, as root, with every scenario: real plugins in real namespaces,
both daemons, the fake API, the thin plugin and a peer meta-plugin (netattach-thin standing in
for Multus, through NETATTACH_BENCH_PEER). Afterwards the JSON must have its shape, and nothing
the run made may be left: no namespace or host link with its tag, no process of it (daemons,
fake API, runner, delegates), no work directory (which held every host-local allocation, record
and cache file, all found empty by the harness before it removed them). Interrupted runs leave
nothing either: SIGINT and SIGTERM are undone by the run itself, SIGKILL by the next run's sweep.

A test that fails or times out stops the run it started (`bench_runs`), so no bench goes on
beside the rest of the suite; every run gets SIGINT at its default, whatever pytest inherited.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bench import breakdown
from bench import guard as guard_mod

from netattach.netns import namespace
from tests.e2e.daemon_harness import RUNTIME_PATH, SHIM_TIMEOUT, DaemonNode, daemon, native_shim
from tests.e2e.harness import ROOT

pytestmark = pytest.mark.netns

__all__ = ["daemon", "native_shim"]  # the fixtures this module uses

RUN_TIMEOUT = 280.0
PEER_TEMPLATE = {
    "cniVersion": "1.0.0",
    "name": "netattach",
    "type": "netattach-thin",
    "settings": {
        "clusterNetwork": "@DEFAULT_NETWORK@",
        "networksDir": "@NETWORKS_DIR@",
        "binDirs": ["@CNI_PATH@"],
        "stateDir": "@STATE_DIR@",
        "feed": {"directory": "@MANIFESTS_DIR@"},
    },
}
CONTENDERS = ["floor", "thick-dir", "thick-kube", "thin", "peer"]
SUMMARY_KEYS = {"n", "min", "p50", "p90", "p99", "max", "mean", "stdev"}
TAG_LINE = re.compile(rb"bench: run ([0-9a-f]{4}):")


def bench_env(tmp_path: Path) -> dict[str, str]:
    template = tmp_path / "peer.json"
    template.write_text(json.dumps(PEER_TEMPLATE))
    return {
        **os.environ,
        "NETATTACH_BENCH_PEER": str(Path(sys.executable).parent / "netattach-thin"),
        "NETATTACH_BENCH_PEER_CONF": str(template),
    }


def default_sigint() -> None:
    """For `preexec_fn`: SIGINT at its default in the run. A suite started in the background
    (`make test &`, a CI job) ignores SIGINT, an ignored signal stays ignored across exec, and
    Python then installs no KeyboardInterrupt handler: the run would never see the SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def bench_runs() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Where a test puts the runs it starts. Any still running at teardown (the test failed or
    timed out) is stopped as an operator would stop it (SIGTERM: the run undoes what it made),
    killed when it does not end, and what it left swept."""
    runs: list[subprocess.Popen[bytes]] = []
    yield runs
    for proc in runs:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate(timeout=30)
    if runs:
        guard_mod.sweep_dead_runs()


def start_run(
    runs: list[subprocess.Popen[bytes]], tmp_path: Path, *options: str, stdout: int
) -> subprocess.Popen[bytes]:
    """`python -m bench OPTIONS` in a subprocess, as `make bench` runs it; put in `runs`."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench", *options],
        cwd=ROOT,
        env=bench_env(tmp_path),
        stdout=stdout,
        stderr=subprocess.PIPE,
        preexec_fn=default_sigint,  # noqa: PLW1509 (one signal call, no locks taken)
    )
    runs.append(proc)
    return proc


def leftovers(tag: str) -> list[str]:
    """What a run with `tag` left: namespaces, host links, processes, its directory and file."""
    marker = f"na-{tag}-"
    found = [f"netns {n}" for n in namespace.names() if marker in n]
    found += [f"link {n}" for n in os.listdir("/sys/class/net") if marker in n]
    work = f"/tmp/na-bench-{tag}"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if work.encode() in cmdline or f"CNI_CONTAINERID={marker}".encode() in environ:
            found.append(f"process {entry.name}: {cmdline[:100]!r}")
    if Path(work).exists():
        found.append(f"directory {work}")
    for path in (guard_mod.STATE_DIR / f"{tag}.json", *guard_mod.STATE_DIR.glob(f".{tag}.*")):
        if path.exists():
            found.append(f"state file {path}")
    return found


def descendants(pid: int) -> set[int]:
    """Every living process below `pid` (daemons, the fake API, the runner, delegates)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        found |= frontier
    return found


def alive(pids: set[int]) -> set[int]:
    living = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            living.add(pid)
    return living


def wait_no_leftovers(tag: str, timeout: float = 20.0) -> list[str]:
    """Leftovers once processes had `timeout` seconds to exit (a SIGTERM from their parent's
    death takes a moment); empty when everything is gone."""
    deadline = time.monotonic() + timeout
    while (found := leftovers(tag)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


def check_summary(where: str, summary: dict[str, Any], n: int) -> None:
    assert set(summary) == SUMMARY_KEYS, where
    assert summary["n"] == n, where
    assert 0 < summary["min"] <= summary["p50"] <= summary["p99"] <= summary["max"], where


@pytest.mark.req("RT-DEL")
@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_quick_run_measures_every_scenario_and_leaves_nothing(
    netns_ready: None, tmp_path: Path, bench_runs: list[subprocess.Popen[bytes]]
) -> None:
    out = tmp_path / "result.json"
    proc = start_run(bench_runs, tmp_path, "--quick", "--output", str(out), stdout=subprocess.PIPE)
    stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT)
    log = stdout.decode(errors="replace") + stderr.decode(errors="replace")
    assert proc.returncode == 0, log
    result = json.loads(out.read_text())

    assert result["cleanup"] == {
        "undo_failures": [],
        "leftovers": [],
        "leaks": [],
        "clean": True,
    }, log
    assert wait_no_leftovers(result["tag"]) == []
    assert re.fullmatch(r"[0-9a-f]{40}", result["git"]["commit"])
    assert result["machine"]["cpus"] >= 1
    assert result["contenders"] == CONTENDERS

    runs = result["options"]["runs"]
    kinds = set(result["latency"])
    assert kinds >= {"bridge", "ptp"}
    assert kinds == {"bridge", "ptp", "macvlan"} or any("macvlan" in n for n in result["notes"])
    first_kind = next(iter(result["latency"]))
    for kind, by_count in result["latency"].items():
        # A pod on the default network only is measured once, with the first kind.
        counts = [c for c in result["options"]["counts"] if c > 0 or kind == first_kind]
        assert list(by_count) == [str(c) for c in counts]
        for count, by_who in by_count.items():
            assert list(by_who) == CONTENDERS
            for who, ops in by_who.items():
                for op in ("add", "del"):
                    check_summary(f"{kind} x{count} {who} {op}", ops[op], runs)
                    assert len(ops["samples_ms"][op]) == runs
            overhead = result["overhead"][kind][count]
            assert list(overhead) == CONTENDERS[1:]
            floor_p50 = by_who["floor"]["add"]["p50"]
            thick = overhead["thick-dir"]
            assert thick["add_p50_ms"] == pytest.approx(
                by_who["thick-dir"]["add"]["p50"] - floor_p50
            )
            assert thick["add_p50_ratio"] == pytest.approx(
                by_who["thick-dir"]["add"]["p50"] / floor_p50
            )

    assert list(result["throughput"]) == [str(n) for n in result["options"]["bursts"]]
    largest = str(max(result["options"]["bursts"]))
    for size, by_who in result["throughput"].items():
        assert set(by_who) == {"floor", "thick-dir", "thick-kube", "peer"}
        for who, burst in by_who.items():
            assert burst["pods"] == int(size)
            assert burst["add_pods_per_s"] > 0
            assert burst["del_pods_per_s"] > 0
            if who.startswith("thick") and size == largest:
                memory = burst["memory_kib"]
                assert memory["peak_hwm"] >= memory["rss_before"] > 0
                assert memory["polls"] > 0

    memory = result["memory"]
    assert memory["pods"] == result["options"]["memory_pods"]
    assert memory["idle"]["rss_kib"] > 0
    assert memory["loaded"]["rss_kib"] > 0
    assert set(result["shim_startup"]) >= {"native", "zipapp", "thin", "bridge"}
    for summary in result["shim_startup"].values():
        check_summary("shim", summary, result["options"]["shim_runs"])

    policy = result["policy"]
    assert policy["policies"] == result["options"]["policies"]
    assert policy["pods_with_table"] > 0
    assert policy["set_elements"] > 0
    assert policy["per_peer_per_port_rules"] >= policy["allow_rules"] > 0

    table = stdout.decode()
    for heading in ("pod ADD/DEL latency", "throughput", "daemon memory", "start-up", "targets"):
        assert heading in table


def start_and_wait_for_latency(
    runs: list[subprocess.Popen[bytes]], tmp_path: Path
) -> tuple[subprocess.Popen[bytes], str]:
    """A full-size run, once it has started measuring latency (everything set up); its tag."""
    output = str(tmp_path / "unused.json")
    proc = start_run(runs, tmp_path, "--output", output, stdout=subprocess.DEVNULL)
    assert proc.stderr is not None
    tag = ""
    seen = b""
    deadline = time.monotonic() + 120
    while b"bench: latency" not in seen:
        assert time.monotonic() < deadline, seen.decode(errors="replace")
        ready, _, _ = select.select([proc.stderr], [], [], 1.0)
        if ready:
            chunk = os.read(proc.stderr.fileno(), 4096)
            assert chunk, f"the run ended early: {seen.decode(errors='replace')}"
            seen += chunk
            match = TAG_LINE.search(seen)
            tag = match.group(1).decode() if match else tag
    assert tag, seen
    assert any(f"na-{tag}-" in n for n in namespace.names())  # it did make things
    return proc, tag


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_run_removes_everything(
    netns_ready: None,
    tmp_path: Path,
    signum: signal.Signals,
    bench_runs: list[subprocess.Popen[bytes]],
) -> None:
    proc, tag = start_and_wait_for_latency(bench_runs, tmp_path)
    time.sleep(1.0)  # somewhere in the middle of a round
    children = descendants(proc.pid)
    assert len(children) >= 4  # two daemons, the fake API, the runner (and their nsenters)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert wait_no_leftovers(tag) == [], err.decode(errors="replace")
    assert alive(children) == set()


def test_killed_run_is_swept_by_the_next(
    netns_ready: None, tmp_path: Path, bench_runs: list[subprocess.Popen[bytes]]
) -> None:
    fake_api_dirs = set(Path(tempfile.gettempdir()).glob("na-kapi-*"))
    proc, tag = start_and_wait_for_latency(bench_runs, tmp_path)
    children = descendants(proc.pid)
    proc.kill()
    proc.communicate(timeout=30)
    assert any(f"na-{tag}-" in n for n in namespace.names()), "SIGKILL leaves namespaces"
    deadline = time.monotonic() + 30
    while alive(children) and time.monotonic() < deadline:  # told by PR_SET_PDEATHSIG
        time.sleep(0.2)
    assert alive(children) == set()
    # (a benchmark starting meanwhile may sweep first: either way, nothing may be left)
    guard_mod.sweep_dead_runs()
    assert wait_no_leftovers(tag) == []
    # The fake API's files were in the run's work directory, swept with it.
    assert set(Path(tempfile.gettempdir()).glob("na-kapi-*")) <= fake_api_dirs


def test_the_traced_daemons_probes_find_what_they_time() -> None:
    """bench.traced_daemon wraps named functions of the daemon: each must still exist (a
    refactor that moves one fails here, not in the middle of `make bench-breakdown`)."""
    done = subprocess.run(
        [sys.executable, "-c", "from bench import traced_daemon; traced_daemon.install(False)"],
        capture_output=True, text=True, check=False, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_breakdown_phases_add_up_to_the_handling_time() -> None:
    """bench.breakdown's exclusive times: each probe's time minus the probes inside it, so a
    request's phases sum to its handler's span (here 10 ms: 1 lock, 6 delegate, of which
    4 in the process, 2 record save, of which 1.5 in fsync)."""
    ms = 1e-3
    spans = [
        ("handle", "ADD:c1", 0.0, 10 * ms),
        ("lock", "ADD:c1", 0.0, 1 * ms),
        ("delegate (with slot wait)", "ADD:c1", 1 * ms, 7 * ms),
        ("delegate process", "ADD:c1", 2 * ms, 6 * ms),
        ("pod record save", "ADD:c1", 7 * ms, 9 * ms),
        ("fsync", "ADD:c1", 7.5 * ms, 9 * ms),
        ("connection", "-", -1 * ms, 11 * ms),
        ("fsync", "-", 3 * ms, 4 * ms),  # no request: the feed's own work
    ]
    phases = breakdown.exclusive_times(spans)
    assert phases["ADD:c1"] == pytest.approx(
        {
            "handle": 1.0,
            "lock": 1.0,
            "delegate (with slot wait)": 2.0,
            "delegate process": 4.0,
            "pod record save": 0.5,
            "fsync": 1.5,
        }
    )
    assert sum(phases["ADD:c1"].values()) == pytest.approx(10.0)
    assert breakdown.connection_overhead(spans) == {"ADD:c1": pytest.approx(2.0)}


# -- found by the benchmark ------------------------------------------------------------------------

BACKLOG_BURST = 160


def listen_queue(daemon: DaemonNode) -> int:
    """Connections waiting in the daemon's accept queue (ss: Recv-Q of the listening socket)."""
    done = subprocess.run(
        ["nsenter", f"--net={daemon.cluster.node.path}", "--", "ss", "-xlH"],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    )
    for line in done.stdout.splitlines():
        fields = line.split()  # Netid State Recv-Q Send-Q Local-Address Port Peer ...
        if str(daemon.socket) in fields:
            return int(fields[2])
    return 0


def test_a_burst_beyond_the_accept_backlog_is_served(daemon: DaemonNode) -> None:
    """`make bench`'s 200-pod burst: ~half the shims failed with 'connect failed: Resource
    temporarily unavailable'. Here the daemon is stopped (SIGSTOP) while 160 shims connect, so
    the backlog fills deterministically; once it runs again, every call must succeed."""
    daemon.start()
    environ = {
        "PATH": RUNTIME_PATH,
        "CNI_COMMAND": "DEL",
        "CNI_IFNAME": "eth0",
        "CNI_PATH": str(daemon.bin_dir),
        "NETATTACH_SHIM_TIMEOUT": SHIM_TIMEOUT,
    }
    stdin = json.dumps(daemon.runtime_config()).encode()
    os.kill(daemon.pid, signal.SIGSTOP)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i in range(BACKLOG_BURST):
            proc = subprocess.Popen(
                ["nsenter", f"--net={daemon.cluster.node.path}", "--", str(daemon.installed_shim)],
                env={**environ, "CNI_CONTAINERID": f"na-burst-{i}"},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            assert proc.stdin is not None
            proc.stdin.write(stdin)
            proc.stdin.close()
            procs.append(proc)
        deadline = time.monotonic() + 120
        # every shim either waits in the accept queue or has given up already
        while listen_queue(daemon) + sum(p.poll() is not None for p in procs) < BACKLOG_BURST:
            assert time.monotonic() < deadline, "the shims did not all reach connect()"
            time.sleep(0.2)
    finally:
        os.kill(daemon.pid, signal.SIGCONT)
    refused = []
    for proc in procs:
        assert proc.stdout is not None
        out = proc.stdout.read()
        if proc.wait(timeout=60) != 0:
            refused.append(out.decode(errors="replace"))
        proc.stdout.close()
        assert proc.stderr is not None
        proc.stderr.close()
    assert refused == [], f"{len(refused)} of {BACKLOG_BURST} refused, e.g. {refused[0]}"


def test_the_api_writes_benchmark_measures_both_ways(capsys: pytest.CaptureFixture[str]) -> None:
    from bench import api_writes

    assert api_writes.main(["--writes", "3", "--gap", "0"]) == 0
    out = capsys.readouterr().out
    for way in ("httpx", "api_writes"):
        line = next(line for line in out.splitlines() if line.split()[:1] == [way])
        wall, cpu = (float(x) for x in re.findall(r"([\d.]+) ms", line))
        assert wall > 0
        assert cpu > 0


@pytest.mark.req("IPAM-FAST")
def test_the_ipam_benchmark_measures_both_halves_and_leaks_nothing() -> None:
    """`make bench-ipam` with tiny sizes: the one-node half (host-local beside netattach's IPAM
    through the shim and the daemon) and the cluster half (simulated nodes on the real API
    server); every address freed, none given twice, the table rendered with its targets."""
    from bench import ipam, ipam_cluster, ipam_node

    result = {"node": ipam_node.measure(2), "cluster": ipam_cluster.measure(3, 30)}
    assert result["node"]["leaks"] == []
    for kind in ("bridge", "ipam"):
        assert result["node"]["latency"][kind]["thick-dir"]["add"]["n"] == 2
    cluster = result["cluster"]
    assert cluster["fill"]["duplicates"] == cluster["steady"]["duplicates"] == 0
    assert cluster["fill"]["claims"] >= 3  # each node a block at least
    assert cluster["steady"]["claims"] == 0  # reuseDelay 0: the blocks held suffice
    assert cluster["fill"]["requests"]["POST"] >= 3
    text, _ = ipam.render(result)
    assert "ADD p50 overhead over host-local" in text
    assert "API requests per allocation, steady" in text


@pytest.mark.req("POL-SPAN")
@pytest.mark.req("POL-CTRL")
def test_the_policy_scale_benchmark_keeps_the_groups_right_and_the_node_to_its_span() -> None:
    """`make bench-policy-scale` with tiny sizes (20 Node objects, 600 pods, 40 policies, 5 s of
    churn on the real API server): the controller's groups equal those computed afresh after the
    churn; the node reading the controller's groups was sent none of the other nodes' pods (the
    groups it reads and the policy edits alone), the
    node watching every pod was sent about every change; every timed policy edit (a peer group
    no node read before, a new ipBlock) reached the governed pod's table in both modes."""
    from bench import policy_span

    result = policy_span.measure(nodes=20, pods=600, policies=40, churn=20.0, seconds=5.0)
    assert result["groups_match"] is True
    assert result["controller"]["groups"] > 0
    spanned, every = result["node_controller"], result["node_allPods"]
    sent = {kind for kind, count in spanned["watch_events"].items() if count}
    assert sent <= {'{kind="PolicyPeerGroup"}', '{kind="MultiNetworkPolicy"}'}, spanned
    edits = result["enforced"]["controller"]["edits"]
    assert spanned["watch_events"]['{kind="MultiNetworkPolicy"}'] == edits, spanned
    assert every["watch_events"].get('{kind="Pod"}', 0) >= result["churn"]["pod_changes"] / 2
    for mode in ("controller", "allPods"):
        assert result["enforced"][mode]["edits"] >= 3, result["enforced"]
