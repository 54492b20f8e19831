"""The node daemon end to end: `netattach daemon` in the test's node namespace, and its shim.

`DaemonNode` builds on the thin plugin's `Cluster` (tests/e2e/harness.py): the same manifests,
networks, state and host-local directories, node namespace and probe plugin. It adds what thick
mode needs:

    settings      the cluster's settings plus the daemon's keys, written as YAML: the directory
                  feed is the cluster's manifests dir; daemonSocket, cniConfDir and cniBinDir
                  live under a short directory of /tmp (sun_path is 107 bytes at most); metrics
                  listen on 127.0.0.1:<port> *inside the node namespace*
    start()       `nsenter --net=<node> .venv/bin/netattach daemon --config FILE`, so every
                  delegate the daemon runs is in the node namespace too; waits for the socket
                  and (unless told not to) for /readyz to answer 200, then checks that what the
                  daemon put in cniBinDir is the shim it was meant to install
    stop()/kill() SIGTERM (then SIGKILL after a grace period) / SIGKILL; the fixture always stops
                  the daemon at teardown, whatever the test did
    shim()        one CNI call as the container runtime makes it: the *installed* shim
                  (`cniBinDir/netattach`, what the daemon copied there) run inside the node
                  namespace with `CNI_*` in its environment and, on stdin, the plugin config of
                  the installed `00-netattach.conflist` with the list's `name` and `cniVersion`
                  injected (libcni's view of a one-plugin list)
    http()        GET on the metrics listener, from inside the node namespace

The shim is what the daemon installs on a node (RT-INSTALLED): with no `--shim`, the static C
program built with the package (`shim_install.NATIVE_SHIM`, which `make venv` builds in place and
the `native_shim` fixture rebuilds when its source is newer), copied into cniBinDir by the daemon
itself. A test of another form names it (`DaemonNode(cluster, shim=...)`, the daemon's `--shim`):
the zipapp of `scripts/build-shim.sh zipapp` (`shim_zipapp`), whose `#!/usr/bin/env python3` runs
on the runtime's PATH, a kubelet's (`/usr/sbin:/usr/bin:/sbin:/bin`): the host's python3, not the
venv's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Self

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from netattach.daemon import shim_install
from tests.e2e.harness import CALL_TIMEOUT, ROOT, Cluster, Pod, Reply
from tests.e2e.polling import poll
from tests.netns_fixtures import PLUGIN_DIR

DAEMON = ROOT / ".venv" / "bin" / "netattach"
BUILD_SCRIPT = ROOT / "scripts" / "build-shim.sh"
SHIM_NAME = "netattach"
NATIVE_SOURCES = (ROOT / "src" / "netattach" / "shim" / "netattach-shim.c", BUILD_SCRIPT)
CONFLIST_NAME = "00-netattach.conflist"
# A kubelet's PATH: `/usr/bin/env python3` in a zipapp's shebang finds the host's python3.
RUNTIME_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
# The shim's whole exchange with the daemon, bounded well below the call timeout.
SHIM_TIMEOUT = "45"
# No wait for an absent daemon (the shim's default is 30 s): the tests of a daemon that is down
# want the shim's answer at once; `DaemonNode.shim(daemon_wait=None)` is the default's test.
SHIM_DAEMON_WAIT = "0"
START_TIMEOUT = 20.0
STOP_GRACE = 10.0
POLL = 0.05


def wait_for(what: str, predicate: Any, timeout: float, *, every: float = POLL) -> Any:
    """Poll `predicate()` until it returns something truthy (returned); fail after `timeout`."""
    return poll(what, predicate, timeout, every, pytest.fail.Exception)


def python_in(netns: str, code: str, *args: str) -> list[str]:
    """The command that runs the Python `code` (its `sys.argv[1:]` being `args`) with this
    interpreter, isolated from the environment and site-packages, in the network namespace
    `netns`."""
    return ["nsenter", f"--net={netns}", "--", sys.executable, "-I", "-S", "-c", code, *args]


def free_port_in(netns: str) -> int:
    """A TCP port free on 127.0.0.1 of the network namespace `netns`: where the daemon listens
    for metrics, a port free on the host may be the in-node fake API server's, whose /readyz
    would then pass for the daemon's."""
    done = subprocess.run(
        python_in(
            netns,
            "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); "
            "print(s.getsockname()[1])",
        ),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return int(done.stdout)


# A GET from inside a namespace: `nsenter --net=NODE python -I -S -c HTTP_GET HOST PORT PATH`
# prints {"status": int, "body": str} or {"error": str}.
HTTP_GET = """\
import http.client, json, sys
host, port, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request("GET", path)
    reply = conn.getresponse()
    print(json.dumps({"status": reply.status, "body": reply.read().decode("utf-8", "replace")}))
except OSError as exc:
    print(json.dumps({"error": str(exc)}))
"""


@dataclasses.dataclass(frozen=True, slots=True)
class HttpReply:
    status: int  # 0 when nothing answered
    body: str


class DaemonNode:
    """A `netattach daemon` for `cluster`, with its socket, CNI dirs and installed shim."""

    def __init__(self, cluster: Cluster, shim: Path | None = None) -> None:
        """`shim`: the file `--shim` names, for a test of that option or of a form the daemon
        does not pick by itself (the zipapp); None, as on a node: the daemon installs its
        default, the static C shim."""
        self.cluster = cluster
        self.named_shim = shim
        self.root = Path(tempfile.mkdtemp(prefix="na-d-"))
        self.socket = self.root / "run" / "netattach.sock"
        self.conf_dir = self.root / "net.d"
        self.bin_dir = self.root / "bin"
        self.conflist = self.conf_dir / CONFLIST_NAME
        self.installed_shim = self.bin_dir / SHIM_NAME
        self.settings_path = cluster.root / "daemon.yaml"
        self.port = free_port_in(cluster.node.path)
        self.settings: dict[str, Any] = {
            **json.loads(json.dumps(cluster.settings)),
            "logLevel": "info",
            "daemonSocket": str(self.socket),
            "cniConfDir": str(self.conf_dir),
            "cniBinDir": str(self.bin_dir),
            "readiness": {"mode": "wait", "timeout": 60},
            "metrics": {"address": f"127.0.0.1:{self.port}", "enabled": True},
            "cleanupOnExit": False,
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.logs: list[Path] = []

    # -- the process ----------------------------------------------------------------------------

    def start(self, *, ready: bool = True) -> None:
        """Start the daemon; wait for its socket and, when `ready`, for /readyz to say 200."""
        self.launch()
        if ready:
            wait_for("/readyz to answer 200", lambda: self.http("/readyz").status == 200, 10.0)
            # Ready means installed: every later call of shim() runs the daemon's copy of it.
            assert self.installed_shim.read_bytes() == self.shim_source.read_bytes(), (
                f"{self.installed_shim} is not the shim the daemon was to install"
                f" ({self.shim_source})"
            )

    def launch(self) -> None:
        """Write the settings, run the daemon in the node namespace (its output to a log of its
        own), and wait for its socket."""
        assert self.proc is None or self.proc.poll() is not None, "the daemon is running"
        self.settings_path.write_text(yaml.safe_dump(self.settings, sort_keys=False))
        log = self.cluster.root / f"daemon-{len(self.logs)}.log"
        self.logs.append(log)
        with log.open("wb") as stream:
            self.proc = subprocess.Popen(
                [
                    "nsenter",
                    f"--net={self.cluster.node.path}",
                    "--",
                    str(DAEMON),
                    "daemon",
                    "--config",
                    str(self.settings_path),
                    *([] if self.named_shim is None else ["--shim", str(self.named_shim)]),
                ],
                stdin=subprocess.DEVNULL,
                stdout=stream,
                stderr=subprocess.STDOUT,
                env={"PATH": os.environ.get("PATH", RUNTIME_PATH)},
            )
        wait_for("the daemon's socket", self._serving, START_TIMEOUT)

    @property
    def shim_source(self) -> Path:
        """The file the daemon copies to cniBinDir/netattach: the one named, else the static C
        shim built with the package."""
        return self.named_shim or shim_install.NATIVE_SHIM

    def _serving(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            pytest.fail(f"the daemon exited with {self.proc.returncode}:\n{self.log_text()}")
        return self.socket.is_socket()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_exit(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self, grace: float = STOP_GRACE) -> int | None:
        """SIGTERM, SIGKILL after `grace` seconds; the exit status (-9 when it took SIGKILL,
        None when never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait(STOP_GRACE)

    def kill(self) -> None:
        """SIGKILL: no cleanup of any kind runs (the socket file stays behind)."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(STOP_GRACE)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def log_text(self) -> str:
        return "".join(path.read_text(errors="replace") for path in self.logs if path.exists())

    # -- CNI calls through the installed shim ---------------------------------------------------

    def fallback_config(self) -> dict[str, Any]:
        """The shim's config when no conflist is installed: the socket and nothing else."""
        return {
            "cniVersion": "1.0.0",
            "name": "netattach",
            "type": SHIM_NAME,
            "daemonSocket": str(self.socket),
        }

    def runtime_config(self) -> dict[str, Any]:
        """What libcni hands the one plugin of the installed conflist: the plugin's config with
        the list's name and cniVersion injected."""
        raw = json.loads(self.conflist.read_text())
        (plugin,) = raw["plugins"]
        assert isinstance(plugin, dict)
        return {**plugin, "name": raw["name"], "cniVersion": raw["cniVersion"]}

    def shim(
        self,
        command: str,
        pod: Pod | None = None,
        *,
        ifname: str = "eth0",
        program: Path | None = None,
        config: Mapping[str, Any] | None = None,
        daemon_wait: str | None = SHIM_DAEMON_WAIT,
    ) -> Reply:
        """One CNI call of the shim `program` (the installed one by default) in the node
        namespace; its stdin is `config`, else the installed conflist's plugin config.
        `daemon_wait`: its NETATTACH_SHIM_DAEMON_WAIT (None: the shim's default, 30 s)."""
        environ = {
            "PATH": RUNTIME_PATH,
            "CNI_COMMAND": command,
            "CNI_PATH": str(self.bin_dir),
            "NETATTACH_SHIM_TIMEOUT": SHIM_TIMEOUT,
        }
        if daemon_wait is not None:
            environ["NETATTACH_SHIM_DAEMON_WAIT"] = daemon_wait
        if pod is not None:
            environ["CNI_CONTAINERID"] = pod.container_id
            environ["CNI_NETNS"] = pod.netns
            environ["CNI_IFNAME"] = ifname
            environ["CNI_ARGS"] = ";".join(
                [
                    "IgnoreUnknown=1",
                    f"K8S_POD_NAMESPACE={pod.ns}",
                    f"K8S_POD_NAME={pod.name}",
                    f"K8S_POD_INFRA_CONTAINER_ID={pod.container_id}",
                    f"K8S_POD_UID={pod.uid}",
                ]
            )
        stdin = dict(config) if config is not None else self.runtime_config()
        proc = subprocess.run(
            [
                "nsenter",
                f"--net={self.cluster.node.path}",
                "--",
                str(program or self.installed_shim),
            ],
            input=json.dumps(stdin).encode(),
            env=environ,
            capture_output=True,
            timeout=CALL_TIMEOUT,
            check=False,
        )
        text = proc.stdout.decode()
        try:
            out = json.loads(text) if text.strip() else None
        except ValueError:
            pytest.fail(f"the shim printed no JSON (exit {proc.returncode}): {text!r}")
        return Reply(rc=proc.returncode, out=out, stderr=proc.stderr.decode(errors="replace"))

    # -- metrics and health -----------------------------------------------------------------------

    def http(self, path: str) -> HttpReply:
        """GET `path` on the metrics listener, from inside the node namespace."""
        proc = subprocess.run(
            python_in(self.cluster.node.path, HTTP_GET, "127.0.0.1", str(self.port), path),
            capture_output=True,
            timeout=30,
            check=True,
        )
        raw = json.loads(proc.stdout)
        if "error" in raw:
            return HttpReply(0, str(raw["error"]))
        return HttpReply(int(raw["status"]), str(raw["body"]))

    def metrics(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        """Every sample of /metrics: (name, labels) -> value."""
        reply = self.http("/metrics")
        assert reply.status == 200, reply
        samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for family in text_string_to_metric_families(reply.body):
            for sample in family.samples:
                samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
        return samples

    def requests(self, command: str, code: str) -> float | None:
        """`netattach_cni_requests_total{command=..., code=...}`, None when never counted."""
        key = ("netattach_cni_requests_total", frozenset({("command", command), ("code", code)}))
        return self.metrics().get(key)


def native_shim_stale() -> str | None:
    """Why the static C shim the daemon would install is not the one its sources build (None
    when it is): missing, or older than netattach-shim.c or the build script (make's rule)."""
    native = shim_install.NATIVE_SHIM
    if not (native.is_file() and os.access(native, os.X_OK)):
        return f"{native} is not built"
    built = native.stat().st_mtime
    newer = [source.name for source in NATIVE_SOURCES if source.stat().st_mtime > built]
    return f"{', '.join(newer)} changed since {native} was built" if newer else None


@pytest.fixture(scope="session")
def native_shim() -> Path:
    """The static C shim the daemon installs when `--shim` names none, as it is on a node: built
    in place as `make venv` builds it (`scripts/build-shim.sh native`) when it is missing or
    older than its sources, so the tiers never run a shim other than the one src/ makes."""
    stale = native_shim_stale()
    if stale is not None:
        done = subprocess.run(
            ["bash", str(BUILD_SCRIPT), "native", str(shim_install.NATIVE_SHIM)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            pytest.fail(
                f"{stale}; scripts/build-shim.sh native failed:\n{done.stdout}{done.stderr}"
            )
    assert shim_install.NATIVE_SHIM.read_bytes().startswith(b"\x7fELF")
    return shim_install.NATIVE_SHIM


@pytest.fixture(scope="session")
def shim_zipapp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shim as a zipapp, built once per session from src/ (tests of that form name it)."""
    out = tmp_path_factory.mktemp("shim") / "netattach-shim.pyz"
    done = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "zipapp", str(out)],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"scripts/build-shim.sh zipapp failed:\n{done.stdout}{done.stderr}")
    return out


@pytest.fixture
def daemon(cluster: Cluster, native_shim: Path) -> Iterator[DaemonNode]:
    """A daemon for the test's cluster, not started yet, installing the static C shim as on a
    node; always stopped at teardown."""
    node = DaemonNode(cluster)
    try:
        yield node
    finally:
        node.close()


# -- watching files and processes ------------------------------------------------------------


class Sampler:
    """Calls `sample()` on a thread of its own every `every` seconds while a `with` block runs,
    to watch something while the block drives the daemon."""

    def __init__(self, every: float) -> None:
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        raise NotImplementedError

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


class FileWatcher(Sampler):
    """Reads `paths` in a loop and keeps every distinct content seen, to show that a reader
    never finds a file half-written (KUBE-INSTALL)."""

    def __init__(self, *paths: Path) -> None:
        super().__init__(every=0.001)
        self.paths = paths
        self.seen: dict[Path, set[bytes]] = {path: set() for path in paths}
        self.reads = 0

    def sample(self) -> None:
        for path in self.paths:
            with contextlib.suppress(FileNotFoundError):
                self.seen[path].add(path.read_bytes())
                self.reads += 1


def plugin_processes(container_ids: set[str]) -> list[int]:
    """PIDs of processes whose CNI_CONTAINERID is one of `container_ids` (delegates of ours,
    e.g. left running by a daemon killed with SIGKILL)."""
    found: list[int] = []
    wanted = {f"CNI_CONTAINERID={cid}".encode() for cid in container_ids}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if wanted.intersection(environ.split(b"\0")):
            found.append(int(entry.name))
    return found


# A transparent wrapper for a real plugin: logs `<monotonic ns> start|end <command> <container>
# <ifname> <pid>` around running it, so a test sees every execution of that plugin.
TRACE_SOURCE = """\
#!{python} -IS
import os, subprocess, sys, time
def note(what):
    with open({log!r}, "a") as stream:
        stream.write("%d %s %s %s %s %d\\n" % (
            time.monotonic_ns(), what, os.environ.get("CNI_COMMAND") or "-",
            os.environ.get("CNI_CONTAINERID") or "-", os.environ.get("CNI_IFNAME") or "-",
            os.getpid()))
note("start")
done = subprocess.run([{real!r}], input=sys.stdin.buffer.read(), capture_output=True)
note("end")
sys.stdout.buffer.write(done.stdout)
sys.stderr.buffer.write(done.stderr)
sys.exit(done.returncode)
"""


def install_trace(directory: Path, plugin: str, log: Path) -> None:
    """`directory/plugin`: the reference plugin of that name, traced to `log`."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / plugin
    path.write_text(
        TRACE_SOURCE.format(python=sys.executable, log=str(log), real=str(PLUGIN_DIR / plugin))
    )
    path.chmod(0o755)


def trace_spans(log: Path) -> list[tuple[int, int]]:
    """The [start, end] of every traced execution in `log` (paired by PID)."""
    starts: dict[str, int] = {}
    spans: list[tuple[int, int]] = []
    for line in log.read_text().splitlines():
        stamp, what, _command, _cid, _ifname, pid = line.split()
        if what == "start":
            starts[pid] = int(stamp)
        else:
            spans.append((starts.pop(pid), int(stamp)))
    assert starts == {}, f"traced executions that never ended: {starts}"
    return spans


def most_at_once(spans: list[tuple[int, int]]) -> int:
    """The largest number of [start, end] intervals covering one instant (an end at the same
    nanosecond as another's start does not overlap it)."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    current = best = 0
    for _, step in events:
        current += step
        best = max(best, current)
    return best
