"""The delegate policy with the real reference plugins (SEC-DELEGATE): each attack a NAD could
make on the node is refused at ADD and leaves nothing behind, each allowed use still attaches.

Veth ends in the test's node namespace stand for the node's NICs (`na-up-*` the uplink a NAD
must not take, `na-ok-*` the ones the operator hands out); the kernel here has no dummy links.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from netattach.guard import delegate_policy
from tests.e2e.daemon_harness import DaemonNode, daemon, native_shim, wait_for
from tests.e2e.guard_harness import NS, grant, nic, nothing_attached, pod_selecting, refused
from tests.e2e.harness import NOTHING, Cluster, bridge_list, host_local
from tests.e2e.kube_daemon_harness import WATCH_TIMEOUT, api_pod, kube_api, kube_daemon, wait_events
from tests.e2e.kube_harness import RemoteKubeApi
from tests.kube import objects
from tests.netns_fixtures import require_link_kind, unique

pytestmark = pytest.mark.netns

__all__ = ["daemon", "kube_api", "kube_daemon", "native_shim"]  # the fixtures used here


@pytest.mark.req("SEC-DELEGATE")
def test_host_device_on_an_interface_outside_the_list_is_refused(cluster: Cluster) -> None:
    uplink = nic(cluster, "up")
    grant(cluster, types=[*delegate_policy.DEFAULT_TYPES, "host-device"], device=["na-ok-*"])
    before, pod = pod_selecting(
        cluster, NS, "net-hd", {"cniVersion": "1.0.0", "type": "host-device", "device": uplink}
    )

    reply = cluster.add(pod)

    refused(reply, "net-hd", "plugins[0].device", json.dumps(uplink), "delegatePolicy.device")
    assert "[na-ok-*]" in reply.out["msg"]
    nothing_attached(cluster, pod, before)
    assert uplink in cluster.node_links()  # still the node's


@pytest.mark.req("SEC-DELEGATE")
def test_host_device_is_refused_by_default_even_on_a_named_device(cluster: Cluster) -> None:
    device = nic(cluster, "ok")
    before, pod = pod_selecting(
        cluster, NS, "net-hd", {"cniVersion": "1.0.0", "type": "host-device", "device": device}
    )

    reply = cluster.add(pod)

    refused(reply, "net-hd", "plugins[0].type", '"host-device"', "delegatePolicy.types [bridge,")
    nothing_attached(cluster, pod, before)


@pytest.mark.req("SEC-DELEGATE")
def test_a_namespace_granted_host_device_gets_it_and_others_do_not(cluster: Cluster) -> None:
    device = nic(cluster, "ok")
    cluster.add_namespace("radio", {"netattach.io/host-devices": "granted"})
    cluster.add_namespace(NS, {"team": "blue"})
    grant(
        cluster,
        namespaces=[
            {
                "namespaceSelector": {"matchLabels": {"netattach.io/host-devices": "granted"}},
                "types": [*delegate_policy.DEFAULT_TYPES, "host-device"],
                "device": ["na-ok-*"],
            }
        ],
    )
    config = {"cniVersion": "1.0.0", "type": "host-device", "device": device}
    cluster.add_nad("radio", "net-hd", config)
    cluster.add_nad(NS, "net-hd", config)
    blue = cluster.pod(NS, "web", "net-hd")
    before = cluster.node_links()

    refused(cluster.add(blue), "net-hd", "plugins[0].type", '"host-device"', "delegatePolicy.types")
    nothing_attached(cluster, blue, before)

    radio = cluster.pod("radio", "sdr", "net-hd")
    reply = cluster.add(radio)

    assert reply.rc == 0, reply
    assert set(cluster.interfaces(radio.netns)) == {"eth0", "net1"}
    assert device not in cluster.node_links()  # moved into the pod
    assert cluster.delete(radio).rc == 0
    assert device in cluster.node_links()  # and given back


@pytest.mark.req("SEC-DELEGATE")
def test_a_macvlan_master_outside_the_list_is_refused_and_one_inside_works(
    cluster: Cluster,
) -> None:
    uplink, handed_out = nic(cluster, "up"), nic(cluster, "ok")
    grant(cluster, master=["na-ok-*"])

    def macvlan(master: str, subnet: str) -> dict[str, Any]:
        ipam = host_local(cluster.ipam, subnet)
        return {"cniVersion": "1.0.0", "type": "macvlan", "master": master, "ipam": ipam}

    cluster.add_nad(NS, "net-up", macvlan(uplink, "10.91.0.0/24"))
    cluster.add_nad(NS, "net-ok", macvlan(handed_out, "10.92.0.0/24"))
    cluster.add_nad(NS, "net-unset", {"cniVersion": "1.0.0", "type": "macvlan"})
    before = cluster.node_links()
    pod = cluster.pod(NS, "web", "net-up")

    refused(cluster.add(pod), "net-up", "plugins[0].master", json.dumps(uplink), "[na-ok-*]")
    nothing_attached(cluster, pod, before)
    # Without a master, macvlan takes the node's default-route interface: refused too.
    unset = cluster.pod(NS, "unset", "net-unset")
    refused(
        cluster.add(unset),
        "net-unset",
        "plugins[0].master",
        "unset (the node's default-route interface)",
        "delegatePolicy.master [na-ok-*]",
    )
    nothing_attached(cluster, unset, before)

    require_link_kind("macvlan")
    allowed = cluster.pod(NS, "ok", "net-ok")
    reply = cluster.add(allowed)
    assert reply.rc == 0, reply
    assert cluster.interfaces(allowed.netns)["net1"].kind == "macvlan"
    assert cluster.delete(allowed).rc == 0


@pytest.mark.req("SEC-DELEGATE")
def test_a_bridge_outside_the_list_is_refused_and_not_made(cluster: Cluster) -> None:
    grant(cluster, bridge=["na-team-*"])
    outside, inside = unique("br"), unique("team")
    ipam = host_local(cluster.ipam, "10.93.0.0/24")
    before, pod = pod_selecting(cluster, NS, "net-out", bridge_list(None, ipam, bridge=outside))

    refused(cluster.add(pod), "net-out", "plugins[0].bridge", json.dumps(outside), "[na-team-*]")
    nothing_attached(cluster, pod, before)
    assert outside not in cluster.node_links()

    config = bridge_list(None, host_local(cluster.ipam, "10.94.0.0/24"), bridge=inside)
    cluster.add_nad(NS, "net-in", config)
    allowed = cluster.pod(NS, "ok", "net-in")
    reply = cluster.add(allowed)
    assert reply.rc == 0, reply
    assert inside in cluster.node_links()
    assert cluster.delete(allowed).rc == 0


@pytest.mark.req("SEC-DELEGATE")
def test_a_data_dir_outside_the_prefix_is_refused_and_nothing_is_written_there(
    cluster: Cluster, tmp_path: Path
) -> None:
    grant(cluster, dataDir=[str(cluster.ipam)])
    elsewhere = tmp_path / "elsewhere"
    climbing = f"{cluster.ipam}/../elsewhere"
    for name, data_dir in (("net-out", str(elsewhere)), ("net-climb", climbing)):
        ipam = {"type": "host-local", "dataDir": data_dir, "subnet": "10.95.0.0/24"}
        cluster.add_nad(NS, name, bridge_list(None, ipam))
    before = cluster.node_links()

    for name, data_dir in (("net-out", str(elsewhere)), ("net-climb", climbing)):
        pod = cluster.pod(NS, f"web-{name}", name)
        reply = cluster.add(pod)
        refused(reply, name, "plugins[0].ipam.dataDir", json.dumps(data_dir), str(cluster.ipam))
        nothing_attached(cluster, pod, before)
    assert not elsewhere.exists()

    cluster.add_nad(NS, "net-in", bridge_list(None, host_local(cluster.ipam, "10.96.0.0/24")))
    inside = cluster.pod(NS, "ok", "net-in")
    assert cluster.add(inside).rc == 0
    assert any(a.startswith("net-in/") for a in cluster.allocations())
    assert cluster.delete(inside).rc == 0


@pytest.mark.req("SEC-DELEGATE")
def test_a_tuning_sysctl_outside_the_list_is_refused_and_not_written(cluster: Cluster) -> None:
    core_pattern = Path("/proc/sys/kernel/core_pattern").read_text()
    ipam = host_local(cluster.ipam, "10.97.0.0/24")
    attack = {"type": "tuning", "sysctl": {"kernel.core_pattern": "|/tmp/na-evil %p"}}
    fine = {"type": "tuning", "sysctl": {"net.ipv4.conf.all.log_martians": "1"}}
    cluster.add_nad(NS, "net-evil", bridge_list(None, ipam, attack))
    cluster.add_nad(
        NS, "net-fine", bridge_list(None, host_local(cluster.ipam, "10.98.0.0/24"), fine)
    )
    before = cluster.node_links()
    pod = cluster.pod(NS, "web", "net-evil")

    refused(
        cluster.add(pod),
        "net-evil",
        'plugins[1].sysctl["kernel.core_pattern"]',
        '"kernel.core_pattern"',
        "delegatePolicy.sysctl [net.*]",
    )
    nothing_attached(cluster, pod, before)
    assert Path("/proc/sys/kernel/core_pattern").read_text() == core_pattern

    allowed = cluster.pod(NS, "ok", "net-fine")
    assert cluster.add(allowed).rc == 0
    assert cluster.delete(allowed).rc == 0


@pytest.mark.req("SEC-DELEGATE")
def test_the_default_network_is_not_checked(cluster: Cluster) -> None:
    """The cluster default network uses a bridge and a dataDir no NAD may name here; it is the
    operator's own file and attaches as always, beside a NAD the policy allows."""
    grant(cluster, bridge=["na-team-*"], dataDir=[str(cluster.ipam / "teams")])
    teams = cluster.ipam / "teams"
    ipam = {"type": "host-local", "dataDir": str(teams), "subnet": "10.99.0.0/24"}
    cluster.add_nad(NS, "net-team", bridge_list(None, ipam, bridge=unique("team")))
    pod = cluster.pod(NS, "web", "net-team")

    reply = cluster.add(pod)

    assert reply.rc == 0, reply
    assert set(cluster.interfaces(pod.netns)) == {"eth0", "net1"}
    assert cluster.default_bridge in cluster.node_links()
    assert cluster.delete(pod).rc == 0
    assert cluster.leftovers() == NOTHING


