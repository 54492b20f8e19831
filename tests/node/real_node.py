"""A real Kubernetes node for tests/node: the kubelet and containerd `make k8s` and Debian give,
registered with the real API server of tests/kube/cluster.py, running deploy/'s DaemonSet.

    real_node(directory)   everything below started, in order; stopped and removed on exit,
                           whatever failed, each step undoing only what it made

The parts, all named `na-...`:

- `NodeControlPlane`: tests/kube/cluster.py's `LocalCluster` (etcd, kube-apiserver on the host's
  127.0.0.1) whose kube-controller-manager also runs the DaemonSet controller, garbage
  collection, the pod GC, the `kube-root-ca.crt` publisher (a pod's projected ServiceAccount
  volume needs it) and the ResourceClaim controller (a claim's reservation freed when its pod
  goes); with kube-scheduler, which places the DaemonSet's pods (and any pod made without a
  node) and allocates their ResourceClaims; and a client certificate for the kubelet
  (`system:node:<name>`, group `system:nodes`: the Node authorizer's).
- `NodeNamespaces`: one holder process owning the node's network namespace and a mount namespace
  that is a slave of the host's (nothing mounted in it reaches the host). In it, `/etc`, `/var`
  and `/opt` are overlays whose upper layers live in the test's directory and `/run` is a tmpfs:
  the node's own /etc/cni/net.d, /opt/cni/bin, /var/lib/kubelet, /var/lib/cni, /run/netns, ...
  with no file made on the host. The six kernel settings the kubelet would otherwise rewrite for
  the whole machine (vm.overcommit_memory, kernel.panic, ...) are files bound over /proc/sys
  there holding the values it wants, and the kubelet runs with `protectKernelDefaults`: it
  refuses to start rather than write one. The node's links: `na-eth0` (the node's address, its
  default route; a veth end, its peer `na-eth0p`), the `kubernetes` Service's ClusterIP on `lo`,
  `na-mv0`/`na-mv0p` (a veth pair, the macvlan master).
- `api_relay` (tests/node/api_relay.py): the API server seen from the node's namespace, at
  127.0.0.1:PORT and at the ClusterIP's :443, as kube-proxy would give it.
- `CgroupRoot`: `/na-node-*` in every cgroup hierarchy, the kubelet's `cgroupRoot` (cgroupfs
  driver): every pod's cgroup under it, so teardown finds every process left.
- `NodeContainerd`: tests/node/containerd.py's containerd entering both namespaces, its CNI
  `bin_dir`/`conf_dir` the node's /opt/cni/bin and /etc/cni/net.d (`restrict_oom_score_adj`).
- `NodeKubelet`: the kubelet (cgroupfs, its root /var/lib/kubelet of the node, static pods from
  /etc/kubernetes/manifests of the node, image GC and eviction effectively off).

The test's view: `RealNode.api` (admin), `fs(path)` (a path of the node's filesystem, reached
through the holder's /proc/PID/root), `netns` (the node's network namespace), `pod_netns(uid)`
(the namespace containerd gave the pod's plugins), `leftovers()` (what a test must not leak).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from netattach.netns import links
from tests.e2e.daemon_harness import python_in
from tests.e2e.polling import poll
from tests.kube.cluster import (
    ClusterError,
    LocalCluster,
    build_dir,
    end_process,
    missing_binaries,
)
from tests.kube.real_api import RealKubeApi
from tests.node import sandbox_image
from tests.node.containerd import RUNTIME_PATH, Containerd
from tests.node.cri.client import CriError

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CNI_PLUGINS = Path(os.environ.get("NETATTACH_TEST_CNI_PATH", "/usr/lib/cni"))
KUBELET_BINARIES = ("kubelet",)
CONTROLLERS = (
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "daemonset-controller",
    "garbage-collector-controller",
    "pod-garbage-collector-controller",
    "resourceclaim-controller",
    "node-lifecycle-controller",
    # deploy/'s policy controller is a Deployment
    "deployment-controller",
    "replicaset-controller",
)
NODE_IP = "10.99.0.10"
NODE_GATEWAY = "10.99.0.1"
CLUSTER_SUBNET = "10.85.0.0/24"  # the default network's (a bridge `na-cni0`)
POLICY_LEASE = "netattach-policy-controller"  # deploy/policy-controller.yaml's, its Lease too
SERVICE_IP = "10.0.0.1"  # the first address of tests/kube/cluster.py's SERVICE_CIDR
# What kubelet's setupKernelTunables wants (pkg/kubelet/cm/container_manager_linux.go)
KERNEL_TUNABLES = {
    "vm/overcommit_memory": 1,
    "vm/panic_on_oom": 0,
    "kernel/panic": 10,
    "kernel/panic_on_oops": 1,
    "kernel/keys/root_maxkeys": 1000000,
    "kernel/keys/root_maxbytes": 25000000,
}
OVERLAID = ("etc", "var", "opt")
START_TIMEOUT = 120.0
IMAGE_NAME = "ghcr.io/netattach/netattach"  # deploy/daemonset.yaml's, set by kustomize
TEST_IMAGE_REPOSITORY = "localhost/na-test/netattach"
STATIC_PODS = "/etc/kubernetes/manifests"
CGROUPS = Path("/sys/fs/cgroup")
# The NADs of the tests and the bench: a bridge, a macvlan over the node's veth end `na-mv0`,
# another bridge; host-local addresses
NADS: dict[str, dict[str, Any]] = {
    "net-a": {
        "type": "bridge",
        "bridge": "na-br-a",
        "ipam": {"type": "host-local", "subnet": "10.86.0.0/24"},
    },
    "net-b": {
        "type": "macvlan",
        "master": "na-mv0",
        "mode": "bridge",
        "ipam": {"type": "host-local", "subnet": "10.87.0.0/24"},
    },
    "net-c": {
        "type": "bridge",
        "bridge": "na-br-c",
        "ipam": {"type": "host-local", "subnet": "10.88.0.0/24"},
    },
}


class NodeError(RuntimeError):
    """A part of the node did not come up; the message carries the end of its log."""


def unavailable_reason() -> str | None:
    """Why this machine cannot run the real node, or None."""
    missing = missing_binaries(build_dir())
    if missing or not (build_dir() / "kubelet").is_file():
        return f"{', '.join(missing or ['kubelet'])} not built: run `make k8s`"
    if not any(p.is_dir() for p in (CGROUPS / "pids", CGROUPS / "unified")):
        return f"no cgroup hierarchy at {CGROUPS}"
    return None


def wait_until(what: str, ready: Callable[[], Any], timeout: float, every: float = 0.2) -> Any:
    """Poll `ready()` until it is truthy (returned); NodeError after `timeout`."""
    return poll(what, ready, timeout, every, NodeError)


def kill_all(find: Callable[[], set[int]]) -> None:
    """SIGKILL every process `find()` names until it names none (about 5 s at most)."""
    for _ in range(50):
        left = find()
        if not left:
            break
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def _tail(path: Path, lines: int = 40) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


# -- the control plane ------------------------------------------------------------------------


class NodeControlPlane(LocalCluster):
    """`LocalCluster` with the controllers a node's pods live by (module docstring)."""

    controllers: tuple[str, ...] = CONTROLLERS
    schedules = True
    # a deleted pod's replacement at once, and the DaemonSet's pod without waiting
    controller_flags: tuple[str, ...] = ("--concurrent-daemonset-syncs=2",)

    def node_kubeconfig(self, node_name: str) -> Path:
        """A kubeconfig with a client certificate the Node authorizer knows as `node_name`."""
        user = f"system:node:{node_name}"
        pki = self.pki
        ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
        key, csr, ext, crt = (f"{node_name}.{kind}" for kind in ("key", "csr", "ext", "crt"))
        run: list[tuple[str, ...]] = [("req", *ec, "-keyout", key, "-out", csr,
                "-subj", f"/O=system:nodes/CN={user}")]  # fmt: skip
        (pki / ext).write_text(
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=clientAuth\n",
            encoding="utf-8",
        )
        run.append(("x509", "-req", "-in", csr, "-CA", "ca.crt", "-CAkey", "ca.key",
                    "-set_serial", str(int(time.time() * 1000)), "-days", "30",
                    "-extfile", ext, "-out", crt))  # fmt: skip
        for args in run:
            subprocess.run(["openssl", *args], cwd=pki, check=True, capture_output=True)
        # one a node: a kubelet started again reads it again
        path = self.dir / f"{node_name}.kubeconfig"
        credentials = {
            "client-certificate-data": _b64(pki / crt),
            "client-key-data": _b64(pki / key),
        }
        self._kubeconfig(path, user, credentials)
        return path


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


