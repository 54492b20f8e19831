"""The contenders: what each does for one pod's ADD and DEL, and for many pods at once.

    floor        the pod's delegate plugins executed directly (no meta-plugin), by the runner
    thick-dir    the shim (the native C build) -> a daemon on the directory feed
    thick-kube   the same shim -> a daemon on the Kubernetes feed (the in-repo fake API)
    thin         `netattach-thin` with the directory feed
    peer         NETATTACH_BENCH_PEER with the config NETATTACH_BENCH_PEER_CONF

Every meta-plugin is run as a container runtime runs it: `CNI_*` in its environment (CNI_ARGS
with the pod's namespace, name, UID and infra container ID, as the kubelet passes them), its CNI
config on stdin, started by the runner inside the node namespace; timed from spawn to exit.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Protocol

from bench import node, topology

RUNTIME_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
PLUGIN_DIR = "/usr/lib/cni"


class CallFailedError(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True, slots=True)
class PodCall:
    """One pod's sandbox as a contender sees it."""

    spec: topology.PodSpec
    netns: str
    container_id: str

    @property
    def cni_args(self) -> str:
        return ";".join(
            [
                "IgnoreUnknown=1",
                f"K8S_POD_NAMESPACE={topology.NAMESPACE}",
                f"K8S_POD_NAME={self.spec.name}",
                f"K8S_POD_INFRA_CONTAINER_ID={self.container_id}",
                f"K8S_POD_UID={self.spec.uid}",
            ]
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Burst:
    """Many calls at once: the wall time, and what failed (by the pods' index)."""

    ms: float
    failures: dict[int, str]


class Contender(Protocol):
    name: str

    def add(self, pod: PodCall) -> float: ...
    def delete(self, pod: PodCall) -> float: ...
    def burst(self, command: str, pods: list[PodCall]) -> Burst: ...


class Floor:
    name = "floor"

    def __init__(self, runner: node.NodeRunner, topo: topology.Topology, limit: int) -> None:
        self.runner = runner
        self.topo = topo
        self.limit = limit

    def _pod(self, pod: PodCall) -> dict[str, Any]:
        return {
            "container_id": pod.container_id,
            "netns": pod.netns,
            "args": "IgnoreUnknown=1",
            "cni_path": PLUGIN_DIR,
            "attachments": self.topo.attachments(pod.spec),
        }

    def _one(self, command: str, pod: PodCall) -> float:
        reply = self.runner.call({"op": "floor", "command": command, "pod": self._pod(pod)})
        if reply.get("error"):
            raise CallFailedError(f"floor {command} {pod.spec.name}: {reply['error']}")
        return float(reply["ms"])

    def add(self, pod: PodCall) -> float:
        return self._one("ADD", pod)

    def delete(self, pod: PodCall) -> float:
        return self._one("DEL", pod)

    def burst(self, command: str, pods: list[PodCall]) -> Burst:
        reply = self.runner.call(
            {
                "op": "floor_many",
                "command": command,
                "pods": [self._pod(p) for p in pods],
                "limit": self.limit,
            }
        )
        failures = {i: str(e) for i, e in enumerate(reply["errors"]) if e is not None}
        return Burst(float(reply["ms"]), failures)


class MetaPlugin:
    """A CNI meta-plugin executable given its config: thick (the shim), thin, a peer."""

    def __init__(
        self, name: str, runner: node.NodeRunner, program: list[str], config: dict[str, Any]
    ) -> None:
        self.name = name
        self.runner = runner
        self.program = program
        self.config = config

    def _call(self, command: str, pod: PodCall) -> dict[str, Any]:
        return {
            "argv": self.program,
            "env": {
                "PATH": RUNTIME_PATH,
                "CNI_COMMAND": command,
                "CNI_CONTAINERID": pod.container_id,
                "CNI_NETNS": pod.netns,
                "CNI_IFNAME": "eth0",
                "CNI_PATH": PLUGIN_DIR,
                "CNI_ARGS": pod.cni_args,
            },
            "stdin": json.dumps(self.config),
        }

    def _check(self, command: str, pod: PodCall, reply: dict[str, Any]) -> float:
        if reply["rc"] != 0:
            raise CallFailedError(
                f"{self.name} {command} {pod.spec.name} ({pod.container_id}) exited "
                f"{reply['rc']}: {reply['stdout'][:800]} {reply['stderr'][-800:]}"
            )
        if command == "ADD":
            try:
                parsed = json.loads(reply["stdout"])
            except ValueError:
                parsed = None
            if not isinstance(parsed, dict) or "interfaces" not in parsed:
                raise CallFailedError(
                    f"{self.name} ADD {pod.spec.name} printed no result: {reply['stdout'][:300]!r}"
                )
        return float(reply["ms"])

    def _one(self, command: str, pod: PodCall) -> float:
        reply = self.runner.call({"op": "exec", **self._call(command, pod)})
        return self._check(command, pod, reply)

    def add(self, pod: PodCall) -> float:
        return self._one("ADD", pod)

    def delete(self, pod: PodCall) -> float:
        return self._one("DEL", pod)

    def burst(self, command: str, pods: list[PodCall]) -> Burst:
        reply = self.runner.call(
            {"op": "exec_many", "calls": [self._call(command, pod) for pod in pods]}
        )
        failures: dict[int, str] = {}
        for index, (pod, each) in enumerate(zip(pods, reply["each"], strict=True)):
            try:
                self._check(command, pod, each)
            except CallFailedError as exc:
                failures[index] = str(exc)
        return Burst(float(reply["ms"]), failures)


def shim_config(conf_dir: Path) -> dict[str, Any]:
    """What libcni hands the one plugin of the daemon's installed conflist: the plugin's config
    with the list's name and cniVersion."""
    raw = json.loads((conf_dir / "00-netattach.conflist").read_text())
    (plugin,) = raw["plugins"]
    return {**plugin, "name": raw["name"], "cniVersion": raw["cniVersion"]}


def thin_config(topo: topology.Topology, state: Path) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "netattach",
        "type": "netattach-thin",
        "settings": {
            "clusterNetwork": topology.DEFAULT_NETWORK,
            "networksDir": str(topo.networks_dir),
            "binDirs": [PLUGIN_DIR],
            "stateDir": str(state),
            "feed": {"directory": str(topo.manifests)},
            "logLevel": "warning",
        },
    }


def peer_config(template: str, values: dict[str, str]) -> dict[str, Any]:
    """The peer's config: NETATTACH_BENCH_PEER_CONF with each `@NAME@` replaced."""
    text = template
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"NETATTACH_BENCH_PEER_CONF is not JSON once filled in: {exc}") from exc
    if not isinstance(config, dict):
        raise ValueError(f"NETATTACH_BENCH_PEER_CONF is not a JSON object: {text[:200]!r}")
    return config
