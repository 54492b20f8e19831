"""Dynamic networks (RT-HOTPLUG): editing a running pod's selection annotation adds and removes
its attachments, through the real daemon and its shim, with the reference plugins.

The pod is attached by an ADD through the installed shim; then only its manifest (directory
feed) or its object in the API (Kubernetes feed) changes, and the daemon changes the pod's
interfaces, host-local allocations, pod record and network-status to match. Every test ends
with the pod's DEL and nothing left.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from netattach.policy import apply
from tests.e2e.daemon_harness import DaemonNode, daemon, native_shim, plugin_processes, wait_for
from tests.e2e.harness import DEFAULT_NETWORK, NOTHING, Cluster, Pod, bridge_list, host_local, probe
from tests.e2e.kube_daemon_harness import NETWORKS, api_pod, kube_api, kube_daemon, published
from tests.e2e.kube_harness import RemoteKubeApi
from tests.e2e.policy_harness import table_interfaces
from tests.kube import objects

pytestmark = pytest.mark.netns

__all__ = ["daemon", "kube_api", "kube_daemon", "native_shim"]  # the fixtures used here

NS = "blue"
SUBNETS = {
    "net-a": "10.81.0.0/24",
    "net-b": "10.82.0.0/24",
    "net-c": "10.83.0.0/24",
    "net-bad": "10.84.0.0/24",
}
# The directory feed polls its manifests every second; a hot-plug pass follows a change.
CHANGE_TIMEOUT = 30.0


# -- helpers ---------------------------------------------------------------------------------------


def bridge_nads(cluster: Cluster, *names: str) -> None:
    """A NAD `blue/<name>` per name: a bridge of its own with host-local on SUBNETS[name]."""
    for name in names:
        cluster.add_nad(NS, name, bridge_list(None, host_local(cluster.ipam, SUBNETS[name])))


def shown(status: list[dict[str, Any]] | None) -> list[tuple[str, str]]:
    """(network, interface) of each network-status entry, in order."""
    return [(e["name"], e["interface"]) for e in status or []]


def wait_status(
    cluster: Cluster, pod: Pod, expected: list[tuple[str, str]]
) -> list[dict[str, Any]]:
    """The pod's network-status file once its entries are `expected`."""
    found: list[dict[str, Any]] = wait_for(
        f"the network-status of {pod.name} to be {expected}",
        lambda: (
            (status := cluster.status(pod.ns, pod.name)) and shown(status) == expected and status
        ),
        CHANGE_TIMEOUT,
    )
    return found


def kernel_view(cluster: Cluster, pod: Pod) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Each of the pod's interfaces: (MAC, addresses) as the kernel has them."""
    return {name: (s.mac, s.addresses) for name, s in cluster.interfaces(pod.netns).items()}


def entry(status: list[dict[str, Any]], ifname: str) -> dict[str, Any]:
    (found,) = [e for e in status if e["interface"] == ifname]
    return found


def address(status: list[dict[str, Any]], ifname: str) -> str:
    """The one address of `ifname` in the status, without its prefix length."""
    (ip,) = entry(status, ifname)["ips"]
    return str(ipaddress.ip_interface(ip).ip)


def allocated_in(cluster: Cluster, network: str) -> list[str]:
    """host-local's allocations in SUBNETS[network]."""
    subnet = ipaddress.ip_network(SUBNETS[network])
    return [a for a in cluster.allocations() if ipaddress.ip_address(a.split("/")[1]) in subnet]


def pings(src: Pod, dst: str) -> bool:
    done = subprocess.run(
        ["nsenter", f"--net={src.netns}", "--", "ping", "-c", "1", "-W", "2", dst],
        capture_output=True,
        timeout=30,
        check=False,
    )
    return done.returncode == 0


def record_of(cluster: Cluster, pod: Pod) -> dict[str, Any]:
    raw = json.loads((cluster.state / "pods" / f"{pod.container_id}.json").read_text())
    assert isinstance(raw, dict)
    return raw


