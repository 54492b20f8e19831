"""The node image, run as deploy/daemonset.yaml says, attaches the pods containerd creates.

`make image`'s archive (tests/node/node_image.py builds it once per set of inputs) is imported
into the tier's containerd, and the DaemonSet's container runs from it (tests/node/daemonset.py:
host network, privileged, its command, `NODE_NAME`, every volume mount onto a directory standing
in for the host path: containerd's own CNI `bin_dir` and `conf_dir` for /opt/cni/bin and
/etc/cni/net.d). Its settings are deploy/configmap.yaml's, with the API named by a kubeconfig (the
in-repo API server in the node's network) instead of a service account. Then only containerd
and the API are used: the shim the container installed on the "host" is what containerd runs.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.daemon_harness import wait_for
from tests.e2e.kube_harness import RemoteKubeApi
from tests.netns_fixtures import unique
from tests.node import daemonset
from tests.node.api_view import api_events, api_status, nad_object, pod_object, shown
from tests.node.containerd import CNI_PLUGINS, RUNTIME_PATH
from tests.node.harness import Kubelet, NodeHost
from tests.node.node_image import node_image_archive

pytestmark = [pytest.mark.netns, pytest.mark.req("KUBE-NODE")]

NS = "blue"
DEFAULT_SUBNET = "10.80.0.0/24"
NET_A = "10.91.0.0/24"
READY_TIMEOUT = 120.0
METRICS_PORT = 9108  # deploy/configmap.yaml's metrics address, the DaemonSet's probes' port


@pytest.fixture(scope="session")
def node_image(node_host: NodeHost) -> str:
    """The image `make image` builds, imported into the tier's containerd; its name."""
    archive = node_image_archive()
    daemonset.ctr(node_host.containerd, "images", "import", str(archive), timeout=900)
    names = daemonset.ctr(node_host.containerd, "images", "ls", "--quiet").split()
    wanted = daemonset.load_one(daemonset.DAEMONSET, "DaemonSet")["spec"]["template"]["spec"][
        "containers"
    ][0]["image"]
    assert wanted in names, f"the archive holds {names}, the DaemonSet runs {wanted}"
    return str(wanted)


class StandIns:
    """Directories standing in for the host paths the DaemonSet mounts."""

    def __init__(self, host: NodeHost) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="na-ds-"))
        self.state = self.base / "var-lib-netattach"
        self.cni_state = self.base / "var-lib-cni"
        self.cni_run = self.base / "run-cni"
        self.run = self.base / "run-netattach"
        self.settings = self.base / "configmap"
        self.pod_resources = self.base / "var-lib-kubelet-pod-resources"
        self.device_info = self.base / "devinfo"
        for directory in (
            self.state,
            self.cni_state,
            self.cni_run,
            self.run,
            self.settings,
            self.pod_resources,
            self.device_info,
        ):
            directory.mkdir()
        self.paths = {
            "/opt/cni/bin": host.containerd.cni_bin_dir,
            "/etc/cni/net.d": host.containerd.cni_conf_dir,
            "/var/lib/netattach": self.state,
            "/var/lib/cni": self.cni_state,
            "/run/cni": self.cni_run,
            "/run/netattach": self.run,
            # containerd 1.6 makes every sandbox's netns here: the real path is the stand-in
            "/run/netns": Path("/run/netns"),
            "/var/lib/kubelet/pod-resources": self.pod_resources,
            "/var/run/k8s.cni.cncf.io/devinfo": self.device_info,
        }

    def allocations(self) -> list[str]:
        directory = self.cni_state / "networks"
        return sorted(
            str(p.relative_to(directory))
            for p in directory.rglob("*")
            if p.is_file() and not p.name.startswith(("last_reserved_ip", "lock"))
        )

    def records(self) -> list[str]:
        return sorted(p.name for p in (self.state / "pods").glob("*") if p.is_file())


def settings_for(pod: daemonset.DaemonSetPod, kubeconfig_inside: str) -> dict[str, Any]:
    """deploy/configmap.yaml's settings; paths moved with identity mounts; the API by kubeconfig."""
    text = daemonset.load_one(daemonset.CONFIGMAP, "ConfigMap")["data"]["settings.yaml"]
    raw = yaml.safe_load(text)
    assert isinstance(raw, dict)

    def moved(value: Any) -> Any:
        if isinstance(value, str) and value.startswith("/"):
            return pod.rewrite(value)
        if isinstance(value, list):
            return [moved(v) for v in value]
        if isinstance(value, dict):
            return {k: moved(v) for k, v in value.items()}
        return value

    settings: dict[str, Any] = moved(raw)
    settings["feed"] = {"kubernetes": {"kubeconfig": kubeconfig_inside}}
    return settings


def installed_conflist(host: NodeHost) -> dict[str, Any] | None:
    path = host.containerd.cni_conf_dir / "00-netattach.conflist"
    with contextlib.suppress(FileNotFoundError, ValueError):
        raw = json.loads(path.read_text())
        assert isinstance(raw, dict)
        return raw
    return None


def shim_version(host: NodeHost) -> dict[str, Any]:
    """CNI VERSION of the installed shim, run on the host as containerd runs it."""
    done = subprocess.run(
        [str(host.containerd.cni_bin_dir / "netattach")],
        input=b'{"cniVersion": "1.0.0"}',
        env={"PATH": RUNTIME_PATH, "CNI_COMMAND": "VERSION"},
        capture_output=True,
        timeout=30,
        check=True,
    )
    raw = json.loads(done.stdout)
    assert isinstance(raw, dict)
    return raw


