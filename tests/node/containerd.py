"""A containerd of the test's own, for tests/node: never the host's socket, root or state.

`Containerd(base, netns)` lays out under `base`: `config.toml`, `root/`, `state/`, the gRPC
socket `containerd.sock`, the CRI plugin's CNI `bin_dir` (`cni/bin`, holding `loopback`, which
containerd runs for every sandbox's `lo`) and `conf_dir` (`cni/net.d`, where `netattach daemon`
installs `00-netattach.conflist`), and the log. The process runs in the network namespace
`netns` (the tier's stand-in for the node's host network), with a kubelet's PATH.

    start()     launch; wait until CRI Version answers
    stop()      SIGTERM (SIGKILL after a grace); the sandboxes' shims keep running, as on a node
                where containerd restarts
    restart()   stop() then start() on the same root and state
    ctr(...)    the `ctr` command on this containerd's socket
    close()     remove every sandbox through CRI, stop, end the shims left (by PID, those whose
                command line names this socket), unmount what is left under root and state, and
                the netns of any sandbox whose teardown failed

Settings that matter (docs in reference/real-world.md): `restrict_oom_score_adj = true` (root on
these VMs lacks CAP_SYS_RESOURCE: runc would fail every sandbox), runc's state under our `state`
(its default is /run/containerd/runc), the sandbox image the tier built.

containerd 1.6 puts its shims' sockets under `/run/containerd/s/<hash of our socket path>`
whatever the config says; each shim removes its own when it exits, and `close()` removes the
directories again when this containerd made them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from tests.node.cri.client import CriError, RuntimeClient

RUNTIME_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
START_TIMEOUT = 60.0
STOP_GRACE = 15.0
CNI_PLUGINS = Path(os.environ.get("NETATTACH_TEST_CNI_PATH", "/usr/lib/cni"))
K8S_NAMESPACE = "k8s.io"
DEFAULT_STATE = Path("/run/containerd")


def _toml(value: str | bool | int) -> str:
    """A TOML scalar; a JSON string is a valid TOML basic string."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(value)


