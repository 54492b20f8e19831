"""tests/node's node: a real containerd creating pod sandboxes over CRI, `netattach daemon` behind
the shim it installed, and what a test reads back.

    NodeHost     (one per session) the node's "host" network namespace `na-node-*`; a containerd
                 of the tier's own in it (tests/node/containerd.py) with the sandbox image the
                 tier built (tests/node/sandbox_image.py); the daemon socket's fixed path, so the
                 `00-netattach.conflist` every test's daemon installs is the same file
    NodeDaemon   (one per test) tests/e2e's `DaemonNode` pointed at containerd's CNI dirs: the
                 daemon installs its shim into containerd's `bin_dir` and its conflist into its
                 `conf_dir`; the shim it installs is the daemon's default (`--shim` omitted: the
                 static C shim `make venv` builds), the one a node gets
    Feed         the test's pods and NADs, in the directory feed or the in-repo API server
    Kubelet      (one per test) what a kubelet asks containerd for: `run(spec)` a sandbox,
                 `teardown(id)` = StopPodSandbox + RemovePodSandbox, `interfaces(id)` read in the
                 sandbox's network namespace (the path containerd gave the plugins as CNI_NETNS)

Every ADD and DEL in this tier is containerd's; no test calls the shim for them.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from netattach.netns import links, namespace
from tests.e2e.daemon_harness import DaemonNode, free_port_in, wait_for
from tests.e2e.harness import Cluster
from tests.e2e.kube_harness import RemoteKubeApi
from tests.kube import objects
from tests.netns_fixtures import Node, netns_unavailable_reason
from tests.node import containerd, real_node, sandbox_image
from tests.node.containerd import Containerd
from tests.node.cri.client import CriError, SandboxSpec, SandboxStatus

NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"


def require(reason: str | None, what: str) -> None:
    """Skip the test when `reason` says this machine cannot run `what`, or fail it when
    NETATTACH_REQUIRE_NETNS=1 says it must run here; nothing when `reason` is None."""
    if reason is not None:
        if os.environ.get("NETATTACH_REQUIRE_NETNS") == "1":
            pytest.fail(f"NETATTACH_REQUIRE_NETNS=1 but {what} cannot run: {reason}")
        pytest.skip(reason)


def require_real_node() -> None:
    """`require` a real node: network namespaces, the tier's containerd, the built kubelet."""
    reason = (
        netns_unavailable_reason()
        or containerd.unavailable_reason()
        or real_node.unavailable_reason()
    )
    require(reason, "the real node")


@dataclasses.dataclass
class NodeHost:
    node: Node
    base: Path
    containerd: Containerd

    @property
    def daemon_socket(self) -> Path:
        return self.base / "run" / "netattach.sock"

    def network_ready(self) -> bool:
        """containerd's NetworkReady condition: it has loaded a CNI config from its conf_dir."""
        ready, _ = self.containerd.cri.conditions().get("NetworkReady", (False, ""))
        return ready

    def node_links(self) -> list[str]:
        return sorted(name for name in links.read_interfaces(self.node.path) if name != "lo")

    def clear_links(self) -> None:
        """Delete every link of the node namespace but `lo` (a test's bridges and veths)."""
        for name in self.node_links():
            subprocess.run(
                ["ip", "-n", self.node.name, "link", "del", name],
                capture_output=True,
                check=False,
                timeout=30,
            )


@contextlib.contextmanager
def node_host() -> Iterator[NodeHost]:
    """The session's node: its namespace, its containerd with the sandbox image imported."""
    name = f"na-node-{secrets.token_hex(3)}"
    base = Path(tempfile.mkdtemp(prefix="na-n-"))
    path = namespace.create(name)
    containerd: Containerd | None = None
    try:
        links.set_up(path, "lo")
        pause = sandbox_image.build_pause(base / "pause")
        image = sandbox_image.write_image_archive(pause, base / "pause-image.tar")
        containerd = Containerd(base / "containerd", path, image)
        # The shim waits 1 s for a daemon that is not there, not its default 30: the lifecycle
        # tests stop the daemon and want containerd's failure soon. The real-node and cluster
        # tiers run the default (a rolling update's gap is waited out).
        containerd.environ["NETATTACH_SHIM_DAEMON_WAIT"] = "1"
        containerd.start()
        containerd.import_image(base / "pause-image.tar")
        (base / "run").mkdir()
        yield NodeHost(Node(name=name, path=path), base, containerd)
    finally:
        if containerd is not None:
            containerd.close()
        namespace.remove(name)
        shutil.rmtree(base, ignore_errors=True)


