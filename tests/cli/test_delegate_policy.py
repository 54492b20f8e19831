"""`netattach validate` and `netattach status` report the NADs the delegate policy would refuse,
before any pod selects them (SEC-DELEGATE), naming the NAD, the key, the value and the rule."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli.harness import DirectoryNode, bridge_config, netattach
from tests.e2e.daemon_harness import DaemonNode
from tests.e2e.harness import bridge_list, host_local

HOST_DEVICE: dict[str, object] = {"cniVersion": "1.0.0", "type": "host-device", "device": "eth0"}


def nad(namespace: str, name: str, config: Mapping[str, Any]) -> dict[str, object]:
    return {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"config": json.dumps(config)},
    }


@pytest.mark.req("SEC-DELEGATE")
def test_validate_refuses_a_nad_by_the_default_policy(tmp_path: Path) -> None:
    path = tmp_path / "nads.yaml"
    path.write_text(
        yaml.safe_dump_all(
            [nad("blue", "uplink", HOST_DEVICE), nad("blue", "ok", bridge_config(None, "br1"))]
        )
    )

    done = netattach("validate", str(path))

    assert done.rc == 1
    assert done.lines == [
        f"{path} NetworkAttachmentDefinition blue/uplink: refused by the delegate policy: "
        'plugins[0].type "host-device" is not allowed by delegatePolicy.types [bridge, macvlan, '
        "ipvlan, ptp, vlan, host-local, static, dhcp, tuning, bandwidth, sbr, vrf, netattach]",
        f"{path} NetworkAttachmentDefinition blue/uplink: refused by the delegate policy: "
        'plugins[0].device "eth0" is not allowed by delegatePolicy.device []',
        "2 objects checked, 2 problems",
    ]


@pytest.mark.req("SEC-DELEGATE")
def test_validate_uses_the_settings_and_namespaces_it_is_given(tmp_path: Path) -> None:
    settings = {
        "clusterNetwork": "default-net",
        "feed": {"directory": "/m"},
        "delegatePolicy": {
            "namespaces": [
                {
                    "namespaceSelector": {"matchLabels": {"netattach.io/uplinks": "yes"}},
                    "types": ["host-device"],
                    "device": ["eth0"],
                }
            ]
        },
    }
    namespace = {"apiVersion": "v1", "kind": "Namespace"}
    docs = [
        {**namespace, "metadata": {"name": "radio", "labels": {"netattach.io/uplinks": "yes"}}},
        nad("radio", "uplink", HOST_DEVICE),
        nad("blue", "uplink", HOST_DEVICE),
    ]
    (tmp_path / "settings.yaml").write_text(yaml.safe_dump(settings))
    (tmp_path / "objects.yaml").write_text(yaml.safe_dump_all(docs))

    done = netattach("validate", str(tmp_path / "objects.yaml"), str(tmp_path / "settings.yaml"))

    assert done.rc == 1
    refused = [line for line in done.lines if "refused" in line]
    assert [line.split(":")[0].split()[-1] for line in refused] == ["blue/uplink", "blue/uplink"]
    assert done.lines[-1] == "3 objects checked, 2 problems"  # the Namespace is not checked


@pytest.mark.req("SEC-DELEGATE")
def test_status_of_a_directory_node_lists_the_nads_the_policy_refuses(
    directory_node: DirectoryNode,
) -> None:
    directory_node.add_namespace("blue")
    directory_node.add_nad("blue", "ok", bridge_config("10.81.0.0/24", "na-br-a"))
    directory_node.add_nad(
        "blue", "sysctl", {"cniVersion": "1.0.0", "type": "tuning", "sysctl": {"kernel.x": "1"}}
    )

    done = netattach("status", "--config", str(directory_node.settings))

    assert done.rc == 1
    assert done.lines[:-1] == [
        "problem: NetworkAttachmentDefinition blue/sysctl: refused by the delegate policy: "
        'plugins[0].sysctl["kernel.x"] "kernel.x" is not allowed by delegatePolicy.sysctl [net.*]'
    ]
    assert done.lines[-1].startswith("0 pods, 1 problem ")


@pytest.mark.netns
@pytest.mark.req("SEC-DELEGATE")
def test_status_from_the_daemon_lists_the_nads_its_policy_refuses(daemon: DaemonNode) -> None:
    cluster = daemon.cluster
    cluster.add_nad("blue", "net-a", bridge_list(None, host_local(cluster.ipam, "10.81.0.0/24")))
    cluster.add_nad("blue", "uplink", HOST_DEVICE)
    web = cluster.pod("blue", "web", "net-a")
    daemon.start()
    assert daemon.shim("ADD", web).rc == 0, daemon.log_text()

    done = netattach("status", "--socket", str(daemon.socket))

    assert done.rc == 1
    assert done.lines[-2] == (
        "problem: NetworkAttachmentDefinition blue/uplink: refused by the delegate policy: "
        'plugins[0].type "host-device" is not allowed by delegatePolicy.types [bridge, macvlan, '
        "ipvlan, ptp, vlan, host-local, static, dhcp, tuning, bandwidth, sbr, vrf, netattach, "
        'na-*]; plugins[0].device "eth0" is not allowed by delegatePolicy.device []'
    )
    assert done.lines[-1] == f"1 pod, 1 problem (from the daemon at {daemon.socket})"
    assert daemon.shim("DEL", web).rc == 0