def converged_record(cluster: Cluster, pod: Pod, selection: str) -> dict[str, Any]:
    """The pod's record once it names `selection`: a change saves it after publishing the
    status (a crash in between finds the pod still to change), so it can lag the status."""
    found: dict[str, Any] = wait_for(
        f"the record of {pod.name} to name the selection {selection!r}",
        lambda: (record := record_of(cluster, pod)).get("selection") == selection and record,
        CHANGE_TIMEOUT,
    )
    return found


def attached(daemon: DaemonNode, pod: Pod) -> None:
    reply = daemon.shim("ADD", pod)
    assert (reply.rc, reply.code) == (0, None), (reply, daemon.log_text())


def deleted_leaving_nothing(daemon: DaemonNode, *pods: Pod) -> None:
    for pod in pods:
        reply = daemon.shim("DEL", pod)
        assert (reply.rc, reply.out) == (0, None), (reply, daemon.log_text())
    assert daemon.cluster.leftovers() == NOTHING


# -- the directory feed ----------------------------------------------------------------------------


@pytest.mark.req("RT-HOTPLUG")
def test_a_network_added_to_a_running_pod_is_attached_addressed_and_reachable(
    daemon: DaemonNode,
) -> None:
    cluster = daemon.cluster
    bridge_nads(cluster, "net-a", "net-b")
    web = cluster.pod(NS, "web", "net-a")
    peer = cluster.pod(NS, "peer", "net-b")
    daemon.start()
    attached(daemon, web)
    attached(daemon, peer)
    before = kernel_view(cluster, web)
    assert sorted(before) == ["eth0", "net1"]
    assert record_of(cluster, web)["selection"] == "net-a"

    cluster.add_pod(NS, "web", web.uid, "net-a,net-b")

    status = wait_status(
        cluster, web, [(DEFAULT_NETWORK, "eth0"), (f"{NS}/net-a", "net1"), (f"{NS}/net-b", "net2")]
    )
    now = kernel_view(cluster, web)
    assert sorted(now) == ["eth0", "net1", "net2"]
    # The attachments that stay were not touched: same MACs, same addresses.
    assert {name: now[name] for name in before} == before
    net2 = entry(status, "net2")
    assert net2["mac"] == now["net2"][0]
    assert net2["ips"][0] in now["net2"][1]
    assert ipaddress.ip_interface(net2["ips"][0]) in ipaddress.ip_network(SUBNETS["net-b"])
    assert len(allocated_in(cluster, "net-b")) == 2
    assert pings(web, address(cluster.status(NS, "peer") or [], "net1"))
    assert pings(peer, address(status, "net2"))
    record = converged_record(cluster, web, "net-a,net-b")
    assert [(a["statusName"], a["ifname"]) for a in record["attachments"]] == shown(status)

    deleted_leaving_nothing(daemon, web, peer)


