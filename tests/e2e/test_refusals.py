"""Selections and NADs refused before any delegate runs, and how NADs resolve to networks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.harness import NOTHING, Cluster, assert_refused, bridge_list, host_local, net_a

pytestmark = pytest.mark.netns


INVALID = [
    pytest.param(
        [{"name": "net-a", "ips": ["10.81.0.300"]}],
        "networks[0].ips[0]: '10.81.0.300' is not an IPv4 or IPv6 address or CIDR",
        id="ips",
    ),
    pytest.param(
        [{"name": "net-a", "mac": "02:11:22:33:44"}],
        "networks[0].mac: '02:11:22:33:44' is not a 6-byte Ethernet or 20-byte InfiniBand address",
        id="mac",
    ),
    pytest.param(
        [{"name": "net-a", "interface": "net/1"}],
        "networks[0].interface: 'net/1' is not a valid interface name",
        id="interface-slash",
    ),
    pytest.param(
        [{"name": "net-a", "interface": "a-sixteen-chars!"}],
        "networks[0].interface: 'a-sixteen-chars!' is not a valid interface name",
        id="interface-long",
    ),
    pytest.param(
        "net-a@..",
        "networks[0].interface: '..' is not a valid interface name",
        id="interface-comma-form",
    ),
    pytest.param(
        [{"name": "net-a", "colour": "blue"}],
        "networks[0]: unknown key 'colour' (keys without a '.' are reserved for the standard",
        id="reserved-key",
    ),
    pytest.param(
        [
            {"name": "net-a", "default-route": ["10.81.0.1"]},
            {"name": "net-a", "default-route": ["10.81.0.1"]},
        ],
        "networks[1].default-route: only one selection may carry 'default-route', "
        "networks[0] already does",
        id="two-default-routes",
    ),
    pytest.param(
        '[{"name": "net-a",]',
        "networks: not valid JSON (Expecting property name enclosed in double quotes: "
        'line 1 column 19 (char 18)): \'[{"name": "net-a",]\'',
        id="bad-json",
    ),
]


@pytest.mark.req("SEL-INVALID", "SEL-RESERVED")
@pytest.mark.parametrize(("networks", "quoted"), INVALID)
def test_invalid_selection_is_refused_before_anything_runs(
    cluster: Cluster, networks: str | list[dict[str, Any]], quoted: str
) -> None:
    net_a(cluster)
    pod = cluster.pod("blue", "web", networks)

    reply = assert_refused(
        cluster.add(pod), "[blue/web/uid-web] invalid network selection annotation of pod blue/web"
    )
    assert quoted in reply.out["details"]
    cluster.nothing_ran()
    assert cluster.status("blue", "web") is None


@pytest.mark.req("NAD-RESOLVE")
def test_missing_nad_fails_with_101_naming_it(cluster: Cluster) -> None:
    net_a(cluster)
    pod = cluster.pod("blue", "web", "net-a,net-zz")

    reply = cluster.add(pod)

    assert reply.rc == 1
    assert reply.code == 101
    assert reply.out["msg"] == (
        "[blue/web/uid-web] NetworkAttachmentDefinition blue/net-zz not found"
    )
    cluster.nothing_ran()


@pytest.mark.req("NAD-RESOLVE")
def test_nad_without_config_and_no_file_fails_naming_nad_and_directory(cluster: Cluster) -> None:
    cluster.add_nad("blue", "net-d", None)  # spec: {} (no config), and nothing on disk
    pod = cluster.pod("blue", "web", "net-d")

    reply = cluster.add(pod)

    assert reply.rc == 1
    assert reply.code == 101
    assert reply.out["msg"] == (
        "[blue/web/uid-web] NetworkAttachmentDefinition blue/net-d has no spec.config, and no "
        f"CNI config list or config named 'net-d' was found in {str(cluster.networks)!r}"
    )
    cluster.nothing_ran()


def on_disk(cluster: Cluster, name: str) -> None:
    """A .conf (first in lexical order) and a .conflist both named `name`, on other subnets."""
    conf = bridge_list(name, host_local(cluster.ipam, "10.83.0.0/24"))["plugins"][0]
    cluster.write_network_file(f"10-{name}.conf", {"cniVersion": "1.0.0", "name": name, **conf})
    cluster.write_network_file(
        f"20-{name}.conflist", bridge_list(name, host_local(cluster.ipam, "10.84.0.0/24"))
    )


def net1_address(cluster: Cluster, netns: str) -> list[str]:
    return [a for a in cluster.interfaces(netns)["net1"].addresses if ":" not in a]


@pytest.mark.req("NAD-RESOLVE")
def test_spec_config_first_then_conflist_before_conf(cluster: Cluster) -> None:
    on_disk(cluster, "net-d")
    cluster.add_nad("blue", "net-d", None)  # spec without config: the disk, conflist first
    cluster.add_nad("blue", "net-e", bridge_list(None, host_local(cluster.ipam, "10.85.0.0/24")))
    on_disk(cluster, "net-e")  # spec.config (10.85.0.0/24) wins over both files
    pod = cluster.pod("blue", "web", "net-d,net-e")

    reply = cluster.add(pod)
    assert reply.rc == 0, reply

    kernel = cluster.interfaces(pod.netns)
    assert [a for a in kernel["net1"].addresses if ":" not in a] == ["10.84.0.2/24"]
    assert [a for a in kernel["net2"].addresses if ":" not in a] == ["10.85.0.2/24"]
    assert cluster.delete(pod).rc == 0
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("NAD-IMPLICIT")
def test_nad_without_spec_uses_the_network_on_disk(cluster: Cluster) -> None:
    on_disk(cluster, "net-d")
    cluster.add_nad("blue", "net-d", None, spec=False)
    pod = cluster.pod("blue", "web", "net-d")

    reply = cluster.add(pod)
    assert reply.rc == 0, reply

    assert net1_address(cluster, pod.netns) == ["10.84.0.2/24"]
    status = cluster.status("blue", "web")
    assert status is not None
    assert status[1]["name"] == "blue/net-d"
    assert cluster.allocations()[1:] == ["net-d/10.84.0.2"]
    assert cluster.delete(pod).rc == 0
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("NAD-NAMEINJ")
def test_spec_config_without_name_gets_the_nad_name(cluster: Cluster) -> None:
    unnamed = bridge_list(None, host_local(cluster.ipam, "10.81.0.0/24"))
    assert "name" not in unnamed
    cluster.add_nad("blue", "net-a", unnamed)
    pod = cluster.pod("blue", "web", "net-a")

    reply = cluster.add(pod)
    assert reply.rc == 0, reply

    status = cluster.status("blue", "web")
    assert status is not None
    assert status[1]["name"] == "blue/net-a"
    # host-local keeps its files under the network name the delegates were given
    assert cluster.allocations()[1:] == ["net-a/10.81.0.2"]
    record = cluster.state / "cache" / "results" / f"net-a:{pod.container_id}:net1"
    assert json.loads(record.read_text())["config"]["name"] == "net-a"
    assert cluster.delete(pod).rc == 0
    assert cluster.leftovers() == NOTHING


BAD_CONFIGS = [
    pytest.param("{not json", "invalid spec.config: not valid JSON (", id="not-json"),
    pytest.param(
        '{"cniVersion": "1.0.0", "name": "net-bad"}',
        "invalid spec.config: it has neither 'type' (a config) nor 'plugins' (a config list)",
        id="no-type",
    ),
    pytest.param(
        '{"cniVersion": "1.0.0", "name": "net-bad", "type": "../bridge"}',
        "plugin type '../bridge' must be a plain file name",
        id="path-in-type",
    ),
    pytest.param(
        '{"cniVersion": "1.0.0", "name": "net-bad", "plugins": [{"type": "/usr/lib/cni/bridge"}]}',
        "plugin type '/usr/lib/cni/bridge' must be a plain file name",
        id="path-in-list",
    ),
]


@pytest.mark.req("NAD-BADCONF")
@pytest.mark.parametrize(("config", "problem"), BAD_CONFIGS)
def test_bad_spec_config_is_refused_naming_the_nad(
    cluster: Cluster, config: str, problem: str
) -> None:
    net_a(cluster)
    cluster.add_nad("blue", "net-bad", config)
    pod = cluster.pod("blue", "web", "net-a,net-bad")

    reply = cluster.add(pod)

    assert reply.rc == 1
    assert reply.code == 7
    assert reply.out["msg"].startswith(
        "[blue/web/uid-web] NetworkAttachmentDefinition blue/net-bad: invalid spec.config: "
    )
    assert problem in reply.text
    cluster.nothing_ran()


@pytest.mark.req("RT-RESTRICT")
def test_namespace_isolation_refuses_other_namespaces(cluster: Cluster) -> None:
    cluster.add_nad("red", "net-x", bridge_list(None, host_local(cluster.ipam, "10.86.0.0/24")))
    pod = cluster.pod("blue", "web", "red/net-x")

    reply = assert_refused(
        cluster.add(pod), "[blue/web/uid-web] pod in namespace 'blue' may not select red/net-x"
    )
    assert reply.out["details"] == ("namespace isolation allows the pod's own namespace and other")
    cluster.nothing_ran()


@pytest.mark.req("RT-RESTRICT")
@pytest.mark.parametrize(
    "settings",
    [{"globalNamespaces": ["other", "red"]}, {"namespaceIsolation": False}],
    ids=["red-global", "isolation-off"],
)
def test_global_namespace_or_isolation_off_allows_it(
    cluster: Cluster, settings: dict[str, Any]
) -> None:
    cluster.settings.update(settings)
    cluster.add_nad("red", "net-x", bridge_list(None, host_local(cluster.ipam, "10.86.0.0/24")))
    pod = cluster.pod("blue", "web", "red/net-x")

    reply = cluster.add(pod)
    assert reply.rc == 0, reply

    status = cluster.status("blue", "web")
    assert status is not None
    assert [e["name"] for e in status][1:] == ["red/net-x"]
    assert cluster.delete(pod).rc == 0
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("RT-UID")
def test_uid_of_a_recreated_pod_is_refused(cluster: Cluster) -> None:
    net_a(cluster)
    pod = cluster.pod("blue", "web", "net-a", uid="2222-new")

    reply = cluster.add(pod, uid="1111-old")

    assert reply.rc == 1
    assert reply.code == 3
    assert reply.out["msg"] == (
        "[blue/web/1111-old] the runtime asks for pod UID 1111-old, the pod has UID 2222-new"
    )
    cluster.nothing_ran()
    # The right UID attaches.
    assert cluster.add(pod).rc == 0
    assert cluster.delete(pod).rc == 0
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("KUBE-ARGS")
def test_pod_not_in_the_cluster_is_refused(cluster: Cluster) -> None:
    net_a(cluster)
    pod = cluster.pod("blue", "web", "net-a")

    reply = cluster.cni("ADD", pod.netns, pod.container_id, "blue", "gone", uid="u-1")

    assert reply.rc == 1
    assert reply.code == 3
    assert reply.out["msg"] == "[blue/gone/u-1] pod not found"
    cluster.nothing_ran()