# -- the node's namespaces --------------------------------------------------------------------

HOLDER_SCRIPT = r"""
set -eu
base=$1
shift
for top in __OVERLAID__; do
  mkdir -p "$base/overlay/$top/upper" "$base/overlay/$top/work"
  mount -t overlay "na-node-$top" \
    -o "lowerdir=/$top,upperdir=$base/overlay/$top/upper,workdir=$base/overlay/$top/work" "/$top"
done
mount -t tmpfs -o mode=0755 na-node-run /run
mkdir -p /run/netns
mount --make-rshared /run
mount --make-rshared /var
mkdir -p "$base/sysctl"
for item in "$@"; do
  name=${item%%=*}
  file="$base/sysctl/$(echo "$name" | tr / .)"
  echo "${item#*=}" > "$file"
  mount --bind "$file" "/proc/sys/$name"
done
ip link set lo up
echo ready
exec sleep infinity
"""


class NodeNamespaces:
    """The holder of the node's network and mount namespaces (module docstring)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        script = HOLDER_SCRIPT.replace("__OVERLAID__", " ".join(OVERLAID))
        tunables = [f"{name}={value}" for name, value in KERNEL_TUNABLES.items()]
        self.proc = subprocess.Popen(
            ["unshare", "--net", "--mount", "--propagation", "slave", "--",
             "sh", "-c", script, "sh", str(self.base), *tunables],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"PATH": RUNTIME_PATH},
            start_new_session=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != b"ready":
            end_process(self.proc)
            err = self.proc.stderr.read() if self.proc.stderr else b""
            raise NodeError(f"the node's namespaces: {err.decode(errors='replace')}")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def netns(self) -> str:
        return f"/proc/{self.pid}/ns/net"

    def enter(self) -> list[str]:
        """nsenter's options entering both namespaces."""
        return [f"--target={self.pid}", "--mount", "--net"]

    def fs(self, path: str) -> Path:
        """`path` of the node's filesystem, as the host reaches it. Absolute symlinks under
        /proc/PID/root resolve in the host's root: /var/run is spelled /run."""
        if path == "/var/run" or path.startswith("/var/run/"):
            path = path[len("/var") :]
        return Path(f"/proc/{self.pid}/root{path}")

    def run(self, *argv: str, check: bool = True, timeout: float = 60.0) -> str:
        """A command in the node's namespaces; its stdout."""
        done = subprocess.run(
            ["nsenter", *self.enter(), "--", *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={"PATH": RUNTIME_PATH},
        )
        if check and done.returncode != 0:
            raise NodeError(f"{' '.join(argv)} failed: {done.stderr.strip()}")
        return done.stdout

    def close(self) -> None:
        """End the holder: the namespaces go with their last process (a test's processes in
        them are ended before)."""
        end_process(self.proc, grace=5.0)


NODE_LINKS = frozenset({"lo", "na-eth0", "na-eth0p", "na-mv0", "na-mv0p"})


def node_links(node: NodeNamespaces) -> None:
    """The node's own links (module docstring); all in its namespace."""
    for argv in (
        # these kernels lack the dummy link kind: a veth pair's end is the node's "NIC"
        ("ip", "link", "add", "na-eth0", "type", "veth", "peer", "name", "na-eth0p"),
        ("ip", "addr", "add", f"{NODE_IP}/24", "dev", "na-eth0"),
        ("ip", "link", "set", "na-eth0", "up"),
        ("ip", "link", "set", "na-eth0p", "up"),
        ("ip", "route", "add", "default", "via", NODE_GATEWAY, "dev", "na-eth0"),
        ("ip", "addr", "add", f"{SERVICE_IP}/32", "dev", "lo"),
        ("ip", "link", "add", "na-mv0", "type", "veth", "peer", "name", "na-mv0p"),
        ("ip", "link", "set", "na-mv0", "up"),
        ("ip", "link", "set", "na-mv0p", "up"),
    ):
        node.run(*argv)


# -- cgroups ----------------------------------------------------------------------------------


class CgroupRoot:
    """`/<name>` in every cgroup hierarchy: the kubelet's cgroupRoot."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.dirs: list[Path] = []

    def hierarchies(self) -> list[Path]:
        if (CGROUPS / "cgroup.procs").exists():  # cgroup v2 alone
            return [CGROUPS]
        return sorted(p for p in CGROUPS.iterdir() if (p / "cgroup.procs").exists())

    def create(self) -> None:
        for hierarchy in self.hierarchies():
            directory = hierarchy / self.name
            directory.mkdir()
            self.dirs.append(directory)
            for key in ("cpuset.cpus", "cpuset.mems"):  # v1: empty until copied from above
                if (directory / key).exists() and not (directory / key).read_text().strip():
                    (directory / key).write_text((hierarchy / key).read_text())

    def pids(self) -> set[int]:
        found: set[int] = set()
        for directory in self.dirs:
            for procs in directory.rglob("cgroup.procs"):
                with contextlib.suppress(OSError):
                    found |= {int(p) for p in procs.read_text().split()}
        return found

    def close(self) -> None:
        """SIGKILL every process left in it, then remove every cgroup under it."""
        kill_all(self.pids)
        for directory in self.dirs:
            if not directory.exists():
                continue
            nested = sorted(
                (p for p in directory.rglob("*") if p.is_dir()),
                key=lambda p: len(p.parts),
                reverse=True,
            )
            for each in [*nested, directory]:
                for _ in range(20):
                    try:
                        each.rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.1)


# -- containerd and the kubelet ---------------------------------------------------------------


class NodeContainerd(Containerd):
    """The tier's containerd inside the node's namespaces, on the node's CNI directories."""

    def __init__(self, base: Path, node: NodeNamespaces, sandbox_image: str) -> None:
        super().__init__(base, node.netns, sandbox_image)
        # its /run/containerd is the node's tmpfs: nothing of the host's to tidy
        self.made_default_state = False
        self.enter = node.enter()
        self.cni_bin_dir = Path("/opt/cni/bin")
        self.cni_conf_dir = Path("/etc/cni/net.d")
        self.config.write_text(self.render_config())

    def remove_pod_sandboxes(self) -> None:
        """Every sandbox stopped and removed, those with a pod network first (their DEL needs
        the daemon, itself in a host-network sandbox); errors ignored."""
        with contextlib.suppress(CriError):
            found = self.cri.list(timeout=30)
            networked = []
            for sandbox in found:
                with contextlib.suppress(CriError):
                    networked.append(self.cri.status(sandbox.id, timeout=30).netns is not None)
                    continue
                networked.append(True)
            ordered = [s for s, n in zip(found, networked, strict=True) if n]
            ordered += [s for s, n in zip(found, networked, strict=True) if not n]
            for sandbox in ordered:
                with contextlib.suppress(CriError):
                    self.cri.stop(sandbox.id, timeout=60)
                    self.cri.remove(sandbox.id, timeout=60)


@dataclasses.dataclass
class NodeKubelet:
    """The kubelet of the node (module docstring): start, stop (SIGTERM), restart."""

    base: Path
    bin_dir: Path
    node: NodeNamespaces
    name: str
    kubeconfig: Path
    runtime_socket: Path
    cgroup_root: str
    client_ca: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.base / "kubelet.log"

    def config(self) -> dict[str, Any]:
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{self.cgroup_root}",
            "cgroupsPerQOS": True,
            "enforceNodeAllocatable": ["pods"],
            "failCgroupV1": False,  # these VMs have cgroup v1 (hybrid)
            "failSwapOn": False,
            "protectKernelDefaults": True,  # never write the host's kernel settings
            "containerRuntimeEndpoint": f"unix://{self.runtime_socket}",
            "staticPodPath": STATIC_PODS,
            "fileCheckFrequency": "2s",
            "address": "127.0.0.1",
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": 10248,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(self.client_ca)},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "resolvConf": "",
            "hairpinMode": "none",
            # nothing of this node's is ever removed for the machine's sake: the disk is
            # shared with the host and other tests
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {
                "memory.available": "1Mi",
                "nodefs.available": "1%",
                "nodefs.inodesFree": "1%",
                "imagefs.available": "1%",
            },
            "serializeImagePulls": False,
            "registerNode": True,
            "nodeStatusReportFrequency": "10s",
        }

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, "the kubelet is running"
        config = self.base / "kubelet.yaml"
        config.write_text(yaml.safe_dump(self.config(), sort_keys=False), encoding="utf-8")
        with self.log.open("ab") as stream:
            self.proc = subprocess.Popen(
                ["nsenter", *self.node.enter(), "--", str(self.bin_dir / "kubelet"),
                 f"--config={config}", f"--kubeconfig={self.kubeconfig}",
                 "--root-dir=/var/lib/kubelet", f"--hostname-override={self.name}",
                 f"--node-ip={NODE_IP}", "--v=2"],
                stdin=subprocess.DEVNULL,
                stdout=stream,
                stderr=subprocess.STDOUT,
                env={"PATH": RUNTIME_PATH},
                start_new_session=True,
            )  # fmt: skip

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        end_process(self.proc, grace=30.0)

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_tail(self, lines: int = 40) -> str:
        return _tail(self.log, lines)