@pytest.mark.req("RT-HOTPLUG")
def test_a_network_removed_from_a_running_pod_is_detached_and_its_address_freed(
    daemon: DaemonNode,
) -> None:
    cluster = daemon.cluster
    bridge_nads(cluster, "net-a", "net-b", "net-c")
    web = cluster.pod(NS, "web", "net-a,net-b")
    daemon.start()
    attached(daemon, web)
    before = kernel_view(cluster, web)
    assert len(allocated_in(cluster, "net-a")) == 1

    cluster.add_pod(NS, "web", web.uid, "net-b")

    wait_status(cluster, web, [(DEFAULT_NETWORK, "eth0"), (f"{NS}/net-b", "net2")])
    now = kernel_view(cluster, web)
    assert sorted(now) == ["eth0", "net2"]
    assert now["net2"] == before["net2"]  # kept, under the name it had
    assert allocated_in(cluster, "net-a") == []
    assert len(allocated_in(cluster, "net-b")) == 1

    # A network added now gets a generated name no attachment of the pod uses: net2 is
    # net-b's, so net-c (second in the selection, `net2` by position) becomes net3.
    cluster.add_pod(NS, "web", web.uid, "net-b,net-c")

    status = wait_status(
        cluster, web, [(DEFAULT_NETWORK, "eth0"), (f"{NS}/net-b", "net2"), (f"{NS}/net-c", "net3")]
    )
    now = kernel_view(cluster, web)
    assert sorted(now) == ["eth0", "net2", "net3"]
    assert entry(status, "net3")["ips"][0] in now["net3"][1]
    assert now["net2"] == before["net2"]

    # Every selection gone: only the default network is left, and it was never touched.
    cluster.add_pod(NS, "web", web.uid, None)

    wait_status(cluster, web, [(DEFAULT_NETWORK, "eth0")])
    assert kernel_view(cluster, web) == {"eth0": before["eth0"]}
    assert [a.split("/")[0] for a in cluster.allocations()] == [DEFAULT_NETWORK]
    converged_record(cluster, web, "")

    deleted_leaving_nothing(daemon, web)


@pytest.mark.req("RT-HOTPLUG")
def test_explicit_interface_names_reordered_renamed_and_swapped(daemon: DaemonNode) -> None:
    cluster = daemon.cluster
    bridge_nads(cluster, "net-a", "net-b")

    def select(*pairs: tuple[str, str]) -> list[dict[str, str]]:
        return [{"name": name, "interface": ifname} for name, ifname in pairs]

    web = cluster.pod(NS, "web", select(("net-a", "left"), ("net-b", "right")))
    daemon.start()
    attached(daemon, web)
    before = kernel_view(cluster, web)
    assert sorted(before) == ["eth0", "left", "right"]

    # Reordered: the status follows the new order; no interface is made again.
    cluster.add_pod(NS, "web", web.uid, select(("net-b", "right"), ("net-a", "left")))
    wait_status(
        cluster, web, [(DEFAULT_NETWORK, "eth0"), (f"{NS}/net-b", "right"), (f"{NS}/net-a", "left")]
    )
    assert kernel_view(cluster, web) == before

    # Renamed: net-a moves from `left` to `middle` (a new attachment); `right` stays.
    cluster.add_pod(NS, "web", web.uid, select(("net-b", "right"), ("net-a", "middle")))
    status = wait_status(
        cluster,
        web,
        [(DEFAULT_NETWORK, "eth0"), (f"{NS}/net-b", "right"), (f"{NS}/net-a", "middle")],
    )
    now = kernel_view(cluster, web)
    assert sorted(now) == ["eth0", "middle", "right"]
    assert now["right"] == before["right"]
    assert entry(status, "middle")["ips"][0] in now["middle"][1]
    assert len(allocated_in(cluster, "net-a")) == 1  # left's address was freed

    # Swapped: each name now belongs to the other network; both are made again, the names
    # freed by the removals first.
    cluster.add_pod(NS, "web", web.uid, select(("net-b", "middle"), ("net-a", "right")))
    status = wait_status(
        cluster,
        web,
        [(DEFAULT_NETWORK, "eth0"), (f"{NS}/net-b", "middle"), (f"{NS}/net-a", "right")],
    )
    now = kernel_view(cluster, web)
    assert sorted(now) == ["eth0", "middle", "right"]
    for ifname, network in (("middle", "net-b"), ("right", "net-a")):
        ip = ipaddress.ip_interface(entry(status, ifname)["ips"][0])
        assert ip in ipaddress.ip_network(SUBNETS[network])
        assert str(ip) in now[ifname][1]
    assert len(allocated_in(cluster, "net-a")) == len(allocated_in(cluster, "net-b")) == 1

    deleted_leaving_nothing(daemon, web)


