"""Everything the benchmark makes, undone and checked, however the run ends.

`Guard` names what a run makes after one random tag (`na-<tag>-...` namespaces and links, a
`/tmp/na-bench-<tag>` work directory, container IDs with the tag), keeps a stack of undo steps
run once, last made first undone, from a `finally`, from `atexit`, and after SIGINT, SIGTERM or
SIGHUP (turned into an exception so every `finally` runs). A file under /run/netattach-bench
lists the run's namespaces and directories with its PID: a run killed with SIGKILL cannot undo
anything, so the next run removes what a dead run's file lists before it starts.

`leftovers()` says what is still there after the undo: namespaces or host links with the tag,
processes started by the run or whose command line or CNI_CONTAINERID carries the tag, the work
directory. The run fails loudly when it is not empty.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

from netattach.netns import namespace

STATE_DIR = Path("/run/netattach-bench")
STOP_GRACE = 15.0
_PR_SET_PDEATHSIG = 1


class Interrupted(BaseException):
    """SIGTERM or SIGHUP arrived: unwind like KeyboardInterrupt does."""


TAGGED_GRACE = 15.0  # seconds a process of the run may take to finish after the run stopped


def die_with_parent() -> None:
    """For `preexec_fn`: SIGTERM this child when the benchmark's main thread dies, even by
    SIGKILL (the daemons are exec'd by nsenter, which keeps the setting). The signals held
    while the child was forked are let through again: an exec keeps the signal mask."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


def stop_process(proc: subprocess.Popen[Any], grace: float = STOP_GRACE) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds; reaped either way."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(grace)


T = TypeVar("T")


def guarded(name: str, measure: Callable[[Guard], T]) -> tuple[T, bool]:
    """`measure` under a fresh `Guard`, everything undone after it however it ends: its value
    and whether the run left nothing behind (what it did is printed, after `name`)."""
    with Guard() as guard:
        try:
            value = measure(guard)
        finally:
            guard.undo()
            left = guard.leftovers()
            if left:
                print(f"{name} left behind: " + "; ".join(left), file=sys.stderr)
    return value, not left


def sweep_dead_runs() -> list[str]:
    """Remove what runs killed with SIGKILL left (their files under STATE_DIR); what went."""
    removed: list[str] = []
    if not STATE_DIR.is_dir():
        return removed
    for path in sorted(STATE_DIR.glob("*.json")):
        try:
            record = json.loads(path.read_text())
            pid = int(record["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _alive(pid):
            continue
        for name in record.get("netns", []):
            if namespace.exists(name):
                namespace.remove(name)
                removed.append(f"netns {name}")
        for directory in record.get("dirs", []):
            if Path(directory).exists():
                shutil.rmtree(directory, ignore_errors=True)
                removed.append(f"dir {directory}")
        path.unlink(missing_ok=True)
    for tmp in STATE_DIR.glob(".*.*.tmp"):  # `_save` of a run killed mid-write
        pid_text = tmp.name.split(".")[-2]
        if pid_text.isdigit() and not _alive(int(pid_text)):
            tmp.unlink(missing_ok=True)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Guard:
    def __init__(self) -> None:
        self.tag = secrets.token_hex(2)
        self.work = Path(f"/tmp/na-bench-{self.tag}")
        self._undo: list[tuple[str, Callable[[], object]]] = []
        self._netns: list[str] = []
        self._dirs: list[str] = []
        self.processes: list[subprocess.Popen[Any]] = []
        self.extra_pids: list[int] = []
        self._record = STATE_DIR / f"{self.tag}.json"
        self._done = False
        self._previous: dict[int, Any] = {}
        self._pid = os.getpid()

    # -- naming ---------------------------------------------------------------------------------

    def name(self, what: str) -> str:
        """`na-<tag>-<what>`: at most 15 bytes, so it also fits an interface name."""
        name = f"na-{self.tag}-{what}"
        if len(name) > 15:
            raise ValueError(f"name {name!r} is longer than 15 bytes")
        return name

    # -- making ---------------------------------------------------------------------------------

    def __enter__(self) -> Guard:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            self._previous[sig] = signal.signal(sig, self._interrupt)
        atexit.register(self.undo)
        # A forked child (pyroute2 forks to open a socket in a namespace) must neither undo
        # this run at its exit nor turn a SIGTERM into an exception.
        os.register_at_fork(after_in_child=self._in_child)
        self.work.mkdir(mode=0o755)
        self._dirs.append(str(self.work))
        self._save()
        self.on_undo(f"remove {self.work}", lambda: self._remove_tree(self.work))
        return self

    def __exit__(self, *exc: object) -> None:
        self.undo()

    def _in_child(self) -> None:
        self._done = True
        for sig in self._previous:
            signal.signal(sig, signal.SIG_DFL)

    def _interrupt(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self._pid:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise Interrupted(f"signal {signal.Signals(signum).name}")

    def on_undo(self, what: str, step: Callable[[], object]) -> None:
        self._undo.append((what, step))

    def netns(self, what: str) -> str:
        """Create the namespace `na-<tag>-<what>` (removed at undo); its path."""
        name = self.name(what)
        with _signals_held():
            self._netns.append(name)
            self._save()
            self.on_undo(f"netns {name}", lambda: self.remove_netns(name))
            return namespace.create(name)

    def remove_netns(self, name: str) -> None:
        namespace.remove(name)
        with contextlib.suppress(ValueError):
            self._netns.remove(name)
            self._save()

    def directory(self, path: Path) -> Path:
        """A directory outside the work directory, removed at undo."""
        path.mkdir(parents=True, exist_ok=True)
        self._dirs.append(str(path))
        self._save()
        self.on_undo(f"remove {path}", lambda: self._remove_tree(path))
        return path

    def _remove_tree(self, path: Path) -> None:
        self._settle()  # nothing of the run may write into it after it is gone
        shutil.rmtree(path, ignore_errors=True)

    def _settle(self) -> None:
        """Let the run's stragglers end (a plugin or netattach-thin its runner started just
        before it was stopped finishes its call on its own), then kill what is left."""
        deadline = time.monotonic() + TAGGED_GRACE
        while (tagged := _tagged_processes(self.tag, str(self.work))) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.1)
        for pid, _ in tagged:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def spawn(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """A long-lived child (stopped at undo, SIGTERMed if the benchmark dies first)."""
        with _signals_held():
            proc: subprocess.Popen[Any] = subprocess.Popen(
                argv,
                preexec_fn=die_with_parent,  # noqa: PLW1509 (one prctl, no locks taken)
                **kwargs,
            )
            self.processes.append(proc)
            self.on_undo(f"stop {argv[-1]} ({proc.pid})", lambda: stop_process(proc))
        return proc

    def _save(self) -> None:
        STATE_DIR.mkdir(mode=0o700, exist_ok=True)
        record = {"pid": os.getpid(), "netns": self._netns, "dirs": self._dirs}
        tmp = STATE_DIR / f".{self.tag}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(record))
        tmp.replace(self._record)

    # -- undoing --------------------------------------------------------------------------------

    def undo(self) -> list[str]:
        """Run every undo step once (last first), past failures; the failures."""
        if self._done or os.getpid() != self._pid:
            return []
        self._done = True
        # a second Ctrl-C must not cut the undo short
        signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in signals}
        failures: list[str] = []
        try:
            while self._undo:
                what, step = self._undo.pop()
                try:
                    step()
                except Exception as exc:
                    failures.append(f"{what}: {type(exc).__name__}: {exc}")
            self._record.unlink(missing_ok=True)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for signum, old in self._previous.items():
                signal.signal(signum, old)
        for failure in failures:
            print(f"bench: cleanup failed: {failure}", file=sys.stderr)
        return failures

    def leftovers(self) -> list[str]:
        """What of this run is still there (empty after a complete undo)."""
        found: list[str] = []
        marker = f"na-{self.tag}-"
        found += [f"netns {n}" for n in namespace.names() if marker in n]
        with contextlib.suppress(OSError):
            found += [f"host link {n}" for n in os.listdir("/sys/class/net") if marker in n]
        for proc in self.processes:
            if proc.poll() is None:
                found.append(f"process {proc.pid} ({proc.args!r})")
        found += [f"process {pid}" for pid in self.extra_pids if _alive(pid)]
        found += [
            f"process {pid} ({text})" for pid, text in _tagged_processes(self.tag, str(self.work))
        ]
        found += [f"directory {d}" for d in self._dirs if Path(d).exists()]
        for path in (self._record, *STATE_DIR.glob(f".{self.tag}.*.tmp")):
            if path.exists():
                found.append(f"state file {path}")
        return found


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP back while something is made and registered for undo,
    so an interruption cannot fall between the two; they are delivered right after."""
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _tagged_processes(tag: str, work: str) -> list[tuple[int, str]]:
    """(pid, command line) of the processes whose command line names the work directory or
    whose CNI_CONTAINERID has the tag (a delegate left running)."""
    found: list[tuple[int, str]] = []
    mine = os.getpid()
    wanted_env = f"-{tag}-".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == mine:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        containers = [v for v in environ.split(b"\0") if v.startswith(b"CNI_CONTAINERID=")]
        if work.encode() in cmdline or any(wanted_env in v for v in containers):
            text = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
            found.append((int(entry.name), text[:120]))
    return found


def wait_gone(pid: int, timeout: float) -> bool:
    """Whether `pid` is gone within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