class NodeDaemon(DaemonNode):
    """`netattach daemon` for the test's cluster, installing into containerd's CNI dirs."""

    def __init__(self, cluster: Cluster, host: NodeHost) -> None:
        super().__init__(cluster)  # no --shim: the daemon's default, the static C shim
        self.host = host
        self.socket = host.daemon_socket
        self.conf_dir = host.containerd.cni_conf_dir
        self.bin_dir = host.containerd.cni_bin_dir
        self.conflist = self.conf_dir / "00-netattach.conflist"
        self.installed_shim = self.bin_dir / "netattach"
        # a port free where the daemon listens (the node namespace), not in the host's: there
        # the fake API server and containerd's stream server hold ports too
        self.port = free_port_in(host.node.path)
        self.settings.update(
            {
                "daemonSocket": str(self.socket),
                "cniConfDir": str(self.conf_dir),
                "cniBinDir": str(self.bin_dir),
                "metrics": {"address": f"127.0.0.1:{self.port}", "enabled": True},
            }
        )

    def start(self, *, ready: bool = True) -> None:
        """Start the daemon; when `ready`, wait until containerd can run pods through it."""
        self.launch()
        if ready:
            wait_for("/readyz to answer 200", lambda: self.http("/readyz").status == 200, 20.0)
            wait_for("the daemon to accept on its socket", self._accepting, 10.0)
            wait_for("the installed conflist", self.conflist.exists, 10.0)
            wait_for("containerd's NetworkReady", self.host.network_ready, 10.0)

    def _accepting(self) -> bool:
        if not self.alive():
            pytest.fail(f"the daemon exited:\n{self.log_text()}")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            try:
                client.connect(str(self.socket))
            except OSError:
                return False
        return True

    def terminate_quietly(self) -> None:
        """SIGTERM and wait; the socket is gone when this returns."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)


@dataclasses.dataclass(frozen=True, slots=True)
class PodSandbox:
    """A sandbox containerd runs for a pod: its ID and the netns it gave the plugins."""

    id: str
    spec: SandboxSpec
    netns: str


class Kubelet:
    """CRI calls as a kubelet makes them, on the session's containerd."""

    def __init__(self, host: NodeHost) -> None:
        self.host = host
        self.cri = host.containerd.cri
        self.netns_seen: list[str] = []

    def spec(
        self,
        ns: str,
        name: str,
        uid: str,
        networks: str | None = None,
        *,
        annotations: Mapping[str, str] | None = None,
        port_mappings: tuple[tuple[int, int], ...] = (),
    ) -> SandboxSpec:
        """A sandbox config as kubelet writes it: the pod's annotations (the selection among
        them) and the labels kubelet adds."""
        wanted = {"kubernetes.io/config.seen": "2026-11-26T00:00:00Z"}
        wanted.update(annotations or {})
        if networks is not None:
            wanted[NETWORKS_ANNOTATION] = networks
        labels = {
            "io.kubernetes.pod.name": name,
            "io.kubernetes.pod.namespace": ns,
            "io.kubernetes.pod.uid": uid,
        }
        return SandboxSpec(
            name=name,
            namespace=ns,
            uid=uid,
            annotations=wanted,
            labels=labels,
            port_mappings=port_mappings,
        )

    def run(self, spec: SandboxSpec) -> PodSandbox:
        """RunPodSandbox; the sandbox, ready, with its netns."""
        sandbox_id = self.cri.run(spec)
        status = self.cri.status(sandbox_id)
        assert status.ready, status
        assert status.netns, f"containerd reports no netns for {sandbox_id}"
        self.netns_seen.append(status.netns)
        return PodSandbox(sandbox_id, spec, status.netns)

    def run_many(self, specs: Sequence[SandboxSpec]) -> list[PodSandbox]:
        """RunPodSandbox for every spec at once (one thread each), in the specs' order."""
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(specs)) as pool:
            return list(pool.map(self.run, specs))

    def status(self, sandbox: PodSandbox) -> SandboxStatus:
        return self.cri.status(sandbox.id)

    def teardown(self, sandbox_id: str) -> None:
        """StopPodSandbox then RemovePodSandbox, as kubelet does for a deleted pod."""
        self.cri.stop(sandbox_id)
        self.cri.remove(sandbox_id)

    def teardown_many(self, ids: Sequence[str]) -> None:
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(ids)) as pool:
            list(pool.map(self.teardown, ids))

    def sandbox_ids(self) -> list[str]:
        return sorted(sandbox.id for sandbox in self.cri.list())

    def interfaces(self, sandbox: PodSandbox) -> dict[str, links.InterfaceState]:
        """The sandbox's interfaces other than `lo`, read in its netns."""
        found = links.read_interfaces(sandbox.netns)
        return {name: state for name, state in found.items() if name != "lo"}

    def netns_left(self) -> list[str]:
        """Sandbox netns paths containerd made in this test that still exist."""
        return [path for path in self.netns_seen if os.path.exists(path)]

    def remove_all(self) -> None:
        """Every sandbox stopped and removed (a failed test's leftovers); errors ignored."""
        for sandbox_id in self.sandbox_ids():
            with contextlib.suppress(CriError):
                self.teardown(sandbox_id)


class Feed:
    """Where the test's pods and NADs live for the daemon: the directory feed's manifests, or
    the in-repo API server (`api`), behind one small interface so a test runs on both."""

    def __init__(self, daemon: NodeDaemon, api: RemoteKubeApi | None) -> None:
        self.daemon = daemon
        self.api = api
        self.name = "kubernetes" if api is not None else "directory"

    def add_nad(self, ns: str, name: str, config: Mapping[str, object]) -> None:
        if self.api is None:
            self.daemon.cluster.add_nad(ns, name, config)
        elif self.api.get("NetworkAttachmentDefinition", name, ns) is None:
            self.api.create(objects.nad(name, ns, config=dict(config)))

    def add_pod(self, ns: str, name: str, networks: str | None) -> str:
        """A pod on the node selecting `networks`; its UID."""
        if self.api is None:
            uid = str(uuid.uuid4())
            self.daemon.cluster.add_pod(ns, name, uid, networks)
            return uid
        annotations = {NETWORKS_ANNOTATION: networks} if networks is not None else None
        created = self.api.create(
            objects.pod(
                name,
                ns,
                node_name=self.daemon.cluster.node.name,
                annotations=annotations,
                status={"phase": "Pending"},
            )
        )
        return str(created["metadata"]["uid"])


def refusal(call: pytest.ExceptionInfo[CriError]) -> str:
    """The text of a refused CRI call, for matching."""
    return f"{call.value.code}: {call.value.details}"
