"""deploy/daemonset.yaml's container, run by the tier's containerd as a kubelet would run it.

`DaemonSetPod.from_manifests(...)` reads the DaemonSet (and the ConfigMap it mounts) and turns
its pod spec into one `ctr run`: `hostNetwork: true` → the node's network (`--net-host`: the
namespace containerd runs in), `privileged` → `--privileged`, the container's command and env
(`NODE_NAME` from `spec.nodeName`), and every volumeMount: a hostPath volume is bind-mounted from
the directory standing in for that host path, a configMap volume from a directory holding its
keys as files, `readOnly` → ro, `mountPropagation: HostToContainer` → rslave.

A hostPath mounted at its own path (the daemon's socket directory, `/var/lib/cni`, `/run/netns`)
is one the DaemonSet needs to be the same path inside and outside the container: the socket path
written in the conflist is opened by the shim on the host, CNI_NETNS by delegates inside. Such a
volume is mounted at its mountPath and also at its stand-in's own path, and `settings` paths
under it are rewritten to the stand-in's (`rewrite`): the same property, on the test's
directories.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.node.containerd import Containerd

ROOT = Path(__file__).resolve().parents[2]
DAEMONSET = ROOT / "deploy" / "daemonset.yaml"
CONFIGMAP = ROOT / "deploy" / "configmap.yaml"
NAMESPACE = "netattach-node"  # containerd namespace of the DaemonSet's container


def load_one(path: Path, kind: str) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == kind]
    assert isinstance(doc, dict)
    return doc


@dataclasses.dataclass(frozen=True, slots=True)
class Mount:
    source: Path
    target: str
    options: tuple[str, ...]

    def flag(self) -> str:
        return f"type=bind,src={self.source},dst={self.target},options={':'.join(self.options)}"


@dataclasses.dataclass
class DaemonSetPod:
    image: str
    command: list[str]
    env: dict[str, str]
    mounts: list[Mount]
    host_network: bool
    privileged: bool
    rewritten: dict[str, str]  # mountPath -> stand-in path, for identity-mounted host paths

    @classmethod
    def from_manifests(
        cls,
        *,
        node_name: str,
        host_paths: Mapping[str, Path],
        config_maps: Mapping[str, Path],
        daemonset: Mapping[str, Any] | None = None,
    ) -> DaemonSetPod:
        """The pod of `daemonset` (deploy/daemonset.yaml's by default); `host_paths` maps each
        hostPath the DaemonSet names to its stand-in, `config_maps` each ConfigMap to a
        directory of its keys."""
        raw = daemonset or load_one(DAEMONSET, "DaemonSet")
        spec = raw["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts: list[Mount] = []
        rewritten: dict[str, str] = {}
        for mount in container["volumeMounts"]:
            volume = volumes[mount["name"]]
            options = ["rbind", "ro" if mount.get("readOnly") else "rw"]
            if mount.get("mountPropagation") == "HostToContainer":
                options.append("rslave")
            target = mount["mountPath"]
            if "hostPath" in volume:
                host = volume["hostPath"]["path"]
                source = host_paths[host]
                if target == host and str(source) != target:
                    # also at the stand-in's own path, for the paths the host side is told
                    rewritten[target] = str(source)
                    mounts.append(Mount(source, str(source), tuple(options)))
            else:
                source = config_maps[volume["configMap"]["name"]]
            mounts.append(Mount(source, target, tuple(options)))
        env: dict[str, str] = {}
        for item in container.get("env", []):
            field = (item.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath")
            env[item["name"]] = node_name if field == "spec.nodeName" else item.get("value", "")
        return cls(
            image=container["image"],
            command=list(container["command"]),
            env=env,
            mounts=mounts,
            host_network=bool(spec.get("hostNetwork")),
            privileged=bool((container.get("securityContext") or {}).get("privileged")),
            rewritten=rewritten,
        )

    def rewrite(self, value: str) -> str:
        """A path of the settings, moved with an identity-mounted volume it lies under."""
        for inside, standin in self.rewritten.items():
            if value == inside or value.startswith(inside.rstrip("/") + "/"):
                return standin + value[len(inside.rstrip("/")) :]
        return value

    def run_args(self, container_id: str, log: Path, runc_root: Path) -> list[str]:
        args = ["run", "--detach", f"--log-uri=file://{log}", f"--runc-root={runc_root}"]
        if self.host_network:
            args.append("--net-host")
        if self.privileged:
            args.append("--privileged")
        args += [f"--env={key}={value}" for key, value in self.env.items()]
        args += [f"--mount={mount.flag()}" for mount in self.mounts]
        return [*args, self.image, container_id, *self.command]


def ctr(containerd: Containerd, *args: str, timeout: float = 300.0) -> str:
    """`ctr -n netattach-node ARGS` on the tier's containerd."""
    return containerd.ctr(*args, timeout=timeout, namespace=NAMESPACE)


def task_status(containerd: Containerd, container_id: str) -> str | None:
    """RUNNING, STOPPED, ... of the container's task; None when it has none."""
    for line in ctr(containerd, "tasks", "ls").splitlines()[1:]:
        fields = line.split()
        if fields and fields[0] == container_id:
            return fields[-1]
    return None


def stop(containerd: Containerd, container_id: str, grace: float = 30.0) -> str | None:
    """SIGTERM the task (as kubelet does), SIGKILL after `grace`; delete task and container.
    The task's last status before deletion."""
    status = task_status(containerd, container_id)
    if status == "RUNNING":
        ctr(containerd, "tasks", "kill", "--signal", "SIGTERM", container_id)
        deadline = time.monotonic() + grace
        while (status := task_status(containerd, container_id)) == "RUNNING":
            if time.monotonic() > deadline:
                ctr(containerd, "tasks", "kill", "--signal", "SIGKILL", container_id)
                time.sleep(1)
                status = "KILLED"
                break
            time.sleep(0.2)
    if task_status(containerd, container_id) is not None:
        ctr(containerd, "tasks", "delete", "--force", container_id)
    containers = ctr(containerd, "containers", "ls", "--quiet").split()
    if container_id in containers:
        ctr(containerd, "containers", "delete", container_id)
    return status
