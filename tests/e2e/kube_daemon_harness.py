"""The daemon on the Kubernetes feed, for the e2e and fault tests that drive it: the fake API
server in the node namespace (`kube_api`), the daemon configured on it (`kube_daemon`), pods and
NADs created in the API, and what the daemon wrote back (network-status, Events, PATCHes) and
watches."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from netattach.cluster import model
from tests.e2e.daemon_harness import DaemonNode, wait_for
from tests.e2e.harness import Cluster, Pod, Reply, bridge_list, host_local
from tests.e2e.kube_harness import RemoteKubeApi
from tests.kube import objects
from tests.kube.api import Obj, RequestRecord
from tests.netns_fixtures import Node

NS = "blue"
STATUS = model.STATUS_ANNOTATION
NETWORKS = model.NETWORKS_ANNOTATION
MERGE_PATCH = "application/merge-patch+json"
# The kinds the daemon lists and watches, by plural.
WATCHED = ("multi-networkpolicies", "namespaces", "network-attachment-definitions", "pods")
EVENT_TIMEOUT = 10.0
WATCH_TIMEOUT = 20.0


@pytest.fixture
def kube_api(node: Node) -> Iterator[RemoteKubeApi]:
    """The fake API server, in the node namespace; always stopped at teardown."""
    api = RemoteKubeApi.launch(node.path)
    try:
        yield api
    finally:
        api.close()
        assert api.proc.returncode is not None


@pytest.fixture
def kube_daemon(kube_api: RemoteKubeApi, daemon: DaemonNode) -> DaemonNode:
    """The daemon (not started) with `feed: {kubernetes: {kubeconfig}}` on the fake, its node
    named after the node namespace; namespace `blue` exists in the API. Stopped before the API
    at teardown (fixtures end in reverse order)."""
    kubeconfig = kube_api.write_kubeconfig(daemon.cluster.root / "kubeconfig")
    daemon.settings["feed"] = {"kubernetes": {"kubeconfig": str(kubeconfig)}}
    daemon.settings["nodeName"] = daemon.cluster.node.name
    kube_api.create(objects.namespace(NS))
    return daemon


# -- helpers ---------------------------------------------------------------------------------------


def add_nad(api: RemoteKubeApi, cluster: Cluster, name: str, subnet: str) -> dict[str, Any]:
    """A NAD of a bridge network of its own with host-local on `subnet`; its config."""
    config = bridge_list(None, host_local(cluster.ipam, subnet))
    api.create(objects.nad(name, NS, config=config))
    return config


def api_pod(
    api: RemoteKubeApi,
    cluster: Cluster,
    name: str,
    networks: str | None,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> Pod:
    """A pod on the daemon's node, created in the API, plus a sandbox and a container ID."""
    wanted = dict(annotations or {})
    if networks is not None:
        wanted[NETWORKS] = networks
    created = api.create(
        objects.pod(
            name,
            NS,
            node_name=cluster.node.name,
            labels=labels,
            annotations=wanted or None,
            status={"phase": "Pending"},
        )
    )
    uid = created["metadata"]["uid"]
    container = f"na-ctr-{uid[:12]}"
    return Pod(NS, name, uid, cluster.new_pod_netns(), container)


def pod_annotations(api: RemoteKubeApi, name: str) -> dict[str, str]:
    """The annotations of pod `name` as the API has them."""
    stored = api.get("Pod", name, NS)
    assert stored is not None, f"pod {NS}/{name} is not in the API"
    found: dict[str, str] = stored["metadata"].get("annotations", {})
    return found


def published(api: RemoteKubeApi, name: str) -> list[dict[str, Any]]:
    """The pod's network-status annotation as read back from the API."""
    text = pod_annotations(api, name).get(STATUS)
    assert text is not None, f"pod {NS}/{name} has no {STATUS} annotation"
    entries = json.loads(text)
    assert isinstance(entries, list)
    return entries


def wait_events(api: RemoteKubeApi, name: str, count: int) -> list[Obj]:
    """The pod's Events once there are `count` of them (they are sent after the reply)."""
    found: list[Obj] = wait_for(
        f"{count} Event(s) on pod {NS}/{name}",
        lambda: (events := api.events_for(NS, name)) and len(events) >= count and events,
        EVENT_TIMEOUT,
    )
    return found


def pod_patches(api: RemoteKubeApi, name: str | None = None) -> list[RequestRecord]:
    """Every PATCH of a pod the API answered (of pod `name` only, when given)."""
    prefix = f"/api/v1/namespaces/{NS}/pods/"
    return [
        r
        for r in api.requests
        if r.method == "PATCH"
        and r.path.startswith(prefix)
        and (name is None or r.path == prefix + name)
    ]


def direct_reads(api: RemoteKubeApi, name: str) -> list[RequestRecord]:
    """Every GET of pod `name` itself (not a list or a watch) the API answered."""
    path = f"/api/v1/namespaces/{NS}/pods/{name}"
    return [r for r in api.requests if r.method == "GET" and r.path == path]


def watches_past(
    api: RemoteKubeApi, version: int, kinds: tuple[str, ...] = WATCHED
) -> dict[str, str] | None:
    """{plural: resourceVersion} of the open watches of `kinds` when each has one that started at
    `version` or later, else None. The reflector applies an event before it moves its
    resourceVersion past it, and lists a kind before watching it from the list's version: such a
    watch proves the daemon's cache holds every object of the kind written up to `version`."""
    found = {
        w.resource: w.query.get("resourceVersion", "")
        for w in api.active_watches
        if w.resource in kinds
    }
    if sorted(found) != sorted(kinds):
        return None
    if any(not v.isdigit() or int(v) < version for v in found.values()):
        return None
    return found


def ok(reply: Reply, daemon: DaemonNode) -> None:
    """The shim's call succeeded (else fail showing the daemon's log)."""
    assert (reply.rc, reply.code) == (0, None), (reply, daemon.log_text())


def api_pods(api: RemoteKubeApi, cluster: Cluster, count: int, networks: str) -> list[Pod]:
    """`count` pods `web-N` on the daemon's node selecting `networks`, created in the API in one
    round trip, each with a sandbox and a container ID."""
    names = [f"web-{n}" for n in range(count)]
    api.create_many(
        [
            objects.pod(
                name,
                NS,
                node_name=cluster.node.name,
                annotations={NETWORKS: networks},
                status={"phase": "Pending"},
            )
            for name in names
        ]
    )
    uids = {obj["metadata"]["name"]: obj["metadata"]["uid"] for obj in api.list("Pod", NS)}
    return [
        Pod(NS, name, uids[name], cluster.new_pod_netns(), f"na-ctr-{uids[name][:12]}")
        for name in names
    ]


def statuses(api: RemoteKubeApi) -> dict[str, list[tuple[str, bool]]]:
    """Pod name -> (network, default) of each entry of its network-status annotation in the API,
    for every pod of the namespace that has one."""
    found: dict[str, list[tuple[str, bool]]] = {}
    for obj in api.list("Pod", NS):
        text = obj["metadata"].get("annotations", {}).get(STATUS)
        if text is not None:
            found[obj["metadata"]["name"]] = [(e["name"], e["default"]) for e in json.loads(text)]
    return found


def pod_reads(api: RemoteKubeApi) -> list[str]:
    """Paths of the direct reads of single pods the API answered (a cache miss)."""
    prefix = f"/api/v1/namespaces/{NS}/pods/"
    return [r.path for r in api.requests if r.method == "GET" and r.path.startswith(prefix)]