@pytest.mark.req("RT-HOTPLUG")
def test_a_selection_naming_a_missing_nad_changes_nothing_until_the_nad_exists(
    daemon: DaemonNode,
) -> None:
    cluster = daemon.cluster
    bridge_nads(cluster, "net-a")
    web = cluster.pod(NS, "web", "net-a")
    daemon.start()
    attached(daemon, web)
    before = (kernel_view(cluster, web), cluster.status(NS, "web"), cluster.allocations())

    cluster.add_pod(NS, "web", web.uid, "net-a,net-b,net-c")

    refused = (
        f"[{NS}/web/{web.uid}] NetworkAttachmentDefinition {NS}/net-b not found; "
        "the pod's attachments stay as they are"
    )
    wait_for("the refusal in the log", lambda: refused in daemon.log_text(), CHANGE_TIMEOUT)
    assert (kernel_view(cluster, web), cluster.status(NS, "web"), cluster.allocations()) == before
    assert record_of(cluster, web)["selection"] == "net-a"

    # The missing NADs appear: the selection that failed is tried again, and now it stands.
    bridge_nads(cluster, "net-b", "net-c")
    wait_status(
        cluster,
        web,
        [
            (DEFAULT_NETWORK, "eth0"),
            (f"{NS}/net-a", "net1"),
            (f"{NS}/net-b", "net2"),
            (f"{NS}/net-c", "net3"),
        ],
    )
    assert sorted(kernel_view(cluster, web)) == ["eth0", "net1", "net2", "net3"]

    deleted_leaving_nothing(daemon, web)


@pytest.mark.req("RT-HOTPLUG")
def test_a_failing_new_attachment_is_undone_alone_and_the_rest_of_the_change_stands(
    daemon: DaemonNode, tmp_path: Path
) -> None:
    cluster = daemon.cluster
    bridge_nads(cluster, "net-a", "net-b")
    bad_tuning = {
        "type": "tuning",
        "dataDir": str(tmp_path / "tuning"),
        "sysctl": {"net.nonexistent.key": "1"},
    }
    cluster.add_nad(
        NS, "net-bad", bridge_list(None, host_local(cluster.ipam, SUBNETS["net-bad"]), bad_tuning)
    )
    web = cluster.pod(NS, "web", "net-a")
    daemon.start()
    attached(daemon, web)

    cluster.add_pod(NS, "web", web.uid, "net-bad,net-b")

    # net-bad's ADD fails (tuning refuses the sysctl) and is deleted again; net-a goes and
    # net-b comes as asked.
    wait_status(cluster, web, [(DEFAULT_NETWORK, "eth0"), (f"{NS}/net-b", "net2")])
    assert sorted(kernel_view(cluster, web)) == ["eth0", "net2"]
    assert allocated_in(cluster, "net-bad") == []
    assert allocated_in(cluster, "net-a") == []
    log = daemon.log_text()
    assert f"[{NS}/web/{web.uid}:{NS}/net-bad] plugin tuning failed (add)" in log, log
    record = record_of(cluster, web)
    assert [a["ifname"] for a in record["attachments"]] == ["eth0", "net2"]
    # Not converged: the record keeps the selection its attachments were last fully made from.
    assert record["selection"] == "net-a"

    # The user drops the bad network: nothing left to change but the record's selection.
    cluster.add_pod(NS, "web", web.uid, "net-b")
    wait_for(
        "the record to take the new selection",
        lambda: record_of(cluster, web).get("selection") == "net-b",
        CHANGE_TIMEOUT,
    )
    assert sorted(kernel_view(cluster, web)) == ["eth0", "net2"]

    deleted_leaving_nothing(daemon, web)


