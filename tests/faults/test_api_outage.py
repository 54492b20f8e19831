"""The Kubernetes API failing under a running daemon (pods and NADs in the fake API, which runs in
the node namespace: tests/e2e/kube_harness.py).

One scenario, in order: a pod is attached; the API goes away and its DEL works from the pod
record alone; while the API is down a NAD is replaced with another config, another is deleted,
a new one and new pods are created; the API comes back, and the watch of NADs is answered
`410 Expired` (an ERROR event, as a real server sends it), so the daemon must list NADs again.
The relisted cache must be the API's, not a merge with what it held: the replaced NAD attaches
with its new config, the deleted one is not found. (The e2e tier covers a daemon *started* during
an outage and 410s from a compacted history; this is the running daemon's side.)
"""

from __future__ import annotations

import ipaddress
import time

import pytest

from tests.e2e.daemon_harness import DaemonNode, wait_for
from tests.e2e.harness import DEFAULT_NETWORK, NOTHING, Cluster, Reply
from tests.e2e.kube_daemon_harness import (
    NS,
    STATUS,
    WATCH_TIMEOUT,
    add_nad,
    api_pod,
    pod_annotations,
    published,
    watches_past,
)
from tests.e2e.kube_harness import RemoteKubeApi

pytestmark = pytest.mark.netns

NAD = "NetworkAttachmentDefinition"
NADS = "network-attachment-definitions"


def ok(reply: Reply, daemon: DaemonNode) -> None:
    assert (reply.rc, reply.code) == (0, None), (reply, daemon.log_text())


def addresses_in(cluster: Cluster, netns: str, ifname: str, subnet: str) -> list[str]:
    """The addresses of `ifname` in the pod that lie in `subnet`."""
    network = ipaddress.ip_network(subnet)
    kernel = cluster.interfaces(netns)
    return [a for a in kernel[ifname].addresses if ipaddress.ip_interface(a).ip in network]


@pytest.mark.req("RT-NOAPI", "KUBE-CACHE", "KUBE-NADREAD")
def test_del_without_the_api_then_a_410_relist_attaches_with_the_nads_as_they_are_now(
    kube_daemon: DaemonNode, kube_api: RemoteKubeApi
) -> None:
    daemon, cluster = kube_daemon, kube_daemon.cluster
    add_nad(kube_api, cluster, "net-a", "10.81.0.0/24")
    add_nad(kube_api, cluster, "net-old", "10.82.0.0/24")
    web = api_pod(kube_api, cluster, "web", "net-a,net-old")
    daemon.start()
    wait_for("the daemon's watches", lambda: watches_past(kube_api, 0), WATCH_TIMEOUT)
    ok(daemon.shim("ADD", web), daemon)
    assert [e["name"] for e in published(kube_api, "web")] == [
        DEFAULT_NETWORK,
        f"{NS}/net-a",
        f"{NS}/net-old",
    ]

    # The API goes away. DEL needs nothing from it: the pod record says what to undo; the
    # status removal does not hold the DEL up (KUBE-NADREAD), and is given up in the background
    # after its budget without failing anything.
    kube_api.stop()
    started = time.monotonic()
    ok(daemon.shim("DEL", web), daemon)
    assert time.monotonic() - started < 1.5  # it was 3-5 s of retries on the DEL's path
    assert cluster.leftovers() == NOTHING
    wait_for(
        "the status removal to be given up",
        lambda: f"[{NS}/web/{web.uid}] cannot remove the network status" in daemon.log_text(),
        15.0,
    )

    # Meanwhile, in the API: net-a gets another config, net-old goes, net-new and two pods come.
    kube_api.delete(NAD, "net-a", NS)
    add_nad(kube_api, cluster, "net-a", "10.91.0.0/24")
    kube_api.delete(NAD, "net-old", NS)
    add_nad(kube_api, cluster, "net-new", "10.92.0.0/24")
    late = api_pod(kube_api, cluster, "late", "net-a,net-new")
    stale = api_pod(kube_api, cluster, "stale", "net-old")
    written = int(kube_api.resource_version)
    kube_api.inject_error(410, method="GET", path=NADS, message="too old resource version")
    kube_api.start()

    # The NAD watch came back through a list: it started at `written` or later.
    wait_for(
        "the NAD watch to start from a fresh list",
        lambda: watches_past(kube_api, written, (NADS,)),
        WATCH_TIMEOUT,
    )
    assert "expired; listing again" in daemon.log_text()

    reply = daemon.shim("ADD", late)
    ok(reply, daemon)
    assert [(e["name"], e["interface"]) for e in published(kube_api, "late")] == [
        (DEFAULT_NETWORK, "eth0"),
        (f"{NS}/net-a", "net1"),
        (f"{NS}/net-new", "net2"),
    ]
    assert len(addresses_in(cluster, late.netns, "net1", "10.91.0.0/24")) == 1  # net-a as it is
    assert len(addresses_in(cluster, late.netns, "net2", "10.92.0.0/24")) == 1

    refused = daemon.shim("ADD", stale)
    assert (refused.rc, refused.code) == (1, 101), refused
    assert refused.out["msg"] == (
        f"[{NS}/stale/{stale.uid}] NetworkAttachmentDefinition {NS}/net-old not found"
    )
    assert cluster.interfaces(stale.netns) == {}

    for pod in (late, stale):
        ok(daemon.shim("DEL", pod), daemon)
    assert cluster.leftovers() == NOTHING
    assert STATUS not in pod_annotations(kube_api, "late")
    assert daemon.stop() == 0
