"""`netattach status|graph --kubeconfig` and the kubectl plugin: pods, NADs and policies read from
the API with the user's kubeconfig (the in-repo fake API server, or the real one named by
NETATTACH_TEST_KUBECONFIG), the network-status being the pod's annotation."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.cli.harness import (
    BIN,
    DEFAULT_NETWORK,
    NETWORKS_ANNOTATION,
    POLICY_FOR,
    STATUS_ANNOTATION,
    WEB_STATUS,
    bridge_config,
    entry,
    netattach,
    run,
    scrubbed_env,
)
from tests.kube import objects
from tests.kube.api import KubeApi


def blue_cluster(api: KubeApi, *, web_status: list[dict[str, object]] = WEB_STATUS) -> None:
    """blue/web attached to net-a (its status published), blue/db selecting net-a but never
    attached, a policy on net-a selecting app=web."""
    api.create(objects.namespace("blue"))
    api.create(objects.nad("net-a", "blue", config=bridge_config("10.81.0.0/24")))
    api.create(
        objects.pod(
            "web",
            "blue",
            node_name="node-1",
            labels={"app": "web"},
            annotations={
                NETWORKS_ANNOTATION: "net-a",
                STATUS_ANNOTATION: json.dumps(web_status, indent=4),
            },
        )
    )
    api.create(
        objects.pod("db", "blue", node_name="node-1", annotations={NETWORKS_ANNOTATION: "net-a"})
    )
    spec = {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress"]}
    api.create(objects.policy("deny-web", "blue", spec=spec, policy_for="net-a"))
    # a pod of another namespace with nothing of netattach on it: not listed
    api.create(objects.pod("plain", "default", node_name="node-1"))


def test_status_reads_the_cluster_with_a_kubeconfig(fake_api: KubeApi, kubeconfig: Path) -> None:
    blue_cluster(fake_api)

    done = netattach("status", "--kubeconfig", str(kubeconfig), "-n", "blue")

    assert done.rc == 1, done.stderr  # db has no status
    lines = done.lines
    web = lines.index(next(x for x in lines if x.startswith("blue/web  uid=")))
    assert [line.split() for line in lines[web + 2 : web + 4]] == [
        [DEFAULT_NETWORK, "eth0", "10.80.0.5/24", "0a:58:0a:50:00:05", "yes", "-"],
        [
            "blue/net-a",
            "net1",
            "10.81.0.5/24",
            "0a:58:0a:51:00:05",
            "no",
            "governed:",
            "blue/deny-web",
        ],
    ]
    assert (
        "  problem: selects 'blue/net-a' but has no network-status: not attached yet, or its "
        "ADD failed (see the pod's events)"
    ) in lines
    assert lines[-1] == f"2 pods, 1 problem (from the cluster of {kubeconfig})"
    assert not any(line.startswith("default/plain") for line in lines)


def test_a_pod_without_a_sandbox_yet_or_any_more_is_no_problem(
    fake_api: KubeApi, kubeconfig: Path
) -> None:
    fake_api.create(objects.namespace("blue"))
    selects = {NETWORKS_ANNOTATION: "net-a"}
    fake_api.create(
        objects.pod("pending", "blue", annotations=selects, status={"phase": "Pending"})
    )
    fake_api.create(
        objects.pod(
            "done", "blue", node_name="node-1", annotations=selects, status={"phase": "Succeeded"}
        )
    )

    done = netattach("status", "--kubeconfig", str(kubeconfig), "-o", "json")

    assert done.rc == 0, done.stdout
    report = json.loads(done.stdout)
    assert [(p["name"], p["problems"]) for p in report["pods"]] == [("done", []), ("pending", [])]


def test_a_status_missing_the_address_its_nad_gives_is_a_problem(
    fake_api: KubeApi, kubeconfig: Path
) -> None:
    broken = [WEB_STATUS[0], entry("blue/net-a", "net1", mac="0a:58:0a:51:00:05")]
    blue_cluster(fake_api, web_status=broken)

    done = netattach("status", "blue/web", "--kubeconfig", str(kubeconfig), "-o", "json")

    assert done.rc == 1
    report = json.loads(done.stdout)
    assert report["pods"][0]["problems"] == [
        "interface 'net1' of network 'blue/net-a' has no IP address, but its network assigns "
        "addresses (IPAM or requested ips)"
    ]
    # The cluster source cannot know the node's default network: not checked, not guessed.
    assert report["pods"][0]["attachments"][0]["expectsIPs"] is None


def test_a_pod_that_is_not_there_is_status_1(fake_api: KubeApi, kubeconfig: Path) -> None:
    blue_cluster(fake_api)
    done = netattach("status", "blue/nope", "--kubeconfig", str(kubeconfig))
    assert done.rc == 1
    assert done.lines[-2] == f"problem: pod blue/nope: not found in the cluster of {kubeconfig}"


def test_a_network_status_that_is_not_json_is_a_problem(
    fake_api: KubeApi, kubeconfig: Path
) -> None:
    fake_api.create(objects.namespace("blue"))
    fake_api.create(objects.pod("web", "blue", annotations={STATUS_ANNOTATION: "[{oops"}))

    done = netattach("status", "--kubeconfig", str(kubeconfig))

    assert done.rc == 1
    assert any(
        line.startswith(f"  problem: network-status: annotation {STATUS_ANNOTATION} is not JSON")
        for line in done.lines
    ), done.lines


def test_an_unreachable_api_is_status_2(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on once this closes
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    done = netattach("status", "--kubeconfig", str(config))
    assert done.rc == 2
    assert done.stderr.startswith(f"netattach status: cannot reach the API server of {config}: ")

    done = netattach("status", "--kubeconfig", str(tmp_path / "none"))
    assert done.rc == 2
    assert f"cannot load {tmp_path / 'none'}" in done.stderr


def test_kubectl_netattach_reads_the_users_kubeconfig_by_default(
    fake_api: KubeApi, kubeconfig: Path, tmp_path: Path
) -> None:
    blue_cluster(fake_api)

    # $KUBECONFIG, as kubectl reads it
    done = run(
        "kubectl-netattach", "status", "blue/web", env=scrubbed_env(KUBECONFIG=str(kubeconfig))
    )
    assert done.rc == 0, (done.stdout, done.stderr)
    assert done.lines[-1] == f"1 pod, 0 problems (from the cluster of {kubeconfig})"

    # else ~/.kube/config
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    shutil.copy(kubeconfig, home / ".kube" / "config")
    done = run("kubectl-netattach", "status", "blue/web", env=scrubbed_env(HOME=str(home)))
    assert done.rc == 0, (done.stdout, done.stderr)
    assert done.lines[-1].endswith(f"(from the cluster of {home / '.kube' / 'config'})")


def kubectl_netattach(
    kubectl: str, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    """`kubectl netattach` with `args`, as kubectl finds and runs its plugin."""
    return subprocess.run(
        [kubectl, "netattach", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_kubectl_runs_the_plugin(fake_api: KubeApi, kubeconfig: Path, tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    blue_cluster(fake_api)
    env = scrubbed_env(KUBECONFIG=str(kubeconfig), PATH=f"{BIN}:/usr/bin:/bin")

    done = kubectl_netattach(kubectl, env, "status", "-n", "blue", "-o", "json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert [p["name"] for p in report["pods"]] == ["db", "web"]
    assert report["problemCount"] == 1

    out = tmp_path / "blue.svg"
    done = kubectl_netattach(kubectl, env, "graph", "-n", "blue", "-o", str(out))
    assert done.returncode == 0, done.stderr
    texts = [t.text for t in ET.parse(out).getroot().iter("{http://www.w3.org/2000/svg}text")]
    assert "blue/web" in texts
    assert "10.81.0.5/24" in texts
    assert "policy: blue/deny-web" in texts


def test_an_invalid_policy_in_the_cluster_is_a_problem(fake_api: KubeApi, kubeconfig: Path) -> None:
    fake_api.create(objects.namespace("blue"))
    bad = objects.policy("bad", "blue", spec={"podSelector": {}}, policy_for="a/b/c")
    fake_api.create(bad)

    done = netattach("status", "--kubeconfig", str(kubeconfig))

    assert done.rc == 1
    assert done.lines[-2] == (
        "problem: invalid MultiNetworkPolicy blue/bad: "
        f"{POLICY_FOR} entry 'a/b/c' is not 'net' or 'ns/net' (the daemon skips it)"
    )
