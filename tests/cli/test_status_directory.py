"""`netattach status --config SETTINGS`: the pods of a directory-feed node, from its manifests and
the status files beside them, each checked against what its selection and networks promise."""

from __future__ import annotations

import json

import yaml

from tests.cli import harness
from tests.cli.harness import (
    DEFAULT_NETWORK,
    DirectoryNode,
    bridge_config,
    entry,
    netattach,
)

# blue/web's network-status with a third attachment, blue/raw on net2, that has no address.
WEB_STATUS = [*harness.WEB_STATUS, entry("blue/raw", "net2", mac="0a:58:0a:52:00:05")]
DENY_WEB = {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress"]}


def blue(node: DirectoryNode) -> None:
    """Namespace blue: net-a (host-local IPAM), raw (a bridge without IPAM), pod web on both."""
    node.add_namespace("blue")
    node.add_nad("blue", "net-a", bridge_config("10.81.0.0/24", "na-br-a"))
    node.add_nad("blue", "raw", bridge_config(None, "na-br-raw"))
    node.add_pod("blue", "web", "net-a,raw", labels={"app": "web"})


def status(node: DirectoryNode, *args: str) -> tuple[int, list[str], str]:
    done = netattach("status", "--config", str(node.settings), *args)
    return done.rc, done.lines, done.stderr


def test_a_healthy_pod_is_a_table_of_its_attachments_and_status_0(
    directory_node: DirectoryNode,
) -> None:
    blue(directory_node)
    directory_node.write_status("blue", "web", WEB_STATUS)

    rc, lines, stderr = status(directory_node)

    assert (rc, stderr) == (0, "")
    assert lines[0] == "blue/web  uid=uid-web"
    assert lines[1].split() == ["NETWORK", "INTERFACE", "IPS", "MAC", "DEFAULT", "POLICY"]
    assert [line.split() for line in lines[2:5]] == [
        [DEFAULT_NETWORK, "eth0", "10.80.0.5/24", "0a:58:0a:50:00:05", "yes", "-"],
        ["blue/net-a", "net1", "10.81.0.5/24", "0a:58:0a:51:00:05", "no", "-"],
        # a network without IPAM gives no address, and that is no problem
        ["blue/raw", "net2", "-", "0a:58:0a:52:00:05", "no", "-"],
    ]
    assert lines[5] == f"1 pod, 0 problems (from the directory feed of {directory_node.settings})"


def test_a_pod_whose_selection_has_no_status_is_a_problem(directory_node: DirectoryNode) -> None:
    blue(directory_node)
    directory_node.write_status("blue", "web", WEB_STATUS)
    directory_node.add_pod("blue", "db", "net-a")

    rc, lines, _ = status(directory_node)

    assert rc == 1
    at = lines.index("blue/db  uid=uid-db")
    assert lines[at + 1 : at + 3] == [
        "  (no attachments)",
        "  problem: selects 'blue/net-a' but has no network-status: not attached yet, or its "
        "ADD failed (see the pod's events)",
    ]
    assert lines[-1].startswith("2 pods, 1 problem ")


def test_an_attachment_without_the_address_its_ipam_gives_is_a_problem(
    directory_node: DirectoryNode,
) -> None:
    blue(directory_node)
    broken = [dict(e) for e in WEB_STATUS]
    del broken[1]["ips"]  # net1 on net-a, whose host-local IPAM gives one
    directory_node.write_status("blue", "web", broken)

    rc, lines, _ = status(directory_node)

    assert rc == 1
    assert (
        "  problem: interface 'net1' of network 'blue/net-a' has no IP address, but its "
        "network assigns addresses (IPAM or requested ips)"
    ) in lines


def test_the_default_networks_ipam_is_read_from_the_node_config(
    directory_node: DirectoryNode,
) -> None:
    blue(directory_node)
    broken = [dict(e) for e in WEB_STATUS]
    del broken[0]["ips"]
    directory_node.write_status("blue", "web", broken)

    rc, lines, _ = status(directory_node)

    assert rc == 1
    assert any(f"interface 'eth0' of network '{DEFAULT_NETWORK}' has no IP" in x for x in lines)


def test_requested_ips_missing_from_the_status_are_a_problem(
    directory_node: DirectoryNode,
) -> None:
    directory_node.add_namespace("blue")
    directory_node.add_nad("blue", "raw", bridge_config(None))
    directory_node.add_pod("blue", "web", json.dumps([{"name": "raw", "ips": ["10.9.0.7/24"]}]))
    directory_node.write_status("blue", "web", [WEB_STATUS[0], entry("blue/raw", "net1")])

    rc, lines, _ = status(directory_node)

    assert rc == 1
    assert any("interface 'net1' of network 'blue/raw' has no IP address" in x for x in lines)


def test_a_selection_the_status_lacks_is_a_problem(directory_node: DirectoryNode) -> None:
    blue(directory_node)
    directory_node.write_status("blue", "web", WEB_STATUS[:2])  # raw (net2) is missing

    rc, lines, _ = status(directory_node)

    assert rc == 1
    assert (
        "  problem: selects network 'blue/raw' on interface 'net2', but its network-status has "
        "no such entry"
    ) in lines


def test_the_policy_column_names_the_policies_governing_each_interface(
    directory_node: DirectoryNode,
) -> None:
    blue(directory_node)
    directory_node.write_status("blue", "web", WEB_STATUS)
    directory_node.add_pod("blue", "other", "net-a", labels={"app": "other"})
    other_default = entry(DEFAULT_NETWORK, "eth0", ["10.80.0.6/24"], default=True)
    directory_node.write_status(
        "blue", "other", [other_default, entry("blue/net-a", "net1", ["10.81.0.6/24"])]
    )
    directory_node.add_policy("blue", "deny-web", "net-a", DENY_WEB)

    rc, lines, _ = status(directory_node, "-o", "json")

    assert rc == 0
    report = json.loads("\n".join(lines))
    policies = {
        (pod["name"], att["interface"]): att["policies"]
        for pod in report["pods"]
        for att in pod["attachments"]
    }
    assert policies == {
        ("other", "eth0"): [],
        ("other", "net1"): [],  # not selected by the podSelector
        ("web", "eth0"): [],  # the default network is not governed
        ("web", "net1"): ["blue/deny-web"],
        ("web", "net2"): [],  # policy-for names net-a only
    }
    rc, table, _ = status(directory_node, "blue/web")
    assert table[3].split()[-2:] == ["governed:", "blue/deny-web"]


def test_an_invalid_policy_is_a_problem_naming_its_field_and_value(
    directory_node: DirectoryNode,
) -> None:
    blue(directory_node)
    directory_node.write_status("blue", "web", WEB_STATUS)
    spec = {"podSelector": {}, "ingress": [{"ports": [{"protocol": "TCP", "port": 70000}]}]}
    directory_node.add_policy("blue", "bad", "net-a", spec)

    rc, lines, _ = status(directory_node)

    assert rc == 1
    assert lines[-2] == (
        "problem: invalid MultiNetworkPolicy blue/bad: spec.ingress[0].ports[0]: port 70000 is "
        "not in 1-65535 (the daemon skips it)"
    )


def test_json_and_yaml_say_the_same_as_data(directory_node: DirectoryNode) -> None:
    blue(directory_node)
    directory_node.write_status("blue", "web", WEB_STATUS)
    directory_node.add_pod("blue", "db", "net-a")

    rc_json, as_json, _ = status(directory_node, "-o", "json")
    rc_yaml, as_yaml, _ = status(directory_node, "--output", "yaml")

    assert rc_json == rc_yaml == 1
    data = json.loads("\n".join(as_json))
    assert data == yaml.safe_load("\n".join(as_yaml))
    assert data["problemCount"] == 1
    assert [(p["namespace"], p["name"], len(p["problems"])) for p in data["pods"]] == [
        ("blue", "db", 1),
        ("blue", "web", 0),
    ]
    web = data["pods"][1]
    assert web["attachments"][1] == {
        "network": "blue/net-a",
        "interface": "net1",
        "ips": ["10.81.0.5/24"],
        "mac": "0a:58:0a:51:00:05",
        "default": False,
        "expectsIPs": True,
        "policies": [],
        "policyApplied": None,
    }


def test_one_pod_by_namespace_slash_name_or_with_n(directory_node: DirectoryNode) -> None:
    blue(directory_node)
    directory_node.write_status("blue", "web", WEB_STATUS)
    directory_node.add_pod("blue", "db", "net-a")  # a problem, but not the pod asked for

    for args in (["blue/web"], ["web", "-n", "blue"]):
        rc, lines, _ = status(directory_node, *args)
        assert rc == 0, lines
        assert lines[0] == "blue/web  uid=uid-web"
        assert lines[-1].startswith("1 pod, 0 problems")

    rc, lines, _ = status(directory_node, "blue/nope")
    assert rc == 1
    assert lines[-2] == (
        f"problem: pod blue/nope: not found in the directory feed of {directory_node.settings}"
    )


def test_a_pod_named_wrongly_is_refused_quoting_it(directory_node: DirectoryNode) -> None:
    rc, _, stderr = status(directory_node, "a/b/c")
    assert rc == 2
    assert stderr == "netattach status: a pod is NAMESPACE/POD or POD, got 'a/b/c'\n"
    rc, _, stderr = status(directory_node, "blue/web", "-n", "red")
    assert rc == 2
    assert "pod 'blue/web' is not in namespace 'red'" in stderr


def test_a_corrupt_status_file_is_a_problem(directory_node: DirectoryNode) -> None:
    blue(directory_node)
    path = directory_node.manifests / "status" / "blue" / "web.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"not": "a list"}')

    rc, lines, _ = status(directory_node)

    assert rc == 1
    assert (
        f"  problem: network-status: corrupt status file {str(path)!r}: not a JSON list of objects"
        in lines
    )


def test_sources_that_cannot_be_read_are_status_2(directory_node: DirectoryNode) -> None:
    missing = directory_node.root / "missing.yaml"
    done = netattach("status", "--config", str(missing))
    assert done.rc == 2
    assert done.stderr.startswith(f"netattach status: cannot use settings {str(missing)!r}: ")

    kube_settings = directory_node.root / "kube.yaml"
    kube_settings.write_text("clusterNetwork: cluster-default\nfeed: {kubernetes: {}}\n")
    done = netattach("status", "--config", str(kube_settings))
    assert done.rc == 2
    assert "use the Kubernetes feed: read that cluster with --kubeconfig" in done.stderr

    socket = directory_node.root / "no-daemon.sock"
    done = netattach("status", "--socket", str(socket))
    assert done.rc == 2
    assert done.stderr.startswith(
        f"netattach status: cannot reach the netattach daemon at {str(socket)!r}: "
    )
    assert "give its socket with --socket" in done.stderr


def test_two_pods_holding_one_address_on_one_network_are_a_problem(
    directory_node: DirectoryNode,
) -> None:
    # What a daemon pod recreated without host-local's state mounted leads to: the address is
    # handed out again on the same bridge.
    blue(directory_node)
    directory_node.add_pod("blue", "db", "net-a")
    directory_node.write_status("blue", "web", WEB_STATUS)
    directory_node.write_status(
        "blue",
        "db",
        [
            entry(DEFAULT_NETWORK, "eth0", ["10.80.0.6/24"], default=True),
            entry("blue/net-a", "net1", ["10.81.0.5/24"]),  # web's address
        ],
    )

    rc, lines, _ = status(directory_node)

    assert rc == 1
    (problem,) = [line for line in lines if line.startswith("problem: ")]
    assert problem.startswith("problem: address 10.81.0.5 on network 'blue/net-a' is held by ")
    assert sorted(problem.split(" is held by ")[1].split(" and ")) == [
        "blue/db (net1)",
        "blue/web (net1)",
    ]
    assert lines[-1].startswith("2 pods, 1 problem ")