@pytest.mark.req("RT-HOTPLUG")
def test_a_daemon_restart_between_edits_loses_nothing(daemon: DaemonNode) -> None:
    cluster = daemon.cluster
    bridge_nads(cluster, "net-a", "net-b")
    web = cluster.pod(NS, "web", "net-a")
    old = cluster.pod(NS, "old", "net-a")
    daemon.start()
    attached(daemon, web)
    attached(daemon, old)
    old_before = kernel_view(cluster, old)
    assert daemon.stop() == 0

    # While the daemon is down: web's selection is edited, and both records lose `selection`,
    # as records written before the field existed: they are compared with what they attached.
    for pod in (web, old):
        path = cluster.state / "pods" / f"{pod.container_id}.json"
        raw = record_of(cluster, pod)
        del raw["selection"]
        path.write_text(json.dumps(raw))
    cluster.add_pod(NS, "web", web.uid, "net-a,net-b")

    daemon.start()
    wait_status(
        cluster, web, [(DEFAULT_NETWORK, "eth0"), (f"{NS}/net-a", "net1"), (f"{NS}/net-b", "net2")]
    )
    converged_record(cluster, web, "net-a,net-b")
    # old's attachments match its selection: left alone.
    assert kernel_view(cluster, old) == old_before
    assert "selection" not in record_of(cluster, old)

    # And with the daemon running again, one more edit.
    cluster.add_pod(NS, "web", web.uid, "net-b")
    wait_status(cluster, web, [(DEFAULT_NETWORK, "eth0"), (f"{NS}/net-b", "net2")])

    deleted_leaving_nothing(daemon, web, old)


@pytest.mark.req("RT-HOTPLUG")
def test_a_daemon_killed_during_a_hotplug_add_leaves_it_recorded_and_it_is_redone(
    daemon: DaemonNode, tmp_path: Path
) -> None:
    cluster = daemon.cluster
    bridge_nads(cluster, "net-a")
    log = tmp_path / "probe.log"
    slow = bridge_list(None, host_local(cluster.ipam, SUBNETS["net-b"]), probe(log, sleep=3.0))
    cluster.add_nad(NS, "net-b", slow)
    web = cluster.pod(NS, "web", "net-a")
    daemon.start()
    attached(daemon, web)

    cluster.add_pod(NS, "web", web.uid, "net-a,net-b")
    wait_for(
        "net-b's chain to reach the probe",
        lambda: any(p.command == "ADD" for p in cluster.probe_log(log)),
        CHANGE_TIMEOUT,
    )
    daemon.kill()
    wait_for("the orphaned delegates to end", lambda: not plugin_processes({web.container_id}), 30)

    # The record named net-b before its ADD ran: the pod's DEL would free it.
    record = record_of(cluster, web)
    assert [(a["ifname"], a["result"] is None) for a in record["attachments"]] == [
        ("eth0", False),
        ("net1", False),
        ("net2", True),
    ]
    assert record["selection"] == "net-a"
    assert len(allocated_in(cluster, "net-b")) == 1

    # Restarted, the daemon finds the pod changed: the half-made attachment is deleted and
    # made again.
    daemon.start()
    status = wait_status(
        cluster, web, [(DEFAULT_NETWORK, "eth0"), (f"{NS}/net-a", "net1"), (f"{NS}/net-b", "net2")]
    )
    assert entry(status, "net2")["ips"][0] in kernel_view(cluster, web)["net2"][1]
    assert len(allocated_in(cluster, "net-b")) == 1
    calls = [(p.command, p.ifname) for p in cluster.probe_log(log) if p.what == "start"]
    assert calls == [("ADD", "net2"), ("DEL", "net2"), ("ADD", "net2")]

    deleted_leaving_nothing(daemon, web)


@pytest.mark.req("RT-HOTPLUG")
def test_a_requested_name_that_collides_changes_nothing(daemon: DaemonNode) -> None:
    cluster = daemon.cluster
    bridge_nads(cluster, "net-a", "net-b")
    web = cluster.pod(NS, "web", "net-a")
    daemon.start()
    attached(daemon, web)
    before = (kernel_view(cluster, web), cluster.status(NS, "web"), cluster.allocations())

    cluster.add_pod(NS, "web", web.uid, "net-a,net-b@eth0")

    refused = (
        f"[{NS}/web/{web.uid}] interface 'eth0' is the cluster default network's interface; "
        "the pod's attachments stay as they are"
    )
    wait_for("the refusal in the log", lambda: refused in daemon.log_text(), CHANGE_TIMEOUT)
    assert (kernel_view(cluster, web), cluster.status(NS, "web"), cluster.allocations()) == before

    deleted_leaving_nothing(daemon, web)


