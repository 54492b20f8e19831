"""deploy/: the DaemonSet keeps every state its settings let a delegate write (KUBE-DEPLOY).

Delegates run inside the daemon's container. A directory a NAD may name as `dataDir` that is no
host mount lives in the container's writable layer: host-local's allocations there vanish when
the daemon pod is recreated, and two pods get one address. So every directory
`delegatePolicy.dataDir` allows, and each reference plugin's own state directory that the policy
allows, must be a `hostPath` of the DaemonSet mounted at its own path.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import pytest
import yaml

from netattach.guard import globs
from netattach.settings import settings
from tests.repo.deploy_files import one

# Where the reference plugins keep state when a NAD names no `dataDir` (containernetworking/
# plugins: host-local's defaultDataDir, tuning's defaultDataDir, dhcp's default socket).
PLUGIN_STATE_DIRS = {
    "host-local": "/var/lib/cni/networks",
    "tuning": "/run/cni/tuning",
    "dhcp": "/run/cni",
}


def host_paths(*, read_only: bool = False) -> dict[PurePosixPath, PurePosixPath]:
    """The daemon container's writable mounts of node directories (the read-only ones too with
    `read_only`): mountPath -> the node's path."""
    pod = one("DaemonSet")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    volumes: dict[str, dict[str, Any]] = {v["name"]: v for v in pod["volumes"]}
    found: dict[PurePosixPath, PurePosixPath] = {}
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "hostPath" in volume and (read_only or not mount.get("readOnly", False)):
            found[PurePosixPath(mount["mountPath"])] = PurePosixPath(volume["hostPath"]["path"])
    return found


def on_the_node(directory: str) -> PurePosixPath | None:
    """The node's path that `directory` in the container is, or None when no mount holds it."""
    path = PurePosixPath(directory)
    holders = [m for m in host_paths() if m == path or m in path.parents]
    if not holders:
        return None
    mount = max(holders, key=lambda m: len(m.parts))  # the innermost mount wins
    return host_paths()[mount] / path.relative_to(mount)


def deploy_settings() -> settings.Settings:
    raw = yaml.safe_load(one("ConfigMap")["data"]["settings.yaml"])
    return settings.parse_settings(raw, source="deploy/configmap.yaml")


def allowed_data_dirs() -> list[globs.Prefixes]:
    """`delegatePolicy.dataDir` of deploy/configmap.yaml: the cluster-wide list and each
    namespace rule's."""
    shipped = deploy_settings().networks.delegate_policy
    rule_sets = [shipped.rules, *(entry.rules for entry in shipped.namespaces)]
    return [rules.data_dir for rules in rule_sets]


@pytest.fixture(autouse=True)
def node_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "node-1")


@pytest.mark.req("KUBE-DEPLOY")
def test_every_data_dir_the_policy_allows_is_the_nodes_own() -> None:
    directories = [d for allowed in allowed_data_dirs() for d in allowed.included]

    assert directories, "deploy/configmap.yaml's delegatePolicy.dataDir allows nothing"
    for directory in directories:
        assert on_the_node(directory) == PurePosixPath(directory), (
            f"delegatePolicy.dataDir allows {directory!r}, which deploy/daemonset.yaml does not "
            "mount from the node at the same path"
        )


@pytest.mark.req("KUBE-DEPLOY")
@pytest.mark.parametrize(("plugin", "directory"), sorted(PLUGIN_STATE_DIRS.items()))
def test_each_reference_plugins_default_state_is_the_nodes_own(plugin: str, directory: str) -> None:
    if not any(allowed.allows(directory) for allowed in allowed_data_dirs()):
        pytest.skip(f"delegatePolicy.dataDir does not let {plugin} write {directory!r}")
    assert on_the_node(directory) == PurePosixPath(directory), (
        f"{plugin} keeps its state in {directory!r}, which deploy/daemonset.yaml does not mount "
        "from the node at the same path"
    )


def test_a_directory_no_mount_holds_is_found() -> None:
    assert on_the_node("/srv/ipam") is None
    inside = "/var/lib/cni/networks/net-a"
    assert on_the_node(inside) == PurePosixPath(inside)


@pytest.mark.req("KUBE-DEPLOY")
@pytest.mark.req("DEV-RESOURCE")
def test_the_kubelets_pod_resources_directory_is_mounted_at_its_own_path() -> None:
    """The directory of the settings' podResourcesSocket, not the socket: a restarted kubelet
    makes a new socket there, which a mount of the old socket would not show."""
    socket = PurePosixPath(deploy_settings().networks.pod_resources_socket)
    mounts = host_paths(read_only=True)

    assert mounts.get(socket.parent) == socket.parent, (
        f"deploy/daemonset.yaml does not mount the node's {socket.parent} at the same path"
    )
    assert socket not in mounts


@pytest.mark.req("KUBE-DEPLOY")
@pytest.mark.req("DEV-INFO")
@pytest.mark.parametrize("kind", ["dp", "cni"])
def test_the_device_info_directory_is_the_nodes_own(kind: str) -> None:
    """Device plugins write `dp/` on the node; netattach and its delegates write `cni/` in the
    daemon's container: both are the settings' deviceInfoDir on the node."""
    directory = PurePosixPath(deploy_settings().networks.device_info_dir) / kind
    assert on_the_node(str(directory)) == directory, (
        f"deploy/daemonset.yaml does not mount the node's {directory} writable at the same path"
    )