# -- the node as a test sees it ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Leftovers:
    """What a node keeps of its pods: none of it may outlive them."""

    links: tuple[str, ...] = ()  # veths (and any link but the node's own and the bridges)
    addresses: tuple[str, ...] = ()  # on the node's links, but its own and na-cni0's gateway
    allocations: tuple[str, ...] = ()  # host-local's, under /var/lib/cni/networks
    records: tuple[str, ...] = ()  # netattach's, under /var/lib/netattach/pods
    netns: tuple[str, ...] = ()  # under /run/netns
    tables: tuple[str, ...] = ()  # nft tables of netattach in the node's namespace


@dataclasses.dataclass
class RealNode:
    name: str
    base: Path
    control: NodeControlPlane
    namespaces: NodeNamespaces
    containerd: NodeContainerd
    kubelet: NodeKubelet
    api: RealKubeApi
    pause_image: str
    cgroups: CgroupRoot
    bridges: set[str] = dataclasses.field(default_factory=set)
    # the node's own links and addresses (node_links'), and its default network's subnet
    own_links: frozenset[str] = frozenset()
    own_addresses: frozenset[str] = frozenset()
    cluster_subnet: str = CLUSTER_SUBNET

    @property
    def netns(self) -> str:
        return self.namespaces.netns

    def fs(self, path: str) -> Path:
        return self.namespaces.fs(path)

    def kubectl(self, *args: str, timeout: float = 120.0) -> str:
        done = subprocess.run(
            [str(self.control.bin / "kubectl"), f"--kubeconfig={self.control.admin_kubeconfig}",
             *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise NodeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    # -- pods ---------------------------------------------------------------------------------

    def pod_object(
        self,
        namespace: str,
        name: str,
        networks: str | None = None,
        *,
        node_name: str | None = "",
        labels: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """A pod of one pause container (the node's sandbox image, never pulled), on this node
        unless `node_name` is None (then kube-scheduler places it)."""
        meta: dict[str, Any] = {"name": name, "namespace": namespace}
        if labels:
            meta["labels"] = dict(labels)
        if networks is not None:
            meta["annotations"] = {"k8s.v1.cni.cncf.io/networks": networks}
        spec: dict[str, Any] = {
            "terminationGracePeriodSeconds": 5,
            "automountServiceAccountToken": False,
            "containers": [
                {"name": "pause", "image": self.pause_image, "imagePullPolicy": "Never"}
            ],
        }
        if node_name is not None:
            spec["nodeName"] = node_name or self.name
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}

    def create_namespace(self, name: str) -> None:
        self.api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        path = f"/api/v1/namespaces/{name}/serviceaccounts/default"
        wait_until(f"{name}'s default ServiceAccount",
                   lambda: self.api.http.get(path).status == 200, 30.0)  # fmt: skip

    def add_nads(self, namespace: str) -> None:
        """`NADS` in `namespace`; their bridges are the node's from now on (a bridge stays)."""
        for name, plugin in NADS.items():
            self.api.create(nad_object(namespace, name, plugin))
            if plugin["type"] == "bridge":
                self.bridges.add(plugin["bridge"])

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.api.get("Pod", name, namespace)

    def wait_running(self, namespace: str, name: str, timeout: float = 90.0) -> dict[str, Any]:
        def running() -> dict[str, Any] | None:
            pod = self.pod(namespace, name)
            if pod is not None and (pod.get("status") or {}).get("phase") == "Running":
                return pod
            return None

        try:
            found: dict[str, Any] = wait_until(f"{namespace}/{name} Running", running, timeout)
        except NodeError as exc:
            raise NodeError(f"{exc}\n{self.describe(namespace, name)}") from None
        return found

    def delete_pod(self, namespace: str, name: str, *, wait: bool = True) -> None:
        """Delete gracefully (the kubelet tears the pod down, then the API forgets it)."""
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        self.api.http.request("DELETE", path)
        if wait:
            wait_until(f"{namespace}/{name} gone", lambda: self.pod(namespace, name) is None, 90.0)

    def describe(self, namespace: str, name: str) -> str:
        """The pod's status and Events, and the node's taints, for a failure's message."""
        pod = self.pod(namespace, name)
        events = [
            f"{e.get('reason')}: {e.get('message')}" for e in self.api.events_for(namespace, name)
        ]
        status = json.dumps((pod or {}).get("status"), indent=1)
        stored = self.api.http.get(f"/api/v1/nodes/{self.name}")
        taints = (stored.json().get("spec") or {}).get("taints") if stored.status == 200 else None
        return f"status: {status}\nevents:\n" + "\n".join(events[-15:]) + f"\nnode taints: {taints}"

    def network_status(self, namespace: str, name: str) -> list[dict[str, Any]] | None:
        pod = self.pod(namespace, name)
        annotations = ((pod or {}).get("metadata") or {}).get("annotations") or {}
        text = annotations.get("k8s.v1.cni.cncf.io/network-status")
        if text is None:
            return None
        entries = json.loads(text)
        assert isinstance(entries, list)
        return entries

    def sandbox_uid(self, pod: Mapping[str, Any]) -> str:
        """The UID the kubelet gives containerd: a static pod's config hash, else the pod's."""
        annotations = pod["metadata"].get("annotations") or {}
        return str(annotations.get("kubernetes.io/config.mirror") or pod["metadata"]["uid"])

    def pod_netns(self, pod: Mapping[str, Any]) -> str:
        """The pod's network namespace, as the host reaches it (its ready sandbox's)."""
        uid = self.sandbox_uid(pod)
        for sandbox in self.containerd.cri.list():
            if sandbox.uid == uid and sandbox.ready:
                netns = self.containerd.cri.status(sandbox.id).netns
                assert netns, f"the sandbox of {uid} has no netns"
                return str(self.fs(netns))
        raise NodeError(f"no ready sandbox for {uid}")

    def pod_interfaces(self, pod: Mapping[str, Any]) -> dict[str, links.InterfaceState]:
        found = links.read_interfaces(self.pod_netns(pod))
        return {name: state for name, state in found.items() if name != "lo"}

    def check_network_status(self, pod: Mapping[str, Any], status: list[dict[str, Any]]) -> None:
        """Each network-status entry's interface, addresses and MAC those of the pod's netns, and
        nothing more there."""
        kernel = self.pod_interfaces(pod)
        assert sorted(kernel) == sorted(entry["interface"] for entry in status), (kernel, status)
        for entry in status:
            state = kernel[entry["interface"]]
            # the standard's form, CIDR (its §4.1.2.1 example); the kernel's link-local IPv6 aside
            addresses = {a for a in state.addresses if not a.startswith("fe80:")}
            assert set(entry["ips"]) == addresses, (entry, state)
            assert entry["mac"].lower() == state.mac.lower(), (entry, state)

    # -- what must not leak -------------------------------------------------------------------

    def leftovers(self) -> Leftovers:
        found = links.read_interfaces(self.netns)
        extra = sorted(name for name in found if name not in self.own_links | self.bridges)
        subnet = ipaddress.ip_network(self.cluster_subnet)
        expected = {"127.0.0.1/8", "::1/128", f"{SERVICE_IP}/32", *self.own_addresses}
        expected.add(f"{subnet[1]}/{subnet.prefixlen}")
        addresses = sorted(
            f"{state.name} {address}"
            for state in found.values()
            for address in state.addresses
            if address not in expected and not address.startswith("fe80:")
        )
        networks = self.fs("/var/lib/cni/networks")
        allocations = sorted(
            str(p.relative_to(networks))
            for p in (networks.rglob("*") if networks.exists() else [])
            if p.is_file() and not p.name.startswith(("last_reserved_ip", "lock"))
        )
        pods = self.fs("/var/lib/netattach/pods")
        records = sorted(p.name for p in pods.glob("*")) if pods.exists() else []
        netns_dir = self.fs("/run/netns")
        netns = sorted(p.name for p in netns_dir.iterdir()) if netns_dir.exists() else []
        listed = self.namespaces.run("nft", "list", "tables", check=False)
        tables = sorted(line for line in listed.splitlines() if "netattach" in line)
        return Leftovers(
            links=tuple(extra),
            addresses=tuple(addresses),
            allocations=tuple(allocations),
            records=tuple(records),
            netns=tuple(netns),
            tables=tuple(tables),
        )

    def wait_clean(self, timeout: float = 60.0) -> Leftovers:
        """Leftovers once nothing is left (or what is left after `timeout`)."""
        deadline = time.monotonic() + timeout
        while True:
            left = self.leftovers()
            if left == Leftovers() or time.monotonic() > deadline:
                return left
            time.sleep(0.5)

    def container_memory(self, container_id: str) -> dict[str, int]:
        """The memory cgroup the kubelet made for a container (cgroup v1 or v2): its `limit`,
        its highest use (`peak`) and the processes the kernel killed in it for memory
        (`oom_kills`)."""
        for directory in self.cgroups.dirs:
            for found in directory.rglob(container_id):
                if (found / "memory.limit_in_bytes").exists():  # v1
                    names = ("memory.limit_in_bytes", "memory.max_usage_in_bytes",
                             "memory.oom_control")  # fmt: skip
                elif (found / "memory.max").exists():
                    names = ("memory.max", "memory.peak", "memory.events")
                else:
                    continue
                limit, peak, events = ((found / name).read_text() for name in names)
                counts = dict(line.split() for line in events.splitlines())
                return {
                    "limit": int(limit),
                    "peak": int(peak),
                    "oom_kills": int(counts.get("oom_kill", "0")),
                }
        raise NodeError(f"no memory cgroup for container {container_id}")

    # -- a reboot -----------------------------------------------------------------------------

    def power_off(self) -> None:
        """What losing power does to a node: every process of the node ends (the kubelet,
        containerd, its shims, every container), every link but the node's own goes (its
        bridges too), what lives in memory is lost (/run, the pod namespaces, containerd's
        state, the kubelet's tmpfs volumes) and what is on disk stays (/var/lib/cni,
        /var/lib/netattach, /var/lib/kubelet, containerd's root, /etc/cni)."""
        self.kubelet.stop()
        self.containerd.stop()
        kill_all(lambda: set(self.containerd.shim_pids()) | self.cgroups.pids())
        for name in links.read_interfaces(self.netns):
            if name not in self.own_links:
                self.namespaces.run("ip", "link", "del", name, check=False)
        state = str(self.containerd.state)
        mounts = Path(f"/proc/{self.namespaces.pid}/mountinfo").read_text().splitlines()
        points = [line.split()[4] for line in mounts]
        lost = [
            point for point in points if point.startswith((state + "/", "/var/lib/kubelet/pods/"))
        ]
        for point in sorted(lost, key=len, reverse=True):
            self.namespaces.run("umount", "-l", point, check=False)
        self.namespaces.run(
            "sh", "-c",
            "umount -R -l /run && mount -t tmpfs -o mode=0755 na-node-run /run"
            " && mkdir -p /run/netns && mount --make-rshared /run",
        )  # fmt: skip
        shutil.rmtree(self.containerd.state, ignore_errors=True)
        self.containerd.state.mkdir()

    def power_on(self) -> None:
        """containerd and the kubelet started again (after `power_off`)."""
        self.containerd.start()
        self.kubelet.start()

    def reboot(self) -> None:
        """`power_off`, then `power_on`."""
        self.power_off()
        self.power_on()

    # -- netattach ----------------------------------------------------------------------------

    def daemon_pods(self) -> list[dict[str, Any]]:
        return self.api.list("Pod", "kube-system", label_selector="app=netattach")

    def wait_daemon_ready(self, timeout: float = 180.0, *, not_uid: str | None = None) -> str:
        """The DaemonSet's pod Ready (another than `not_uid`); its UID."""

        def ready() -> str | None:
            for pod in self.daemon_pods():
                if pod["metadata"]["uid"] == not_uid or pod["metadata"].get("deletionTimestamp"):
                    continue
                conditions = (pod.get("status") or {}).get("conditions") or []
                if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                    return str(pod["metadata"]["uid"])
            return None

        try:
            uid: str = wait_until("the netattach pod Ready", ready, timeout)
        except NodeError as exc:
            pods = [p["metadata"]["name"] for p in self.daemon_pods()]
            details = "\n".join(self.describe("kube-system", name) for name in pods)
            raise NodeError(f"{exc}\n{details}\nkubelet:\n{self.kubelet.log_tail()}") from None
        return uid

    def load_image(self, image_archive: Path) -> tuple[str, str]:
        """The node image loaded into containerd under a name of the test's: (name, tag)."""
        self.containerd.import_image(image_archive)
        digest = self.containerd.ctr("images", "ls", f"name=={IMAGE_NAME}:0.1.0", "--quiet")
        assert digest.strip(), f"{image_archive} holds no {IMAGE_NAME}:0.1.0"
        tag = image_archive.stem.rsplit("-", 1)[-1][:16] or "test"
        image = f"{TEST_IMAGE_REPOSITORY}:{tag}"
        self.containerd.ctr("images", "tag", "--force", f"{IMAGE_NAME}:0.1.0", image)
        return image, tag

    def deploy(self, image_archive: Path) -> str:
        """The node image loaded (`load_image`), and deploy/ applied by `kubectl apply -k`
        through an overlay setting that image; the daemon's pod Ready and its conflist
        installed. The image's name."""
        image, tag = self.load_image(image_archive)
        overlay = self.base / "kustomize"
        overlay.mkdir(exist_ok=True)
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [os.path.relpath(DEPLOY, overlay)],
            "images": [{"name": IMAGE_NAME, "newName": TEST_IMAGE_REPOSITORY, "newTag": tag}],
        }
        (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        self.kubectl("apply", "-k", str(overlay))
        self.wait_daemon_ready()
        conflist = self.fs("/etc/cni/net.d/00-netattach.conflist")
        wait_until("00-netattach.conflist installed", conflist.exists, 30.0)
        self.wait_policy_controller()
        return image

    def wait_policy_controller(self, timeout: float = 180.0) -> str:
        """deploy/'s policy controller leading (its Lease held); the leader's name."""
        path = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/" + POLICY_LEASE

        def holder() -> str | None:
            found = self.api.http.get(path)
            spec = (found.json().get("spec") or {}) if found.status == 200 else {}
            return spec.get("holderIdentity") or None

        try:
            leader: str = wait_until("the policy controller leading", holder, timeout)
        except NodeError as exc:
            pods = self.api.list("Pod", "kube-system", label_selector=f"app={POLICY_LEASE}")
            details = "\n".join(self.describe("kube-system", p["metadata"]["name"]) for p in pods)
            raise NodeError(f"{exc}\n{details}") from None
        return leader


def nad_object(namespace: str, name: str, plugin: dict[str, Any]) -> dict[str, Any]:
    """The NetworkAttachmentDefinition `namespace`/`name`: a conflist of one plugin."""
    config = {"cniVersion": "1.0.0", "name": name, "plugins": [plugin]}
    return {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"config": json.dumps(config)},
    }


def write_cluster_network(node: NodeNamespaces, name: str, bridge: str, subnet: str) -> None:
    """The cluster's default network (what a cluster's CNI installer puts on each node)."""
    conf = {
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": True,
                "ipam": {
                    "type": "host-local",
                    "subnet": subnet,
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            }
        ],
    }
    directory = node.fs("/etc/cni/net.d")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"10-{name}.conflist").write_text(json.dumps(conf, indent=1))