@contextlib.contextmanager
def delegates_on_the_host(host: NodeHost) -> Iterator[None]:
    """The reference plugins the default network and the NAD use, in the host's /opt/cni/bin
    stand-in (as on a node); removed afterwards with the shim the container installed."""
    bin_dir = host.containerd.cni_bin_dir
    added = [bin_dir / name for name in ("bridge", "host-local")]
    for path in added:
        shutil.copy2(CNI_PLUGINS / path.name, path)
    try:
        yield
    finally:
        for path in added:
            path.unlink(missing_ok=True)
        (bin_dir / "netattach").unlink(missing_ok=True)
        for copy in bin_dir.glob("netattach.d-*"):
            shutil.rmtree(copy, ignore_errors=True)


@pytest.mark.req("KUBE-DEPLOY")
def test_the_daemonset_container_from_the_image_attaches_the_pods_containerd_creates(
    node_host: NodeHost, node_image: str, kube_api: RemoteKubeApi
) -> None:
    containerd = node_host.containerd
    standins = StandIns(node_host)
    pod = daemonset.DaemonSetPod.from_manifests(
        node_name=node_host.node.name,
        host_paths=standins.paths,
        config_maps={"netattach": standins.settings},
    )
    assert pod.image == node_image
    assert (pod.host_network, pod.privileged) == (True, True)
    settings_mount = next(m.target for m in pod.mounts if m.source == standins.settings)
    kube_api.write_kubeconfig(standins.settings / "kubeconfig")
    settings = settings_for(pod, f"{settings_mount}/kubeconfig")
    (standins.settings / "settings.yaml").write_text(yaml.safe_dump(settings))
    conf_dir = containerd.cni_conf_dir
    (conf_dir / "00-netattach.conflist").unlink(missing_ok=True)  # another test's
    default = conf_dir / "10-cluster-default.conflist"
    default.write_text(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": settings["clusterNetwork"],
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": unique("br"),
                        "isGateway": True,
                        "ipam": {
                            "type": "host-local",
                            "subnet": DEFAULT_SUBNET,
                            "routes": [{"dst": "0.0.0.0/0"}],
                        },
                    }
                ],
            }
        )
    )
    kube_api.create(
        nad_object(
            "net-a",
            NS,
            {
                "cniVersion": "1.0.0",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": unique("br"),
                        "ipam": {"type": "host-local", "subnet": NET_A},
                    }
                ],
            },
        )
    )
    api_pod = kube_api.create(pod_object("web", NS, node_host.node.name, "net-a"))
    container_id = f"na-ds-{secrets.token_hex(4)}"
    log = standins.base / "container.log"
    kubelet = Kubelet(node_host)
    try:
        with delegates_on_the_host(node_host):
            daemonset.ctr(containerd, *pod.run_args(container_id, log, containerd.runc_root))

            def ready() -> bool:
                if daemonset.task_status(containerd, container_id) != "RUNNING":
                    pytest.fail(f"the container stopped:\n{log.read_text(errors='replace')}")
                reply = kube_api.http_get(METRICS_PORT, "/readyz")
                return reply.get("status") == 200

            wait_for("the DaemonSet's readiness probe (/readyz) to pass", ready, READY_TIMEOUT)
            conflist = installed_conflist(node_host)
            assert conflist is not None, log.read_text(errors="replace")
            wait_for("containerd's NetworkReady", node_host.network_ready, 10.0)
            (plugin,) = conflist["plugins"]
            assert plugin["daemonSocket"] == settings["daemonSocket"]
            assert Path(settings["daemonSocket"]).is_socket()
            assert "1.0.0" in shim_version(node_host)["supportedVersions"]

            sandbox = kubelet.run(kubelet.spec(NS, "web", api_pod["metadata"]["uid"], "net-a"))

            kernel = kubelet.interfaces(sandbox)
            assert sorted(kernel) == ["eth0", "net1"]
            status = wait_for(
                "the pod's network-status", lambda: api_status(kube_api, NS, "web"), 30.0
            )
            assert shown(status) == [(settings["clusterNetwork"], "eth0"), (f"{NS}/net-a", "net1")]
            for entry, subnet in zip(status, (DEFAULT_SUBNET, NET_A), strict=True):
                (ip,) = entry["ips"]
                assert ipaddress.ip_interface(ip) in ipaddress.ip_network(subnet)
                assert ip in kernel[entry["interface"]].addresses
            assert len(api_events(kube_api, NS, "web", "AddedInterface")) == 2
            assert len(standins.allocations()) == 2
            assert standins.records() == [f"{sandbox.id}.json"]

            kubelet.teardown(sandbox.id)

            assert kubelet.sandbox_ids() == []
            assert standins.allocations() == []
            assert standins.records() == []
            assert kubelet.netns_left() == []
            assert [n for n in node_host.node_links() if n.startswith("veth")] == []

            # SIGTERM, as kubelet stops it (an upgrade): the ConfigMap keeps the conflist
            # (cleanupOnExit: false), so pods created meanwhile wait for the next daemon
            # instead of starting on the default network alone
            assert daemonset.stop(containerd, container_id) == "STOPPED"
            assert installed_conflist(node_host) is not None
    finally:
        kubelet.remove_all()
        with contextlib.suppress(RuntimeError):
            daemonset.stop(containerd, container_id, grace=5)
        default.unlink(missing_ok=True)
        node_host.clear_links()
        shutil.rmtree(standins.base, ignore_errors=True)
