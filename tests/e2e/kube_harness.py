"""The in-repo fake API server inside a node network namespace, driven from the host.

The daemon must run in the test's node namespace (every delegate it runs runs where it runs), and
it dials the API at `127.0.0.1:PORT` of *that* namespace: the fake, which listens on the host's
loopback, is out of its reach, and the host namespace is not the test's to add links to. So the
fake runs in a process of its own inside the node namespace:

    nsenter --net=<node> -- python -m tests.e2e.kube_harness --control <dir>/control.sock

That process holds a `FakeKubeApi` (bearer token, the CRD schemas of deploy/crds), prints the
port it listens on, and answers calls over a Unix socket (a path-named one: unlike TCP and
abstract Unix sockets, it is reachable from every network namespace). The test side is
`RemoteKubeApi.launch(netns)`: each hook of `api.KubeApi` (`create`, `get`, `patch`, `events_for`,
`requests`, `restart`, `stop`, `start`, `compact`, `active_watches`, `wait_for_watches`, ...) is
one request/answer on that socket (`multiprocessing.connection`, authenticated with a random
key); `ApiStatusError` crosses as its `Status` object. Two extras serve the benchmark:
`create_many` (one round trip for a batch) and `http_get` (a GET from inside the node namespace,
e.g. the daemon's /metrics).

The server process ends when asked (`close()`), when its control connection closes, or when the
process that started it dies (PR_SET_PDEATHSIG), so a crashed test leaves no fake behind.
"""

from __future__ import annotations

import argparse
import builtins
import ctypes
import http.client
import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

from tests.e2e.polling import poll
from tests.kube.api import ApiStatusError, Obj, PatchType, RequestRecord, WatchInfo

ROOT = Path(__file__).resolve().parents[2]
AUTHKEY_ENV = "NETATTACH_FAKE_AUTHKEY"
TOKEN_ENV = "NETATTACH_FAKE_TOKEN"
START_TIMEOUT = 30.0
# One call; `restart` sleeps its downtime and `wait_for_watches` its timeout on the server.
CALL_TIMEOUT = 120.0
_PR_SET_PDEATHSIG = 1

# Hook methods forwarded as they are, and properties read as they are.
_METHODS = frozenset(
    {
        "create",
        "get",
        "list",
        "update",
        "patch",
        "delete",
        "events_for",
        "compact",
        "restart",
        "stop",
        "start",
        "set_token",
        "set_bookmark_interval",
        "clear_requests",
        "inject_error",
        "wait_for_watches",
        "kubeconfig_text",
    }
)
_PROPERTIES = frozenset(
    {"resource_version", "requests", "active_watches", "port", "serving", "token"}
)


# -- the server, inside the node namespace --------------------------------------------------------


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def http_get(host: str, port: int, path: str, timeout: float = 10.0) -> dict[str, Any]:
    """GET `path`: {"status": int, "body": str}, or {"error": str} when nothing answered."""
    try:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        try:
            conn.request("GET", path)
            reply = conn.getresponse()
            return {"status": reply.status, "body": reply.read().decode("utf-8", "replace")}
        finally:
            conn.close()
    except OSError as exc:
        return {"error": str(exc) or type(exc).__name__}