def install_plugins(node: NodeNamespaces) -> None:
    """The reference plugins in the node's /opt/cni/bin, real files (a delegate runs in the
    daemon's container, where a symlink to /usr/lib/cni would not resolve)."""
    target = node.fs("/opt/cni/bin")
    target.mkdir(parents=True, exist_ok=True)
    for plugin in sorted(CNI_PLUGINS.iterdir()):
        if plugin.is_file():
            shutil.copy2(plugin, target / plugin.name)


def start_control_plane(
    stack: contextlib.ExitStack, base: Path, plane: type[NodeControlPlane] = NodeControlPlane
) -> NodeControlPlane:
    """The control plane of the module docstring, stopped when `stack` closes."""
    # one more try, as tests/kube/cluster.py's local_cluster: a loopback port chosen free can be
    # taken before a component binds it
    control = plane(base / "control-1", build_dir())
    try:
        control.start()
    except ClusterError:
        control = plane(base / "control-2", build_dir())
        control.start()
    stack.callback(control.stop)
    return control


def _node_ready(api: RealKubeApi, kubelet: NodeKubelet, name: str) -> dict[str, Any] | None:
    """The Node as stored once it is Ready, else None."""
    if not kubelet.alive():
        raise NodeError(f"the kubelet exited:\n{kubelet.log_tail()}")
    response = api.http.get(f"/api/v1/nodes/{name}")
    stored: dict[str, Any] = response.json() if response.status == 200 else {}
    conditions = (stored.get("status") or {}).get("conditions") or []
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    return stored if ready else None


