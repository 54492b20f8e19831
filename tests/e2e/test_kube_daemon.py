"""Thick mode on the Kubernetes feed, end to end: pods and NADs in the API, the runtime runs the
installed shim, the shim asks `netattach daemon`, the daemon runs the real reference plugins in
the node namespace and writes the pod's network-status and Events back to the API.

The fake API server runs inside the node namespace too (tests/e2e/kube_harness.py says why and
how): the daemon dials it at 127.0.0.1 of its own namespace, the test drives it over a Unix
socket.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import time
from typing import Any

import pytest

from netattach.cluster import model
from tests.e2e.daemon_harness import DaemonNode, daemon, native_shim, wait_for
from tests.e2e.harness import DEFAULT_NETWORK, DEFAULT_SUBNET, NOTHING, Pod, bridge_list, host_local
from tests.e2e.kube_daemon_harness import (
    EVENT_TIMEOUT,
    MERGE_PATCH,
    NETWORKS,
    NS,
    STATUS,
    WATCH_TIMEOUT,
    WATCHED,
    add_nad,
    api_pod,
    direct_reads,
    kube_api,
    kube_daemon,
    ok,
    pod_annotations,
    pod_patches,
    published,
    wait_events,
    watches_past,
)
from tests.e2e.kube_harness import RemoteKubeApi
from tests.kube import objects

pytestmark = pytest.mark.netns

__all__ = ["daemon", "kube_api", "kube_daemon", "native_shim"]  # the fixtures this module uses

# -- the tests -------------------------------------------------------------------------------------


@pytest.mark.req("KUBE-STATUS", "KUBE-EVENTS", "STAT-ANNOT")
def test_add_writes_network_status_and_events_to_the_pod_in_the_api(
    kube_daemon: DaemonNode, kube_api: RemoteKubeApi
) -> None:
    daemon, cluster = kube_daemon, kube_daemon.cluster
    add_nad(kube_api, cluster, "net-a", "10.81.0.0/24")
    add_nad(kube_api, cluster, "net-b", "10.82.0.0/24")
    pod = api_pod(
        kube_api,
        cluster,
        "web",
        "net-a,net-b",
        labels={"app": "web"},
        annotations={"example.com/owner": "team-a"},
    )
    daemon.start()

    reply = daemon.shim("ADD", pod)
    ok(reply, daemon)

    # STAT-ANNOT: a JSON list in the pod's annotation in the API, default first, in order.
    stored = kube_api.get("Pod", "web", NS)
    assert stored is not None
    text = stored["metadata"]["annotations"][STATUS]
    status = json.loads(text)
    assert [(e["name"], e["interface"], e["default"]) for e in status] == [
        (DEFAULT_NETWORK, "eth0", True),
        (f"{NS}/net-a", "net1", False),
        (f"{NS}/net-b", "net2", False),
    ]
    kernel = cluster.interfaces(pod.netns)
    assert sorted(kernel) == ["eth0", "net1", "net2"]
    for entry in status:
        state = kernel[entry["interface"]]
        assert entry["mac"] == state.mac
        assert len(entry["ips"]) == 1
        assert entry["ips"][0] in state.addresses
    assert [ip["address"] for ip in reply.out["ips"]] == status[0]["ips"]
    subnets = [DEFAULT_SUBNET, "10.81.0.0/24", "10.82.0.0/24"]
    for entry, subnet in zip(status, subnets, strict=True):
        assert ipaddress.ip_interface(entry["ips"][0]).ip in ipaddress.ip_network(subnet)
    # KUBE-STATUS: the annotation alone, by one JSON merge patch with the pod's UID as a
    # precondition; the labels and every other annotation are as they were.
    assert stored["metadata"]["labels"] == {"app": "web"}
    assert stored["metadata"]["annotations"] == {
        NETWORKS: "net-a,net-b",
        "example.com/owner": "team-a",
        STATUS: text,
    }
    (patch,) = pod_patches(kube_api)
    assert (patch.path, patch.content_type, patch.status) == (
        f"/api/v1/namespaces/{NS}/pods/web",
        MERGE_PATCH,
        200,
    )
    assert patch.body == {"metadata": {"annotations": {STATUS: text}, "uid": pod.uid}}
    # The pod was listed before the ADD came: served from the cache, never read directly.
    assert direct_reads(kube_api, "web") == []

    # KUBE-EVENTS: one AddedInterface per attachment, on this very pod.
    events = wait_events(kube_api, "web", 3)
    assert [(e["type"], e["reason"], e["message"]) for e in events] == [
        ("Normal", "AddedInterface", f"Add eth0 [{status[0]['ips'][0]}] from {DEFAULT_NETWORK}"),
        ("Normal", "AddedInterface", f"Add net1 [{status[1]['ips'][0]}] from {NS}/net-a"),
        ("Normal", "AddedInterface", f"Add net2 [{status[2]['ips'][0]}] from {NS}/net-b"),
    ]
    for event in events:
        assert event["involvedObject"] == {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "web",
            "namespace": NS,
            "uid": pod.uid,
        }
        assert event["source"] == {"component": "netattach", "host": cluster.node.name}
        assert event["count"] == 1

    # DEL takes the annotation away again (a merge patch setting it to null) and frees it all.
    kube_api.clear_requests()
    ok(daemon.shim("DEL", pod), daemon)
    assert pod_annotations(kube_api, "web") == {
        NETWORKS: "net-a,net-b",
        "example.com/owner": "team-a",
    }
    (removal,) = pod_patches(kube_api)
    assert (removal.content_type, removal.status) == (MERGE_PATCH, 200)
    assert removal.body == {"metadata": {"annotations": {STATUS: None}, "uid": pod.uid}}
    assert cluster.leftovers() == NOTHING
    assert daemon.stop() == 0


@pytest.mark.req("KUBE-CACHE")
def test_watches_survive_an_api_restart_and_a_410_and_later_pods_are_attached(
    kube_daemon: DaemonNode, kube_api: RemoteKubeApi
) -> None:
    daemon, cluster = kube_daemon, kube_daemon.cluster
    add_nad(kube_api, cluster, "net-a", "10.81.0.0/24")
    daemon.start()
    wait_for("the daemon's 4 watches", lambda: watches_past(kube_api, 0), WATCH_TIMEOUT)

    # An API server restart mid-watch: every stream is cut, the port refuses for a moment. The
    # reflectors resume watching from their resourceVersion: no list.
    kube_api.clear_requests()
    kube_api.restart(downtime=0.5)
    resumed = wait_for(
        "the watches to come back",
        lambda: (
            (found := watches_past(kube_api, 1))
            and len([r for r in kube_api.requests if r.watch]) >= len(WATCHED)
            and found
        ),
        WATCH_TIMEOUT,
    )
    assert all(version not in ("", "0") for version in resumed.values()), resumed
    after_restart = kube_api.requests
    assert [r for r in after_restart if r.method == "GET" and not r.watch] == []
    assert sorted({r.path for r in after_restart if r.watch}) == sorted(
        {
            "/api/v1/pods",
            "/api/v1/namespaces",
            "/apis/k8s.cni.cncf.io/v1/network-attachment-definitions",
            "/apis/k8s.cni.cncf.io/v1beta1/multi-networkpolicies",
        }
    ), after_restart

    # Down, written to, compacted, up: every watch from an old resourceVersion gets 410 Expired
    # and the reflectors list again. The NAD and the pod exist only in those lists.
    kube_api.clear_requests()
    kube_api.stop()
    add_nad(kube_api, cluster, "net-late", "10.83.0.0/24")
    late = api_pod(kube_api, cluster, "late", "net-late")
    written = int(kube_api.resource_version)
    compacted = int(kube_api.compact())
    assert compacted == written
    kube_api.start()
    wait_for("watches from a fresh list", lambda: watches_past(kube_api, written), WATCH_TIMEOUT)
    for plural in WATCHED:
        gets = [r for r in kube_api.requests if r.method == "GET" and r.path.endswith(plural)]
        seen = [
            ("watch", int(r.query["resourceVersion"]) >= compacted) if r.watch else ("list", None)
            for r in gets
        ]
        assert seen == [("watch", False), ("list", None), ("watch", True)], (plural, gets)
    assert "expired; listing again" in daemon.log_text()

    reply = daemon.shim("ADD", late)
    ok(reply, daemon)
    assert [(e["name"], e["interface"]) for e in published(kube_api, "late")] == [
        (DEFAULT_NETWORK, "eth0"),
        (f"{NS}/net-late", "net1"),
    ]
    assert direct_reads(kube_api, "late") == []  # from the relisted cache

    # A pod created from now on is attached too (through the watch, or read directly if the
    # ADD outruns it).
    after = api_pod(kube_api, cluster, "after", "net-a,net-late")
    ok(daemon.shim("ADD", after), daemon)
    assert [(e["name"], e["interface"]) for e in published(kube_api, "after")] == [
        (DEFAULT_NETWORK, "eth0"),
        (f"{NS}/net-a", "net1"),
        (f"{NS}/net-late", "net2"),
    ]
    for pod in (late, after):
        ok(daemon.shim("DEL", pod), daemon)
    assert cluster.leftovers() == NOTHING
    assert daemon.stop() == 0


@pytest.mark.req("RT-NOAPI")
def test_check_and_del_with_the_api_down_work_from_the_record(
    kube_daemon: DaemonNode, kube_api: RemoteKubeApi
) -> None:
    daemon, cluster = kube_daemon, kube_daemon.cluster
    cluster.premade_bridge(cluster.default_bridge, "02:00:0a:50:00:01")
    config = add_nad(kube_api, cluster, "net-a", "10.81.0.0/24")
    cluster.premade_bridge(config["plugins"][0]["bridge"], "02:00:0a:51:00:01")
    web = api_pod(kube_api, cluster, "web", "net-a")
    gone = api_pod(kube_api, cluster, "gone", "net-a")
    daemon.start()
    for pod in (web, gone):
        ok(daemon.shim("ADD", pod), daemon)
        wait_events(kube_api, pod.name, 2)
    web_status = pod_annotations(kube_api, "web")[STATUS]
    attached = cluster.leftovers()
    assert len(attached["allocations"]) == 4
    assert len(attached["sandbox interfaces"]) == 4

    # `gone` is deleted from the API, and the daemon's cache knows it: a watch reopened from the
    # deletion's resourceVersion or later (restarting the API until one is) proves it.
    kube_api.delete("Pod", "gone", NS)
    deleted = int(kube_api.resource_version)

    def seen_deletion() -> bool:
        kube_api.restart(downtime=0.1)
        back = wait_for(
            "the pod watch to come back",
            lambda: watches_past(kube_api, 1, ("pods",)),
            WATCH_TIMEOUT,
        )
        return int(back["pods"]) >= deleted

    wait_for("the daemon to see the deletion", seen_deletion, WATCH_TIMEOUT, every=1.0)
    # Then the API goes away altogether.
    kube_api.stop()

    # The pod the cache knows is gone needs no API at all.
    started = time.monotonic()
    reply = daemon.shim("DEL", gone)
    assert (reply.rc, reply.out) == (0, None), (reply, daemon.log_text())
    assert time.monotonic() - started < 2.0
    assert f"network-status of {NS}/gone" not in daemon.log_text()

    # A daemon started while the API is down (a node reboot during an outage) has no synced
    # cache: CHECK and DEL of `web` still work from the record; the status removal goes on
    # beside the DEL, is given up after its budget (5 s) and does not fail it.
    assert daemon.stop() == 0
    daemon.start()
    ok(daemon.shim("CHECK", web), daemon)
    started = time.monotonic()
    reply = daemon.shim("DEL", web)
    assert (reply.rc, reply.out) == (0, None), (reply, daemon.log_text())
    assert time.monotonic() - started < 10.0
    assert cluster.leftovers() == NOTHING
    given_up = f"[{NS}/web/{web.uid}] cannot remove the network status"
    wait_for("the status removal to give up", lambda: given_up in daemon.log_text(), 15.0)

    # Nobody could take web's annotation away: it is as published (the pod is going anyway).
    kube_api.start()
    assert pod_annotations(kube_api, "web")[STATUS] == web_status
    assert daemon.stop() == 0


@pytest.mark.req("CNI-11")
def test_gc_and_status_through_the_shim(kube_daemon: DaemonNode, kube_api: RemoteKubeApi) -> None:
    daemon, cluster = kube_daemon, kube_daemon.cluster
    add_nad(kube_api, cluster, "net-a", "10.81.0.0/24")
    keep = api_pod(kube_api, cluster, "keep", "net-a")
    stale = api_pod(kube_api, cluster, "stale", "net-a")
    daemon.start()
    for pod in (keep, stale):
        ok(daemon.shim("ADD", pod), daemon)
    keep_status = pod_annotations(kube_api, "keep")[STATUS]
    assert STATUS in pod_annotations(kube_api, "stale")

    def gc(*valid: Pod) -> Any:
        config = {
            **daemon.runtime_config(),
            "cniVersion": "1.1.0",
            "cni.dev/valid-attachments": [
                {"containerID": pod.container_id, "ifname": "eth0"} for pod in valid
            ],
        }
        return daemon.shim("GC", config=config)

    kube_api.clear_requests()
    reply = gc(keep)
    assert (reply.rc, reply.out) == (0, None), (reply, daemon.log_text())
    left = cluster.leftovers()
    assert left["pod records"] == [f"{keep.container_id}.json"]
    assert left["sandbox interfaces"] == [f"{keep.netns}:eth0", f"{keep.netns}:net1"]
    assert len(left["allocations"]) == 2
    assert len(left["host veths"]) == 2
    # The collected pod's status is taken away in the API; the kept one's stays.
    assert pod_annotations(kube_api, "stale") == {NETWORKS: "net-a"}
    assert pod_annotations(kube_api, "keep")[STATUS] == keep_status
    (removal,) = pod_patches(kube_api)
    assert removal.path == f"/api/v1/namespaces/{NS}/pods/stale"
    assert removal.body == {"metadata": {"annotations": {STATUS: None}, "uid": stale.uid}}

    status_config = {**daemon.runtime_config(), "cniVersion": "1.1.0"}
    reply = daemon.shim("STATUS", config=status_config)
    assert (reply.rc, reply.out) == (0, None), reply
    # Without the cluster default network, STATUS says the plugin is not available (50).
    default_file = cluster.networks / "00-default.conflist"
    aside = cluster.root / "00-default.conflist.aside"
    shutil.move(default_file, aside)
    try:
        reply = daemon.shim("STATUS", config=status_config)
    finally:
        shutil.move(aside, default_file)
    assert (reply.rc, reply.code) == (1, 50), reply
    assert reply.out["cniVersion"] == "1.1.0"
    assert "the cluster default network is not available" in reply.out["msg"]
    reply = daemon.shim("STATUS", config=status_config)
    assert (reply.rc, reply.out) == (0, None), reply

    reply = gc()
    assert (reply.rc, reply.out) == (0, None), reply
    assert cluster.leftovers() == NOTHING
    assert pod_annotations(kube_api, "keep") == {NETWORKS: "net-a"}
    assert daemon.stop() == 0


@pytest.mark.req("KUBE-EVENTS")
def test_a_missing_nad_fails_add_with_101_and_a_warning_event_on_the_pod(
    kube_daemon: DaemonNode, kube_api: RemoteKubeApi
) -> None:
    daemon, cluster = kube_daemon, kube_daemon.cluster
    add_nad(kube_api, cluster, "net-a", "10.81.0.0/24")
    pod = api_pod(kube_api, cluster, "web", "net-a,missing")
    daemon.start()

    reply = daemon.shim("ADD", pod)
    assert (reply.rc, reply.code) == (1, 101), reply
    assert reply.out["msg"] == (
        f"[{NS}/web/{pod.uid}] NetworkAttachmentDefinition {NS}/missing not found"
    )

    (event,) = wait_events(kube_api, "web", 1)
    assert (event["type"], event["reason"], event["message"]) == (
        "Warning",
        "NetworkAttachmentDefinitionNotFound",
        reply.out["msg"],
    )
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "web",
        "namespace": NS,
        "uid": pod.uid,
    }
    assert event["source"] == {"component": "netattach", "host": cluster.node.name}
    # Refused before anything ran: no link, no address, no record, no status in the API.
    cluster.nothing_ran()
    assert pod_patches(kube_api) == []
    assert pod_annotations(kube_api, "web") == {NETWORKS: "net-a,missing"}

    # The kubelet retries: the same failure is folded into the Event's count, not repeated.
    kube_api.clear_requests()
    again = daemon.shim("ADD", pod)
    assert (again.rc, again.out) == (reply.rc, reply.out)
    wait_for(
        "the Event's count to reach 2",
        lambda: [e["count"] for e in kube_api.events_for(NS, "web")] == [2],
        EVENT_TIMEOUT,
    )
    (fold,) = [r for r in kube_api.requests if "/events" in r.path]
    assert (fold.method, fold.path, fold.content_type) == (
        "PATCH",
        f"/api/v1/namespaces/{NS}/events/{event['metadata']['name']}",
        MERGE_PATCH,
    )
    assert fold.body["count"] == 2
    cluster.nothing_ran()
    assert daemon.stop() == 0


@pytest.mark.req("CNI-11")
def test_status_before_the_default_nad_exists_says_not_available(
    kube_daemon: DaemonNode, kube_api: RemoteKubeApi
) -> None:
    daemon, cluster = kube_daemon, kube_daemon.cluster
    kube_api.create(objects.namespace("kube-net"))
    daemon.settings["clusterNetwork"] = "kube-net/cluster-net"
    # block: the shim and its config are installed at once, ADD and DEL wait for readiness.
    daemon.settings["readiness"] = {"mode": "block", "timeout": 60}
    daemon.start(ready=False)
    wait_for("the conflist", daemon.conflist.exists, 10.0)
    status_config = {**daemon.runtime_config(), "cniVersion": "1.1.0"}
    assert daemon.http("/readyz").status == 503

    reply = daemon.shim("STATUS", config=status_config)
    assert (reply.rc, reply.code) == (1, 50), reply

    default = bridge_list(None, host_local(cluster.ipam, DEFAULT_SUBNET))
    kube_api.create(objects.nad("cluster-net", "kube-net", config=default))
    wait_for("/readyz to answer 200", lambda: daemon.http("/readyz").status == 200, 10.0)
    reply = daemon.shim("STATUS", config=status_config)
    assert (reply.rc, reply.out) == (0, None), reply
    assert daemon.stop() == 0


@pytest.mark.req("DEV-DEFAULT", "KUBE-CACHE")
def test_the_default_network_annotation_survives_the_feed_and_replaces_the_default(
    kube_daemon: DaemonNode, kube_api: RemoteKubeApi
) -> None:
    daemon, cluster = kube_daemon, kube_daemon.cluster
    add_nad(kube_api, cluster, "net-d", "10.85.0.0/24")
    default_network = {model.DEFAULT_NETWORK_ANNOTATION: f"{NS}/net-d"}
    pod = api_pod(kube_api, cluster, "web", None, annotations=default_network)
    daemon.start()

    reply = daemon.shim("ADD", pod)
    ok(reply, daemon)

    # The watch cache kept the annotation (the pod was listed before the ADD came, and never
    # read directly): eth0 is the NAD's, and the cluster default network never ran.
    assert direct_reads(kube_api, "web") == []
    status = published(kube_api, "web")
    assert [(e["name"], e["interface"], e["default"]) for e in status] == [
        (f"{NS}/net-d", "eth0", True)
    ]
    assert ipaddress.ip_interface(status[0]["ips"][0]).ip in ipaddress.ip_network("10.85.0.0/24")
    assert [a.split("/")[0] for a in cluster.allocations()] == ["net-d"]
    (event,) = wait_events(kube_api, "web", 1)
    assert event["message"] == f"Add eth0 [{status[0]['ips'][0]}] from {NS}/net-d"

    ok(daemon.shim("DEL", pod), daemon)
    assert cluster.leftovers() == NOTHING
    assert daemon.stop() == 0