@pytest.mark.req("RT-HOTPLUG")
def test_the_policy_table_follows_a_hotplugged_interface(daemon: DaemonNode) -> None:
    cluster = daemon.cluster
    bridge_nads(cluster, "net-a", "net-b")
    ingress_denied = {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress"]}
    cluster.add_policy(NS, "deny-web", ingress_denied, "net-b")
    web_labels = {"app": "web"}
    web = cluster.pod(NS, "web", "net-a", labels=web_labels)
    peer = cluster.pod(NS, "peer", "net-b")
    daemon.start()
    attached(daemon, web)
    attached(daemon, peer)
    assert "net2" not in table_interfaces(asyncio.run(apply.read_table(web.netns)) or "")

    cluster.add_pod(NS, "web", web.uid, "net-a,net-b", labels=web_labels)

    # The status is published once the table governs the new interface.
    status = wait_status(
        cluster, web, [(DEFAULT_NETWORK, "eth0"), (f"{NS}/net-a", "net1"), (f"{NS}/net-b", "net2")]
    )
    table = asyncio.run(apply.read_table(web.netns))
    assert table is not None
    assert table_interfaces(table) == {"net2"}
    peer_ip = address(cluster.status(NS, "peer") or [], "net1")
    assert pings(web, peer_ip)  # web reaches out; the answer comes back in
    assert not pings(peer, address(status, "net2"))  # nobody reaches web on net-b

    deleted_leaving_nothing(daemon, web, peer)


# The last plugin of a network's list: it passes the result on and, at ADD, notes the pod's
# netattach table as it is at that moment (the interface exists, its ADD has not answered).
SNAPSHOT = """#!{python}
import json, os, subprocess, sys
conf = json.load(sys.stdin)
command = os.environ.get("CNI_COMMAND")
if command == "ADD":
    table = subprocess.run(
        ["nsenter", "--net=" + os.environ["CNI_NETNS"], "nft", "list", "table", "inet",
         "netattach"],
        capture_output=True, text=True,
    ).stdout
    with open({log!r}, "a") as out:
        out.write(json.dumps({{"netns": os.environ["CNI_NETNS"], "table": table}}) + "\\n")
    json.dump(conf.get("prevResult") or {{"cniVersion": conf["cniVersion"]}}, sys.stdout)
elif command == "VERSION":
    json.dump({{"cniVersion": "1.0.0", "supportedVersions": ["0.4.0", "1.0.0"]}}, sys.stdout)
"""


@pytest.mark.req("RT-HOTPLUG", "POL-SELECT")
def test_a_hotplugged_interface_is_governed_before_its_add_answers(daemon: DaemonNode) -> None:
    """No window without policy: when the new attachment's last plugin runs, the pod's table
    already names the interface (the daemon applied it before the first plugin ran)."""
    cluster = daemon.cluster
    log = cluster.root / "snapshots.jsonl"
    plugin = cluster.bin / "na-snapshot"
    plugin.write_text(SNAPSHOT.format(python=sys.executable, log=str(log)))
    plugin.chmod(0o755)
    bridge_nads(cluster, "net-a")
    net_b = bridge_list(None, host_local(cluster.ipam, SUBNETS["net-b"]))
    net_b["plugins"].append({"type": "na-snapshot"})
    cluster.add_nad(NS, "net-b", net_b)
    ingress_denied = {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress"]}
    cluster.add_policy(NS, "deny-web", ingress_denied, "net-b")
    web = cluster.pod(NS, "web", "net-a", labels={"app": "web"})
    daemon.start()
    attached(daemon, web)

    cluster.add_pod(NS, "web", web.uid, "net-a,net-b", labels={"app": "web"})

    wait_status(
        cluster, web, [(DEFAULT_NETWORK, "eth0"), (f"{NS}/net-a", "net1"), (f"{NS}/net-b", "net2")]
    )
    (seen,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert seen["netns"] == web.netns
    assert table_interfaces(seen["table"]) == {"net2"}

    deleted_leaving_nothing(daemon, web)


# -- the Kubernetes feed ---------------------------------------------------------------------------


def api_events(api: RemoteKubeApi, name: str) -> list[tuple[str, str, str]]:
    return [(e["type"], e["reason"], e["message"]) for e in api.events_for(NS, name)]


def api_status(api: RemoteKubeApi, name: str, expected: list[tuple[str, str]]) -> list[Any]:
    found: list[Any] = wait_for(
        f"pod {name}'s network-status in the API to be {expected}",
        lambda: shown(status := published(api, name)) == expected and status,
        CHANGE_TIMEOUT,
    )
    return found


@pytest.mark.req("RT-HOTPLUG")
def test_patching_the_pods_annotation_in_the_api_hotplugs_with_status_and_events(
    kube_daemon: DaemonNode, kube_api: RemoteKubeApi
) -> None:
    daemon, cluster = kube_daemon, kube_daemon.cluster
    for name in ("net-a", "net-b"):
        config = bridge_list(None, host_local(cluster.ipam, SUBNETS[name]))
        kube_api.create(objects.nad(name, NS, config=config))
    web = api_pod(kube_api, cluster, "web", "net-a")
    daemon.start()
    attached(daemon, web)
    api_status(kube_api, "web", [(DEFAULT_NETWORK, "eth0"), (f"{NS}/net-a", "net1")])

    kube_api.patch("Pod", "web", {"metadata": {"annotations": {NETWORKS: "net-a,net-b"}}}, NS)

    status = api_status(
        kube_api,
        "web",
        [(DEFAULT_NETWORK, "eth0"), (f"{NS}/net-a", "net1"), (f"{NS}/net-b", "net2")],
    )
    net2 = address(status, "net2")
    assert f"{net2}/24" in kernel_view(cluster, web)["net2"][1]
    added = ("Normal", "AddedInterface", f"Add net2 [{net2}/24] from {NS}/net-b")
    wait_for("the AddedInterface Event", lambda: added in api_events(kube_api, "web"), 10.0)

    # Removed, with a selection naming a NAD nobody created: refused as a whole, a Warning.
    kube_api.patch("Pod", "web", {"metadata": {"annotations": {NETWORKS: "net-b,net-x"}}}, NS)
    warning = (
        "Warning",
        "NetworkAttachmentDefinitionNotFound",
        f"[{NS}/web/{web.uid}] NetworkAttachmentDefinition {NS}/net-x not found",
    )
    wait_for("the Warning Event", lambda: warning in api_events(kube_api, "web"), CHANGE_TIMEOUT)
    assert shown(published(kube_api, "web")) == shown(status)
    assert sorted(kernel_view(cluster, web)) == ["eth0", "net1", "net2"]

    # Then only net-b: net-a's interface and address go, a RemovedInterface Event says so.
    net1 = address(status, "net1")
    kube_api.patch("Pod", "web", {"metadata": {"annotations": {NETWORKS: "net-b"}}}, NS)
    api_status(kube_api, "web", [(DEFAULT_NETWORK, "eth0"), (f"{NS}/net-b", "net2")])
    assert sorted(kernel_view(cluster, web)) == ["eth0", "net2"]
    assert allocated_in(cluster, "net-a") == []
    removed = ("Normal", "RemovedInterface", f"Remove net1 [{net1}/24] from {NS}/net-a")
    wait_for("the RemovedInterface Event", lambda: removed in api_events(kube_api, "web"), 10.0)

    deleted_leaving_nothing(daemon, web)
    assert daemon.stop() == 0