def _pod_cidr(api: RealKubeApi, kubelet: NodeKubelet, name: str) -> str | None:
    """The podCIDR the node-ipam controller gave the registered Node, else None."""
    if not kubelet.alive():
        raise NodeError(f"the kubelet exited:\n{kubelet.log_tail()}")
    response = api.http.get(f"/api/v1/nodes/{name}")
    stored = response.json() if response.status == 200 else {}
    cidr = (stored.get("spec") or {}).get("podCIDR")
    return str(cidr) if cidr else None


def start_node(
    stack: contextlib.ExitStack,
    control: NodeControlPlane,
    base: Path,
    *,
    name: str,
    links: Callable[[NodeNamespaces], None] = node_links,
    own_links: frozenset[str] = NODE_LINKS,
    own_addresses: frozenset[str] = frozenset({f"{NODE_IP}/24"}),
    cluster_network: str = "cluster-default",
    cluster_bridge: str = "na-cni0",
    cluster_subnet: str | None = CLUSTER_SUBNET,
) -> RealNode:
    """One node of the module docstring joined to `control`, Ready; everything it made undone
    when `stack` closes. `cluster_subnet` None: the default network's subnet is the podCIDR the
    control plane's node-ipam controller gives the Node (its config written once it has one)."""
    namespaces = NodeNamespaces(base / "node")
    stack.callback(namespaces.close)
    namespaces.start()
    links(namespaces)
    relay_log = (base / "relay.log").open("wb")
    stack.callback(relay_log.close)
    relay = subprocess.Popen(
        [sys.executable, "-m", "tests.node.api_relay", f"--netns={namespaces.netns}",
         f"--to=127.0.0.1:{control.api_port}", f"--listen=127.0.0.1:{control.api_port}",
         f"--listen={SERVICE_IP}:443"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=relay_log,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    stack.callback(end_process, relay, 5.0)
    assert relay.stdout is not None
    if relay.stdout.readline().strip() != b"ready":
        raise NodeError(f"the API relay did not start: {_tail(base / 'relay.log')}")
    cgroups = CgroupRoot(name)
    stack.callback(cgroups.close)
    cgroups.create()
    install_plugins(namespaces)
    if cluster_subnet is not None:
        write_cluster_network(namespaces, cluster_network, cluster_bridge, cluster_subnet)
    namespaces.fs(STATIC_PODS).mkdir(parents=True, exist_ok=True)
    pause = sandbox_image.build_pause(base / "pause")
    pause_image = sandbox_image.write_image_archive(pause, base / "pause-image.tar")
    containerd = NodeContainerd(base / "containerd", namespaces, pause_image)
    stack.callback(containerd.close)
    kubelet = NodeKubelet(
        base=base,
        bin_dir=control.bin,
        node=namespaces,
        name=name,
        kubeconfig=control.node_kubeconfig(name),
        runtime_socket=containerd.socket,
        cgroup_root=name,
        client_ca=control.pki / "ca.crt",
    )
    # at exit: the kubelet first (it would recreate what is removed), then the sandboxes while
    # the daemon's container still answers their DELs
    stack.callback(containerd.remove_pod_sandboxes)
    stack.callback(kubelet.stop)
    containerd.start()
    containerd.import_image(base / "pause-image.tar")
    kubelet.start()
    api = RealKubeApi(control.admin_kubeconfig)
    subnet = cluster_subnet
    try:
        if subnet is None:
            subnet = wait_until("the Node's podCIDR", lambda: _pod_cidr(api, kubelet, name), 60.0)
            write_cluster_network(namespaces, cluster_network, cluster_bridge, subnet)
        wait_until("the Node Ready", lambda: _node_ready(api, kubelet, name), START_TIMEOUT)
    except NodeError as exc:
        raise NodeError(f"{exc}\n{kubelet.log_tail()}") from None
    return RealNode(
        name=name,
        base=base,
        control=control,
        namespaces=namespaces,
        containerd=containerd,
        kubelet=kubelet,
        api=api,
        pause_image=pause_image,
        cgroups=cgroups,
        bridges={cluster_bridge},
        own_links=own_links,
        own_addresses=own_addresses,
        cluster_subnet=subnet,
    )


@contextlib.contextmanager
def real_node(
    directory: Path,
    *,
    cluster_network: str = "cluster-default",
    cluster_bridge: str = "na-cni0",
    cluster_subnet: str = CLUSTER_SUBNET,
) -> Iterator[RealNode]:
    """The node of the module docstring, its kubelet registered and Ready (netattach not yet
    deployed: `RealNode.deploy`)."""
    reason = unavailable_reason()
    if reason is not None:
        raise NodeError(reason)
    directory.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        control = start_control_plane(stack, directory)
        yield start_node(
            stack,
            control,
            directory,
            name=f"na-node-{os.urandom(3).hex()}",
            cluster_network=cluster_network,
            cluster_bridge=cluster_bridge,
            cluster_subnet=cluster_subnet,
        )


def connect_outcome(netns: str, address: str, port: int = 8080) -> str:
    """A TCP connect from inside `netns` to a port nothing listens on: "refused" (it reached the
    pod), "dropped" (no answer within a second: a policy dropped it) or another errno's name."""
    probe = (
        "import socket, sys\n"
        "s = socket.socket()\n"
        "s.settimeout(1.0)\n"
        "try:\n"
        f"    s.connect(({address!r}, {port}))\n"
        "    print('connected')\n"
        "except ConnectionRefusedError:\n"
        "    print('refused')\n"
        "except TimeoutError:\n"
        "    print('dropped')\n"
        "except OSError as exc:\n"
        "    print(type(exc).__name__)\n"
    )
    done = subprocess.run(
        python_in(netns, probe),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout.strip()