def _table(name: str, values: dict[str, str | bool | int]) -> str:
    lines = [f"[{name}]"] + [f"  {key} = {_toml(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"


def unavailable_reason() -> str | None:
    """Why this machine cannot run the tier's containerd, or None."""
    if os.geteuid() != 0:
        return "tests/node needs root"
    for tool in ("containerd", "ctr", "runc", "containerd-shim-runc-v2", "gcc", "nsenter"):
        if shutil.which(tool, path=RUNTIME_PATH) is None:
            return f"{tool} is not installed (scripts/install-deps.sh installs it)"
    if not (CNI_PLUGINS / "loopback").exists():
        return f"the reference CNI plugins are not in {CNI_PLUGINS} (containernetworking-plugins)"
    return None


class Containerd:
    def __init__(self, base: Path, netns: str, sandbox_image: str) -> None:
        self.base = base
        self.netns = netns
        self.sandbox_image = sandbox_image
        self.root = base / "root"
        self.state = base / "state"
        self.socket = base / "containerd.sock"
        self.cni_bin_dir = base / "cni" / "bin"
        self.cni_conf_dir = base / "cni" / "net.d"
        self.config = base / "config.toml"
        self.log = base / "containerd.log"
        self.runc_root = self.state / "runc"
        # nsenter's namespace options: where containerd runs (a real node's mount namespace too)
        self.enter = [f"--net={netns}"]
        self.proc: subprocess.Popen[bytes] | None = None
        # containerd's environment, which the CNI plugins it runs (the shim) inherit
        self.environ = {"PATH": RUNTIME_PATH}
        # containerd 1.6 puts shim sockets in /run/containerd/s whatever its config says: made
        # by us when missing, removed again at close when empty
        self.made_default_state = not DEFAULT_STATE.exists()
        for directory in (self.root, self.state, self.cni_bin_dir, self.cni_conf_dir):
            directory.mkdir(parents=True, exist_ok=True)
        loopback = self.cni_bin_dir / "loopback"
        if not loopback.exists():
            shutil.copy2(CNI_PLUGINS / "loopback", loopback)
        self.config.write_text(self.render_config())
        self.cri = RuntimeClient(self.socket)

    def render_config(self) -> str:
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        runc = f"{cri}.containerd.runtimes.runc"
        return "".join(
            [
                "version = 2\n",
                f"root = {_toml(str(self.root))}\n",
                f"state = {_toml(str(self.state))}\n",
                "oom_score = 0\n\n",
                _table("grpc", {"address": str(self.socket)}),
                _table("ttrpc", {"address": f"{self.socket}.ttrpc"}),
                _table("debug", {"level": "info"}),
                _table('plugins."io.containerd.internal.v1.opt"', {"path": str(self.root / "opt")}),
                _table(
                    cri,
                    {
                        "sandbox_image": self.sandbox_image,
                        "restrict_oom_score_adj": True,
                        "disable_apparmor": True,
                        "enable_selinux": False,
                        "stream_server_address": "127.0.0.1",
                        "stream_server_port": "0",
                    },
                ),
                _table(
                    f"{cri}.cni",
                    {
                        "bin_dir": str(self.cni_bin_dir),
                        "conf_dir": str(self.cni_conf_dir),
                        "max_conf_num": 1,
                    },
                ),
                _table(
                    f"{cri}.containerd",
                    {"snapshotter": "overlayfs", "default_runtime_name": "runc"},
                ),
                _table(runc, {"runtime_type": "io.containerd.runc.v2"}),
                _table(
                    f"{runc}.options",
                    {
                        "BinaryName": "runc",
                        "Root": str(self.runc_root),
                        "SystemdCgroup": False,
                    },
                ),
            ]
        )

    # -- the process ------------------------------------------------------------------------------

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, "containerd is running"
        with self.log.open("ab") as stream:
            self.proc = subprocess.Popen(
                [
                    "nsenter",
                    *self.enter,
                    "--",
                    "containerd",
                    "--config",
                    str(self.config),
                ],
                stdin=subprocess.DEVNULL,
                stdout=stream,
                stderr=subprocess.STDOUT,
                env=self.environ,
                cwd=self.base,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"containerd exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            if self.socket.is_socket():
                try:
                    self.cri.version(timeout=5)
                    return
                except CriError:
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"containerd did not answer CRI within {START_TIMEOUT:g}s:\n{self.log_tail()}"
                )
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(STOP_GRACE)

    def restart(self) -> None:
        self.stop()
        self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def ctr(self, *args: str, timeout: float = 120.0, namespace: str = K8S_NAMESPACE) -> str:
        """`ctr --address SOCKET -n NAMESPACE ARGS`; its stdout, or RuntimeError with its
        stderr."""
        done = subprocess.run(
            ["ctr", "--address", str(self.socket), "--namespace", namespace, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={"PATH": RUNTIME_PATH},
        )
        if done.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

    def import_image(self, archive: Path) -> None:
        self.ctr("images", "import", str(archive))

    # -- teardown ---------------------------------------------------------------------------------

    def remove_sandboxes(self) -> list[str]:
        """Stop and remove every sandbox (errors ignored); the netns paths of those that could
        not be removed (their DEL failed: containerd keeps them, and their netns)."""
        try:
            found = self.cri.list(timeout=30)
        except CriError:
            return []
        kept: list[str] = []
        for sandbox in found:
            netns = None
            with contextlib.suppress(CriError):
                netns = self.cri.status(sandbox.id, timeout=30).netns
            try:
                self.cri.stop(sandbox.id, timeout=60)
                self.cri.remove(sandbox.id, timeout=60)
            except CriError:
                if netns:
                    kept.append(netns)
        return kept

    def shim_pids(self) -> list[int]:
        """PIDs of the shims serving this containerd (their command line names its socket)."""
        wanted = str(self.socket).encode()
        found: list[int] = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"containerd-shim-runc-v2") and wanted in argv:
                found.append(int(entry.name))
        return found

    def mounts(self) -> list[str]:
        """Mount points under root or state, deepest first."""
        prefixes = (str(self.root) + "/", str(self.state) + "/")
        found: list[str] = []
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(prefixes):
                found.append(point)
        return sorted(found, key=len, reverse=True)

    def close(self) -> None:
        kept: list[str] = []
        try:
            if self.alive():
                kept = self.remove_sandboxes()
        finally:
            self.stop()
            self.cri.close()
            for pid in self.shim_pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            for point in self.mounts():
                subprocess.run(["umount", "-l", point], check=False, timeout=30)
            for netns in kept:  # containerd's mount of a sandbox it could not tear down
                subprocess.run(["umount", netns], capture_output=True, check=False, timeout=30)
                with contextlib.suppress(OSError):
                    os.unlink(netns)
            shutil.rmtree(self.base, ignore_errors=True)
            if self.made_default_state:
                for directory in (DEFAULT_STATE / "s", DEFAULT_STATE):
                    with contextlib.suppress(OSError):
                        directory.rmdir()
