"""What the operator-command tests share: running a console script, and a directory-feed node.

`run(program, *args)` runs `.venv/bin/<program>` as a user does and returns its exit status,
stdout and stderr. `DirectoryNode` is the node of a directory feed on disk: its settings file,
the cluster default network's config file, the manifests (Namespaces, NADs, Pods,
MultiNetworkPolicies) and the status files the daemon writes beside them; the tests write the
status files themselves where they describe a node's state (a pod attached, a pod whose ADD
failed, a status edited by hand).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin"
TIMEOUT = 120.0
DEFAULT_NETWORK = "cluster-default"
NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
STATUS_ANNOTATION = "k8s.v1.cni.cncf.io/network-status"
POLICY_FOR = "k8s.v1.cni.cncf.io/policy-for"


@dataclasses.dataclass(frozen=True, slots=True)
class Done:
    rc: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()


def run(
    program: str,
    *args: str,
    stdin: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Done:
    """`.venv/bin/<program> args...`; `env` replaces the environment when given."""
    done = subprocess.run(
        [str(BIN / program), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        env=dict(env) if env is not None else None,
        cwd=cwd,
    )
    return Done(done.returncode, done.stdout, done.stderr)


def netattach(*args: str, **kw: Any) -> Done:
    return run("netattach", *args, **kw)


def bridge_config(subnet: str | None, bridge: str = "na-br-x") -> dict[str, Any]:
    """A bridge network's config; with `subnet`, host-local IPAM (it assigns addresses)."""
    config: dict[str, Any] = {"cniVersion": "1.0.0", "type": "bridge", "bridge": bridge}
    if subnet is not None:
        config["ipam"] = {"type": "host-local", "subnet": subnet}
    return config


def entry(
    name: str, interface: str, ips: Sequence[str] = (), *, mac: str = "", default: bool = False
) -> dict[str, Any]:
    """One network-status entry as the daemon writes it (standard §5)."""
    found: dict[str, Any] = {"name": name, "interface": interface}
    if ips:
        found["ips"] = list(ips)
    if mac:
        found["mac"] = mac
    found["default"] = default
    return found


# blue/web's network-status: the default network on eth0 and blue/net-a on net1.
WEB_STATUS = [
    entry(DEFAULT_NETWORK, "eth0", ["10.80.0.5/24"], mac="0a:58:0a:50:00:05", default=True),
    entry("blue/net-a", "net1", ["10.81.0.5/24"], mac="0a:58:0a:51:00:05"),
]


class DirectoryNode:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.manifests = root / "manifests"
        self.networks = root / "networks"
        for directory in (self.manifests, self.networks):
            directory.mkdir(parents=True, exist_ok=True)
        self.settings = root / "settings.yaml"
        self.settings.write_text(
            yaml.safe_dump(
                {
                    "clusterNetwork": DEFAULT_NETWORK,
                    "networksDir": str(self.networks),
                    "stateDir": str(root / "state"),
                    "feed": {"directory": str(self.manifests)},
                }
            )
        )
        default = {
            "cniVersion": "1.0.0",
            "name": DEFAULT_NETWORK,
            "plugins": [bridge_config("10.80.0.0/24", "na-br-default")],
        }
        (self.networks / "00-default.conflist").write_text(json.dumps(default))
        self._count = 0

    def _write(self, obj: Mapping[str, Any]) -> None:
        self._count += 1
        path = self.manifests / f"{self._count:03d}-{obj['kind'].lower()}.yaml"
        path.write_text(yaml.safe_dump(dict(obj), sort_keys=False))

    def add_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        metadata: dict[str, Any] = {"name": name}
        if labels:
            metadata["labels"] = dict(labels)
        self._write({"apiVersion": "v1", "kind": "Namespace", "metadata": metadata})

    def add_nad(self, namespace: str, name: str, config: Mapping[str, Any]) -> None:
        self._write(
            {
                "apiVersion": "k8s.cni.cncf.io/v1",
                "kind": "NetworkAttachmentDefinition",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"config": json.dumps(dict(config))},
            }
        )

    def add_pod(
        self,
        namespace: str,
        name: str,
        networks: str | None = None,
        *,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}"}
        if labels:
            metadata["labels"] = dict(labels)
        if networks is not None:
            metadata["annotations"] = {NETWORKS_ANNOTATION: networks}
        self._write({"apiVersion": "v1", "kind": "Pod", "metadata": metadata})

    def add_policy(
        self, namespace: str, name: str, policy_for: str, spec: Mapping[str, Any]
    ) -> None:
        self._write(
            {
                "apiVersion": "k8s.cni.cncf.io/v1beta1",
                "kind": "MultiNetworkPolicy",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": f"uid-{name}",
                    "annotations": {POLICY_FOR: policy_for},
                },
                "spec": dict(spec),
            }
        )

    def write_status(self, namespace: str, pod: str, entries: Sequence[Mapping[str, Any]]) -> None:
        path = self.manifests / "status" / namespace / f"{pod}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(list(entries), indent=2))


@pytest.fixture
def directory_node(tmp_path: Path) -> DirectoryNode:
    return DirectoryNode(tmp_path / "node")


def scrubbed_env(**extra: str) -> dict[str, str]:
    """The test's environment without a kubeconfig of the machine's, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG",)}
    env.update(extra)
    return env