def _answer(api: Any, op: str, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[str, Any]:
    try:
        if op in _METHODS:
            return ("ok", getattr(api, op)(*args, **kwargs))
        if op in _PROPERTIES:
            return ("ok", getattr(api, op))
        if op == "create_many":
            created = [api.create(obj) for obj in args[0]]
            return ("ok", [len(json.dumps(obj)) for obj in created])
        if op == "http_get":
            return ("ok", http_get(*args, **kwargs))
        if op == "ping":
            return ("ok", os.getpid())
        return ("error", ("RuntimeError", f"unknown call {op!r}"))
    except ApiStatusError as exc:
        return ("api-error", exc.status)
    except Exception as exc:
        return ("error", (type(exc).__name__, str(exc)))


def serve(control: Path, *, bookmark_interval: float, history_limit: int) -> int:
    from tests.kube.crds import load_crd_schemas
    from tests.kube.fake_api import FakeKubeApi

    _die_with_parent()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    authkey = bytes.fromhex(os.environ[AUTHKEY_ENV])
    api = FakeKubeApi(
        token=os.environ[TOKEN_ENV],
        crd_schemas=load_crd_schemas(),
        bookmark_interval=bookmark_interval,
        history_limit=history_limit,
    )
    api.start()
    listener = Listener(str(control), family="AF_UNIX", authkey=authkey)
    try:
        print(json.dumps({"port": api.port, "pid": os.getpid()}), flush=True)
        with listener.accept() as conn:
            while True:
                try:
                    op, args, kwargs = conn.recv()
                except EOFError:
                    break
                if op == "shutdown":
                    conn.send(("ok", None))
                    break
                conn.send(_answer(api, op, args, kwargs))
    finally:
        listener.close()
        api.stop()
    return 0


# -- the client, in the test ----------------------------------------------------------------------


class RemoteKubeApi:
    """`api.KubeApi` over the control socket of a `FakeKubeApi` in another network namespace."""

    is_fake = True

    def __init__(
        self, proc: subprocess.Popen[bytes], conn: Connection, workdir: Path, port: int
    ) -> None:
        self.proc = proc
        self._conn = conn
        self._workdir = workdir
        self.port = port

    @classmethod
    def launch(
        cls,
        netns: str,
        *,
        bookmark_interval: float = 1.0,
        history_limit: int = 1000,
        parent: Path | None = None,
    ) -> RemoteKubeApi:
        """Start the fake in the network namespace at path `netns`; ready when this returns.
        Its files (control socket, stderr) go to a new directory in `parent` (default: the
        temporary directory): a benchmark puts them in its work directory, which a killed
        run's sweep removes, since `close` never runs then."""
        workdir = Path(tempfile.mkdtemp(prefix="na-kapi-", dir=parent))
        control = workdir / "control.sock"
        authkey = secrets.token_bytes(32)
        proc = subprocess.Popen(
            [
                "nsenter",
                f"--net={netns}",
                "--",
                sys.executable,
                "-m",
                "tests.e2e.kube_harness",
                "--control",
                str(control),
                "--bookmark-interval",
                str(bookmark_interval),
                "--history-limit",
                str(history_limit),
            ],
            cwd=ROOT,
            env={
                "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
                AUTHKEY_ENV: authkey.hex(),
                TOKEN_ENV: secrets.token_urlsafe(24),
            },
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=(workdir / "stderr").open("wb"),
        )
        try:
            assert proc.stdout is not None
            ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT)
            line = proc.stdout.readline() if ready else b""
            if not line:
                raise RuntimeError(
                    "the fake API did not start in the node namespace: "
                    + (workdir / "stderr").read_text(errors="replace")
                )
            port = int(json.loads(line)["port"])
            conn = Client(str(control), family="AF_UNIX", authkey=authkey)
        except BaseException:
            proc.kill()
            proc.wait(10)
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        return cls(proc, conn, workdir, port)

    def close(self) -> None:
        """Stop the fake process (asked, then SIGTERM, then SIGKILL) and remove its files."""
        try:
            if self.proc.poll() is None:
                try:
                    self._conn.send(("shutdown", (), {}))
                    if self._conn.poll(10):
                        self._conn.recv()
                except (OSError, EOFError):
                    pass
            self._conn.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            shutil.rmtree(self._workdir, ignore_errors=True)

    def _call(self, op: str, *args: Any, **kwargs: Any) -> Any:
        self._conn.send((op, args, kwargs))
        if not self._conn.poll(CALL_TIMEOUT):
            raise TimeoutError(f"the fake API did not answer {op} within {CALL_TIMEOUT:g}s")
        outcome, value = self._conn.recv()
        if outcome == "ok":
            return value
        if outcome == "api-error":
            raise ApiStatusError(value)
        kind, message = value
        if kind == "AssertionError":
            raise AssertionError(message)
        raise RuntimeError(f"the fake API failed {op}: {kind}: {message}")

    # -- configuration --------------------------------------------------------------------------

    def kubeconfig_text(self, namespace: str = "default") -> str:
        text: str = self._call("kubeconfig_text", namespace)
        return text

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig for the fake: `server: http://127.0.0.1:PORT`, valid in the node netns."""
        path.write_text(self.kubeconfig_text(), encoding="utf-8")
        return path

    # -- objects --------------------------------------------------------------------------------

    def create(self, obj: Obj) -> Obj:
        created: Obj = self._call("create", obj)
        return created

    def create_many(self, objs: Sequence[Obj]) -> list[int]:
        """Create every object in one round trip; the JSON size of each as stored."""
        sizes: list[int] = self._call("create_many", list(objs))
        return sizes

    def get(self, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        found: Obj | None = self._call("get", kind, name, namespace)
        return found

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> builtins.list[Obj]:
        found: builtins.list[Obj] = self._call(
            "list", kind, namespace, label_selector=label_selector, field_selector=field_selector
        )
        return found

    def update(self, obj: Obj) -> Obj:
        updated: Obj = self._call("update", obj)
        return updated

    def patch(
        self,
        kind: str,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: PatchType = "merge",
    ) -> Obj:
        patched: Obj = self._call("patch", kind, name, patch, namespace, patch_type=patch_type)
        return patched

    def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        self._call("delete", kind, name, namespace)

    def events_for(self, namespace: str, pod: str) -> builtins.list[Obj]:
        events: builtins.list[Obj] = self._call("events_for", namespace, pod)
        return events

    @property
    def resource_version(self) -> str:
        version: str = self._call("resource_version")
        return version

    # -- fake-only hooks ------------------------------------------------------------------------

    def compact(self) -> str:
        version: str = self._call("compact")
        return version

    def restart(self, downtime: float = 0.3, *, wait: bool = True, compact: bool = False) -> None:
        self._call("restart", downtime, wait=wait, compact=compact)

    def stop(self) -> None:
        self._call("stop")

    def start(self) -> None:
        self._call("start")

    @property
    def serving(self) -> bool:
        serving: bool = self._call("serving")
        return serving

    def set_token(self, token: str | None) -> None:
        self._call("set_token", token)

    def set_bookmark_interval(self, seconds: float) -> None:
        self._call("set_bookmark_interval", seconds)

    @property
    def requests(self) -> builtins.list[RequestRecord]:
        records: builtins.list[RequestRecord] = self._call("requests")
        return records

    def clear_requests(self) -> None:
        self._call("clear_requests")

    def inject_error(
        self,
        code: int,
        *,
        method: str | None = None,
        path: str | None = None,
        times: int = 1,
        reason: str | None = None,
        message: str | None = None,
    ) -> None:
        self._call(
            "inject_error",
            code,
            method=method,
            path=path,
            times=times,
            reason=reason,
            message=message,
        )

    @property
    def active_watches(self) -> builtins.list[WatchInfo]:
        watches: builtins.list[WatchInfo] = self._call("active_watches")
        return watches

    def wait_for_watches(
        self, count: int = 1, *, path_contains: str = "", timeout: float = 5.0
    ) -> None:
        self._call("wait_for_watches", count, path_contains=path_contains, timeout=timeout)

    # -- from inside the namespace --------------------------------------------------------------

    def http_get(self, port: int, path: str, *, host: str = "127.0.0.1") -> dict[str, Any]:
        """GET http://host:port/path from inside the node namespace (e.g. the daemon's /readyz):
        {"status": int, "body": str}, or {"error": str} when nothing answered."""
        reply: dict[str, Any] = self._call("http_get", host, port, path)
        return reply


def wait_until(what: str, predicate: Any, timeout: float, *, every: float = 0.05) -> Any:
    """Poll `predicate()` until it is truthy (returned); TimeoutError after `timeout`."""
    return poll(what, predicate, timeout, every, TimeoutError)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the fake Kubernetes API, controlled remotely")
    parser.add_argument("--control", type=Path, required=True)
    parser.add_argument("--bookmark-interval", type=float, default=1.0)
    parser.add_argument("--history-limit", type=int, default=1000)
    args = parser.parse_args(argv)
    return serve(
        args.control, bookmark_interval=args.bookmark_interval, history_limit=args.history_limit
    )


if __name__ == "__main__":
    sys.exit(main())