# -- the daemon on the Kubernetes feed: the Event, and a namespace's labels from the API ---------


@pytest.mark.req("SEC-DELEGATE", "KUBE-EVENTS")
def test_the_daemon_refuses_with_a_warning_event_and_grants_by_namespace_label(
    kube_daemon: DaemonNode, kube_api: RemoteKubeApi
) -> None:
    daemon, cluster = kube_daemon, kube_daemon.cluster
    device = nic(cluster, "ok")
    daemon.settings["delegatePolicy"] = {
        **daemon.settings["delegatePolicy"],
        "namespaces": [
            {
                "namespaceSelector": {"matchLabels": {"netattach.io/host-devices": "granted"}},
                "types": [*delegate_policy.DEFAULT_TYPES, "host-device"],
                "device": ["na-ok-*"],
            }
        ],
    }
    config = {"cniVersion": "1.0.0", "type": "host-device", "device": device}
    kube_api.create(objects.nad("net-hd", NS, config=config))
    pod = api_pod(kube_api, cluster, "web", "net-hd")
    before = cluster.node_links()
    daemon.start()

    reply = daemon.shim("ADD", pod)

    refused(reply, "net-hd", "plugins[0].type", '"host-device"', "delegatePolicy.types")
    (event,) = wait_events(kube_api, "web", 1)
    assert (event["type"], event["reason"]) == ("Warning", "NetworkAttachmentRefused")
    # The Event carries every refusal: the message, then the details.
    assert event["message"].startswith(reply.out["msg"] + ": ")
    assert (
        f'plugins[0].device "{device}" is not allowed by delegatePolicy.device []'
        in (event["message"])
    )
    nothing_attached(cluster, pod, before)

    # Labelling the namespace grants it: the next ADD (the kubelet's retry) attaches the device.
    namespace = kube_api.get("Namespace", NS)
    assert namespace is not None
    namespace["metadata"]["labels"] = {"netattach.io/host-devices": "granted"}
    kube_api.update(namespace)
    wait_for(
        "the daemon to see the label and attach",
        lambda: (done := daemon.shim("ADD", pod)).rc == 0 and done,
        WATCH_TIMEOUT,
    )
    assert device not in cluster.node_links()
    assert daemon.shim("DEL", pod).rc == 0
    assert device in cluster.node_links()
    assert daemon.stop() == 0
