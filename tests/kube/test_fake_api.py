"""The API server the Kubernetes tests use, over plain HTTP (stdlib `http.client`).

Every test runs against the in-repo fake, and unchanged against a real API server when
NETATTACH_TEST_KUBECONFIG is set (the deploy/crds CRDs installed); tests that need a fake-only hook
skip there with "needs the in-repo fake".
"""

from __future__ import annotations

import secrets
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kube import objects
from tests.kube.api import PATCH_CONTENT_TYPES, ApiStatusError, KubeApi, Obj
from tests.kube.fake_api import FakeKubeApi
from tests.kube.kube_http import HttpResponse, KubeHttp, WatchEvent, WatchStream
from tests.kube.real_api import connection_from_kubeconfig
from tests.kube.resources import EVENTS, NADS, NAMESPACES, PODS, POLICIES

MERGE = PATCH_CONTENT_TYPES["merge"]
# A finalizer of the tests' own, holding an object (and so its namespace) until removed.
HOLD = "netattach.test/hold"
STRATEGIC = PATCH_CONTENT_TYPES["strategic"]
JSON_PATCH = PATCH_CONTENT_TYPES["json"]
APPLY = PATCH_CONTENT_TYPES["apply"]
STATUS_ANNOTATION = "k8s.v1.cni.cncf.io/network-status"


def ok(response: HttpResponse, code: int = 200) -> Obj:
    assert response.status == code, response.body
    assert response.headers["content-type"] == "application/json"
    body: Obj = response.json()
    return body


def failure(response: HttpResponse, code: int, reason: str) -> Obj:
    """The response is a `Status` failure with this code and reason."""
    assert response.status == code, response.body
    assert response.headers["content-type"] == "application/json"
    status: Obj = response.json()
    assert status["kind"] == "Status"
    assert status["apiVersion"] == "v1"
    assert status["status"] == "Failure"
    assert status["reason"] == reason
    assert status["code"] == code
    return status


def without_deletion_marks(watch: WatchStream, count: int) -> list[WatchEvent]:
    """The next `count` events of `watch`, leaving out the MODIFIED event that only sets a pod's
    deletionTimestamp: a real server may send one before DELETED even with no grace period."""
    events: list[WatchEvent] = []
    while len(events) < count:
        event = watch.expect()
        marks = event.type == "MODIFIED" and event.object["metadata"].get("deletionTimestamp")
        if not marks:
            events.append(event)
    return events


def rv(obj: Obj) -> int:
    return int(obj["metadata"]["resourceVersion"])


def create_pod(http: KubeHttp, namespace: str, name: str, **kwargs: Any) -> Obj:
    return ok(
        http.post(PODS.collection_path(namespace), objects.pod(name, namespace, **kwargs)), 201
    )


# -- discovery ---------------------------------------------------------------------------------


def test_discovery_documents_name_the_served_resources(kube_http: KubeHttp) -> None:
    assert "v1" in ok(kube_http.get("/api"))["versions"]
    groups = {g["name"]: g for g in ok(kube_http.get("/apis"))["groups"]}
    versions = {v["version"] for v in groups["k8s.cni.cncf.io"]["versions"]}
    assert {"v1", "v1beta1"} <= versions
    core = {r["name"]: r for r in ok(kube_http.get("/api/v1"))["resources"]}
    assert core["pods"]["namespaced"] is True
    assert core["pods"]["kind"] == "Pod"
    assert core["namespaces"]["namespaced"] is False
    assert "watch" in core["events"]["verbs"]
    assert "pods/status" in core
    v1 = ok(kube_http.get("/apis/k8s.cni.cncf.io/v1"))
    assert v1["groupVersion"] == "k8s.cni.cncf.io/v1"
    nad = {r["name"]: r for r in v1["resources"]}["network-attachment-definitions"]
    assert nad["kind"] == "NetworkAttachmentDefinition"
    assert "net-attach-def" in nad["shortNames"]
    beta = ok(kube_http.get("/apis/k8s.cni.cncf.io/v1beta1"))
    assert {r["name"] for r in beta["resources"]} >= {"multi-networkpolicies"}
    assert ok(kube_http.get("/version"))["major"] == "1"


def test_an_unknown_core_resource_is_a_404_status(kube_http: KubeHttp) -> None:
    status = failure(kube_http.get("/api/v1/widgets"), 404, "NotFound")
    assert status["message"] == "the server could not find the requested resource"


@pytest.mark.parametrize(
    "path",
    [
        "/apis/k8s.cni.cncf.io/v1/multi-networkpolicies",  # served at v1beta1 only
        "/apis/k8s.cni.cncf.io/v1/namespaces/default/widgets",
        "/apis/netattach-nothing.example.com/v1/widgets",  # no such group
    ],
)
def test_a_path_no_api_group_version_serves_is_a_plain_404(kube_http: KubeHttp, path: str) -> None:
    """Not a Status: kube-apiserver's last handler answers as Go's http.NotFound
    (reference/real-world.md), so a client must not expect JSON there."""
    response = kube_http.get(path)
    assert response.status == 404
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert response.body.decode().strip() == "404 page not found"


@pytest.mark.needs_fake(
    "uninstalls a CRD (set_crd_installed): on the shared real server that deletes every test's NADs"
)
def test_a_crd_not_installed_is_a_plain_404_and_absent_from_discovery(
    kube_http: KubeHttp, kube_namespace: str, fake_api: KubeApi
) -> None:
    ok(
        kube_http.post(NADS.collection_path(kube_namespace), objects.nad("kept", kube_namespace)),
        201,
    )
    fake_api.set_crd_installed("NetworkAttachmentDefinition", False)  # skips on a real server
    response = kube_http.get(NADS.collection_path(kube_namespace))
    assert (response.status, response.body) == (404, b"404 page not found\n")
    group = ok(kube_http.get("/apis/k8s.cni.cncf.io"))
    assert [v["version"] for v in group["versions"]] == ["v1beta1"]
    fake_api.set_crd_installed("NetworkAttachmentDefinition", True)
    assert names(ok(kube_http.get(NADS.collection_path(kube_namespace)))) == ["kept"]


# -- CRUD and errors ---------------------------------------------------------------------------


def test_create_get_delete_roundtrip(kube_http: KubeHttp, kube_namespace: str) -> None:
    body = objects.pod("web", kube_namespace)
    del body["metadata"]["namespace"]  # the namespace comes from the URL
    created = ok(kube_http.post(PODS.collection_path(kube_namespace), body), 201)
    meta = created["metadata"]
    assert meta["namespace"] == kube_namespace
    assert meta["uid"]
    assert meta["creationTimestamp"].endswith("Z")
    assert int(meta["resourceVersion"]) > 0
    assert created["status"]["phase"] == "Pending"
    assert created["spec"]["restartPolicy"] == "Always"  # defaulted

    fetched = ok(kube_http.get(PODS.object_path("web", kube_namespace)))
    assert fetched["metadata"]["uid"] == meta["uid"]
    assert fetched["kind"] == "Pod"
    assert fetched["apiVersion"] == "v1"

    deleted = kube_http.delete(PODS.object_path("web", kube_namespace))
    assert deleted.status in (200, 202)
    status = failure(kube_http.get(PODS.object_path("web", kube_namespace)), 404, "NotFound")
    assert status["message"] == 'pods "web" not found'
    assert status["details"] == {"name": "web", "kind": "pods"}
    failure(kube_http.delete(PODS.object_path("web", kube_namespace)), 404, "NotFound")


def test_not_found_names_the_resource(kube_http: KubeHttp, kube_namespace: str) -> None:
    status = failure(kube_http.get(NADS.object_path("nope", kube_namespace)), 404, "NotFound")
    assert status["message"] == 'network-attachment-definitions.k8s.cni.cncf.io "nope" not found'
    assert status["details"] == {
        "name": "nope",
        "group": "k8s.cni.cncf.io",
        "kind": "network-attachment-definitions",
    }
    failure(kube_http.get(POLICIES.object_path("nope", kube_namespace)), 404, "NotFound")
    failure(kube_http.get(EVENTS.object_path("nope", kube_namespace)), 404, "NotFound")
    failure(kube_http.get(NAMESPACES.object_path("netattach-no-such-ns")), 404, "NotFound")


def test_create_twice_is_409_already_exists(kube_http: KubeHttp, kube_namespace: str) -> None:
    create_pod(kube_http, kube_namespace, "twice")
    again = kube_http.post(
        PODS.collection_path(kube_namespace), objects.pod("twice", kube_namespace)
    )
    status = failure(again, 409, "AlreadyExists")
    assert status["details"]["name"] == "twice"
    nad = objects.nad("net", kube_namespace, config={"cniVersion": "1.0.0", "type": "bridge"})
    ok(kube_http.post(NADS.collection_path(kube_namespace), nad), 201)
    failure(kube_http.post(NADS.collection_path(kube_namespace), nad), 409, "AlreadyExists")


def test_create_in_a_missing_namespace_is_404(kube_http: KubeHttp) -> None:
    body = objects.pod("orphan", "netattach-no-such-ns")
    status = failure(
        kube_http.post(PODS.collection_path("netattach-no-such-ns"), body), 404, "NotFound"
    )
    assert status["details"]["kind"] == "namespaces"


def test_invalid_objects_are_422(kube_http: KubeHttp, kube_namespace: str) -> None:
    status = failure(
        kube_http.post(
            PODS.collection_path(kube_namespace), objects.pod("Bad_Name", kube_namespace)
        ),
        422,
        "Invalid",
    )
    assert status["details"]["kind"] == "Pod"
    assert [c["field"] for c in status["details"]["causes"]] == ["metadata.name"]
    no_image = objects.pod("no-image", kube_namespace)
    del no_image["spec"]["containers"][0]["image"]
    status = failure(kube_http.post(PODS.collection_path(kube_namespace), no_image), 422, "Invalid")
    assert "spec.containers[0].image" in [c["field"] for c in status["details"]["causes"]]
    failure(kube_http.post(NAMESPACES.collection_path(), objects.namespace("a.b")), 422, "Invalid")


def test_annotation_values_must_be_strings(kube_http: KubeHttp, kube_namespace: str) -> None:
    body = objects.pod("typed", kube_namespace)
    body["metadata"]["annotations"] = {STATUS_ANNOTATION: [{"name": "eth0"}]}
    failure(kube_http.post(PODS.collection_path(kube_namespace), body), 400, "BadRequest")


def test_namespace_in_body_must_match_the_url(kube_http: KubeHttp, kube_namespace: str) -> None:
    body = objects.pod("elsewhere", "default")
    failure(kube_http.post(PODS.collection_path(kube_namespace), body), 400, "BadRequest")


def test_generate_name(kube_http: KubeHttp, kube_namespace: str) -> None:
    body = objects.pod("x", kube_namespace)
    body["metadata"] = {"generateName": "gen-"}
    created = ok(kube_http.post(PODS.collection_path(kube_namespace), body), 201)
    assert created["metadata"]["name"].startswith("gen-")
    assert len(created["metadata"]["name"]) == len("gen-") + 5


def test_custom_resources_follow_the_crd_schema(kube_http: KubeHttp, kube_namespace: str) -> None:
    bad = objects.nad("bad", kube_namespace)
    bad["spec"] = {"config": 5}
    status = failure(kube_http.post(NADS.collection_path(kube_namespace), bad), 422, "Invalid")
    assert status["details"]["causes"][0]["field"] == "spec.config"

    extra = objects.nad("extra", kube_namespace, config='{"type": "bridge"}')
    extra["spec"]["unknown"] = "pruned"
    created = ok(kube_http.post(NADS.collection_path(kube_namespace), extra), 201)
    assert created["spec"] == {"config": '{"type": "bridge"}'}
    assert created["metadata"]["generation"] == 1

    pol = objects.policy(
        "allow-80",
        kube_namespace,
        spec={"podSelector": {}, "ingress": [{"ports": [{"port": 80}]}]},
        policy_for=f"{kube_namespace}/net",
    )
    created = ok(kube_http.post(POLICIES.collection_path(kube_namespace), pol), 201)
    assert created["spec"]["ingress"][0]["ports"][0] == {"port": 80, "protocol": "TCP"}
    no_selector = objects.policy("broken", kube_namespace, spec={"ingress": []})
    failure(kube_http.post(POLICIES.collection_path(kube_namespace), no_selector), 422, "Invalid")
    missing_kind = {"metadata": {"name": "nokind"}, "spec": {}}
    failure(kube_http.post(NADS.collection_path(kube_namespace), missing_kind), 400, "BadRequest")


# -- resourceVersion ---------------------------------------------------------------------------


def test_resource_versions_increase_and_lists_carry_one(
    kube_http: KubeHttp, kube_namespace: str
) -> None:
    first = create_pod(kube_http, kube_namespace, "one")
    second = create_pod(kube_http, kube_namespace, "two")
    assert rv(second) > rv(first)
    patched = ok(
        kube_http.patch(
            PODS.object_path("one", kube_namespace), {"metadata": {"labels": {"a": "b"}}}, MERGE
        )
    )
    assert rv(patched) > rv(second)
    listed = ok(kube_http.get(PODS.collection_path(kube_namespace)))
    assert listed["kind"] == "PodList"
    assert int(listed["metadata"]["resourceVersion"]) >= rv(patched)
    assert [p["metadata"]["name"] for p in listed["items"]] == ["one", "two"]
    assert [rv(p) for p in listed["items"]] == [rv(patched), rv(second)]


def test_a_write_that_changes_nothing_keeps_the_resource_version(
    kube_http: KubeHttp, kube_namespace: str
) -> None:
    pod = create_pod(kube_http, kube_namespace, "still", annotations={"a": "1"})
    same = ok(
        kube_http.patch(
            PODS.object_path("still", kube_namespace),
            {"metadata": {"annotations": {"a": "1"}}},
            MERGE,
        )
    )
    assert rv(same) == rv(pod)


def test_put_with_a_stale_resource_version_is_409(kube_http: KubeHttp, kube_namespace: str) -> None:
    pod = create_pod(kube_http, kube_namespace, "race")
    path = PODS.object_path("race", kube_namespace)
    mine = {**pod, "metadata": {**pod["metadata"], "labels": {"writer": "mine"}}}
    theirs = {**pod, "metadata": {**pod["metadata"], "labels": {"writer": "theirs"}}}
    updated = ok(kube_http.put(path, theirs))
    assert rv(updated) > rv(pod)
    status = failure(kube_http.put(path, mine), 409, "Conflict")
    assert "the object has been modified" in status["message"]
    assert status["details"]["name"] == "race"
    # a stale resourceVersion inside a patch is a precondition too
    stale = {
        "metadata": {"resourceVersion": pod["metadata"]["resourceVersion"], "labels": {"x": "y"}}
    }
    failure(kube_http.patch(path, stale, MERGE), 409, "Conflict")
    # without a resourceVersion the update is unconditional
    del mine["metadata"]["resourceVersion"]
    assert ok(kube_http.put(path, mine))["metadata"]["labels"] == {"writer": "mine"}
    failure(kube_http.put(PODS.object_path("other", kube_namespace), mine), 400, "BadRequest")


def test_put_of_a_missing_pod_is_404(kube_http: KubeHttp, kube_namespace: str) -> None:
    body = objects.pod("ghost", kube_namespace)
    failure(kube_http.put(PODS.object_path("ghost", kube_namespace), body), 404, "NotFound")


# -- patches -----------------------------------------------------------------------------------


def test_merge_patch_merges_maps_and_null_deletes(kube_http: KubeHttp, kube_namespace: str) -> None:
    create_pod(kube_http, kube_namespace, "m", annotations={"keep": "1", "drop": "2"})
    path = PODS.object_path("m", kube_namespace)
    patch = {"metadata": {"annotations": {"drop": None, "new": "3"}}}
    patched = ok(kube_http.patch(path, patch, MERGE))
    assert patched["metadata"]["annotations"] == {"keep": "1", "new": "3"}
    # lists are replaced whole by a merge patch
    patched = ok(kube_http.patch(path, {"metadata": {"finalizers": ["a.io/x"]}}, MERGE))
    patched = ok(kube_http.patch(path, {"metadata": {"finalizers": ["b.io/y"]}}, MERGE))
    assert patched["metadata"]["finalizers"] == ["b.io/y"]
    ok(kube_http.patch(path, {"metadata": {"finalizers": None}}, MERGE))


def test_json_patch_operations(kube_http: KubeHttp, kube_namespace: str) -> None:
    create_pod(kube_http, kube_namespace, "j", annotations={"a": "1", "b": "2"})
    path = PODS.object_path("j", kube_namespace)
    key = STATUS_ANNOTATION.replace("/", "~1")
    ops = [
        {"op": "test", "path": "/metadata/annotations/a", "value": "1"},
        {"op": "add", "path": f"/metadata/annotations/{key}", "value": "[]"},
        {"op": "replace", "path": "/metadata/annotations/a", "value": "10"},
        {"op": "remove", "path": "/metadata/annotations/b"},
    ]
    patched = ok(kube_http.patch(path, ops, JSON_PATCH))
    assert patched["metadata"]["annotations"] == {"a": "10", STATUS_ANNOTATION: "[]"}
    failed = [{"op": "test", "path": "/metadata/annotations/a", "value": "1"}]
    failure(kube_http.patch(path, failed, JSON_PATCH), 422, "Invalid")
    missing = [{"op": "remove", "path": "/metadata/annotations/nope"}]
    failure(kube_http.patch(path, missing, JSON_PATCH), 422, "Invalid")
    failure(kube_http.patch(path, {"not": "a list"}, JSON_PATCH), 400, "BadRequest")


def test_strategic_merge_patch(kube_http: KubeHttp, kube_namespace: str) -> None:
    create_pod(kube_http, kube_namespace, "s", annotations={"a": "1"})
    path = PODS.object_path("s", kube_namespace)
    patch = {
        "metadata": {"annotations": {"a": None, STATUS_ANNOTATION: "[]"}},
        "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
    }
    patched = ok(kube_http.patch(path, patch, STRATEGIC))
    assert patched["metadata"]["annotations"] == {STATUS_ANNOTATION: "[]"}
    (container,) = patched["spec"]["containers"]
    assert container["image"] == "registry.k8s.io/pause:3.10"
    assert container["terminationMessagePath"] == "/dev/termination-log"  # merged, not replaced


def test_strategic_merge_patch_is_refused_for_custom_resources(
    kube_http: KubeHttp, kube_namespace: str
) -> None:
    nad = objects.nad("n", kube_namespace, config='{"type": "bridge"}')
    ok(kube_http.post(NADS.collection_path(kube_namespace), nad), 201)
    patch = {"metadata": {"annotations": {"a": "b"}}}
    path = NADS.object_path("n", kube_namespace)
    failure(kube_http.patch(path, patch, STRATEGIC), 415, "UnsupportedMediaType")
    assert ok(kube_http.patch(path, patch, MERGE))["metadata"]["annotations"] == {"a": "b"}
    failure(kube_http.patch(path, patch, "text/plain"), 415, "UnsupportedMediaType")


def test_apply_patch_creates_then_updates(kube_http: KubeHttp, kube_namespace: str) -> None:
    path = NADS.object_path("applied", kube_namespace)
    body = objects.nad("applied", kube_namespace, config='{"type": "macvlan"}')
    query = {"fieldManager": "netattach-tests"}
    created = kube_http.request("PATCH", path, body=body, content_type=APPLY, query=query)
    assert ok(created, 201)["spec"]["config"] == '{"type": "macvlan"}'
    body["spec"]["config"] = '{"type": "ipvlan"}'
    updated = kube_http.request("PATCH", path, body=body, content_type=APPLY, query=query)
    assert ok(updated)["spec"]["config"] == '{"type": "ipvlan"}'
    failure(kube_http.patch(path, body, APPLY), 422, "Invalid")  # no fieldManager


# -- selectors and pagination ------------------------------------------------------------------


def names(doc: Obj) -> list[str]:
    return sorted(item["metadata"]["name"] for item in doc["items"])


def test_label_selectors(kube_http: KubeHttp, kube_namespace: str) -> None:
    create_pod(kube_http, kube_namespace, "a", labels={"app": "web", "tier": "front"})
    create_pod(kube_http, kube_namespace, "b", labels={"app": "db", "tier": "back"})
    create_pod(kube_http, kube_namespace, "c", labels={"app": "web"})
    create_pod(kube_http, kube_namespace, "d")
    path = PODS.collection_path(kube_namespace)
    cases = {
        "app=web": ["a", "c"],
        "app==web": ["a", "c"],
        "app!=web": ["b", "d"],
        "app in (web,db)": ["a", "b", "c"],
        "tier notin (front)": ["b", "c", "d"],
        "tier": ["a", "b"],
        "!tier": ["c", "d"],
        "app=web,tier": ["a"],
    }
    for selector, expected in cases.items():
        assert names(ok(kube_http.get(path, labelSelector=selector))) == expected, selector
    failure(kube_http.get(path, labelSelector="app in web"), 400, "BadRequest")


def test_field_selectors(kube_http: KubeHttp, kube_namespace: str) -> None:
    create_pod(kube_http, kube_namespace, "on-a", node_name="node-a")
    create_pod(kube_http, kube_namespace, "on-b", node_name="node-b")
    path = PODS.collection_path(kube_namespace)
    assert names(ok(kube_http.get(path, fieldSelector="spec.nodeName=node-a"))) == ["on-a"]
    assert names(ok(kube_http.get(path, fieldSelector="spec.nodeName==node-a"))) == ["on-a"]
    assert names(ok(kube_http.get(path, fieldSelector="spec.nodeName!=node-a"))) == ["on-b"]
    assert names(ok(kube_http.get(path, fieldSelector="metadata.name=on-b"))) == ["on-b"]
    everywhere = ok(
        kube_http.get(
            PODS.collection_path(),
            fieldSelector=f"metadata.namespace={kube_namespace},spec.nodeName=node-b",
        )
    )
    assert names(everywhere) == ["on-b"]
    failure(kube_http.get(path, fieldSelector="spec.bogus=1"), 400, "BadRequest")


def test_limit_and_continue(kube_http: KubeHttp, kube_namespace: str) -> None:
    for name in ("p1", "p2", "p3"):
        create_pod(kube_http, kube_namespace, name)
    path = PODS.collection_path(kube_namespace)
    first = ok(kube_http.get(path, limit="2"))
    assert names(first) == ["p1", "p2"]
    token = first["metadata"]["continue"]
    assert first["metadata"]["remainingItemCount"] == 1
    second = ok(kube_http.get(path, limit="2", **{"continue": token}))
    assert names(second) == ["p3"]
    assert not second["metadata"].get("continue")
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]


def test_lists_across_namespaces(
    kube_http: KubeHttp, kube_namespace: str, fake_api: KubeApi
) -> None:
    other = f"{kube_namespace}-b"
    fake_api.create(objects.namespace(other))
    for ns in (kube_namespace, other):
        ok(kube_http.post(NADS.collection_path(ns), objects.nad("net", ns, config="{}")), 201)
    everywhere = ok(kube_http.get(NADS.collection_path(), labelSelector=""))
    found = {(i["metadata"]["namespace"], i["metadata"]["name"]) for i in everywhere["items"]}
    assert {(kube_namespace, "net"), (other, "net")} <= found
    assert everywhere["items"][0]["kind"] == "NetworkAttachmentDefinition"
    only = ok(kube_http.get(NADS.collection_path(other)))
    assert [i["metadata"]["namespace"] for i in only["items"]] == [other]


# -- watch -------------------------------------------------------------------------------------


def test_watch_from_a_resource_version_delivers_the_later_events_in_order(
    kube_http: KubeHttp, kube_namespace: str
) -> None:
    create_pod(kube_http, kube_namespace, "early")
    start = ok(kube_http.get(PODS.collection_path(kube_namespace)))["metadata"]["resourceVersion"]
    create_pod(kube_http, kube_namespace, "late")
    ok(
        kube_http.patch(
            PODS.object_path("early", kube_namespace), {"metadata": {"labels": {"x": "1"}}}, MERGE
        )
    )
    ok(kube_http.delete(PODS.object_path("late", kube_namespace)))
    with kube_http.watch(PODS.collection_path(kube_namespace), {"resourceVersion": start}) as watch:
        assert watch.status == 200
        assert watch.headers["content-type"] == "application/json"
        events = without_deletion_marks(watch, 3)
        assert [(e.type, e.name) for e in events] == [
            ("ADDED", "late"),
            ("MODIFIED", "early"),
            ("DELETED", "late"),
        ]
        versions = [int(e.resource_version) for e in events]
        assert versions == sorted(versions)
        assert versions[0] > int(start)
        assert events[1].object["kind"] == "Pod"
        assert watch.drain(0.3) == []
        create_pod(kube_http, kube_namespace, "live")
        live = watch.expect()
        assert (live.type, live.name) == ("ADDED", "live")
        assert int(live.resource_version) > versions[-1]


def test_watch_without_a_resource_version_starts_with_the_current_objects(
    kube_http: KubeHttp, kube_namespace: str
) -> None:
    create_pod(kube_http, kube_namespace, "there")
    for rv_param in ({}, {"resourceVersion": "0"}):
        with kube_http.watch(PODS.collection_path(kube_namespace), rv_param) as watch:
            event = watch.expect()
            assert (event.type, event.name) == ("ADDED", "there")
            assert watch.drain(0.2) == []


def test_watch_parameter_spellings(kube_http: KubeHttp, kube_namespace: str) -> None:
    create_pod(kube_http, kube_namespace, "spelled")
    path = PODS.collection_path(kube_namespace)
    with kube_http.watch(path, {"watch": "1", "resourceVersion": "0"}) as numeric:
        assert numeric.expect().name == "spelled"
    legacy = f"/api/v1/watch/namespaces/{kube_namespace}/pods"
    with kube_http.watch(legacy, {"resourceVersion": "0"}) as old_style:
        assert old_style.expect().name == "spelled"


def test_delete_preconditions(kube_http: KubeHttp, kube_namespace: str) -> None:
    pod = create_pod(kube_http, kube_namespace, "guarded")
    path = PODS.object_path("guarded", kube_namespace)
    stale = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "not-it"}}
    failure(kube_http.delete(path, stale), 409, "Conflict")
    current = {
        "kind": "DeleteOptions",
        "apiVersion": "v1",
        "preconditions": {"uid": pod["metadata"]["uid"]},
    }
    assert kube_http.delete(path, current).status in (200, 202)


def test_a_patch_setting_another_uid_is_422_field_is_immutable(
    kube_http: KubeHttp, kube_namespace: str
) -> None:
    pod = create_pod(kube_http, kube_namespace, "web")
    path = PODS.object_path("web", kube_namespace)
    guard = {"metadata": {"uid": "0b0e4e5c-0000-4000-8000-000000000000", "labels": {"a": "b"}}}
    status = failure(kube_http.patch(path, guard, MERGE), 422, "Invalid")
    assert status["message"] == (
        'Pod "web" is invalid: metadata.uid: Invalid value: '
        '"0b0e4e5c-0000-4000-8000-000000000000": field is immutable'
    )
    assert status["details"]["causes"][0]["field"] == "metadata.uid"
    same = {"metadata": {"uid": pod["metadata"]["uid"], "labels": {"a": "b"}}}
    assert ok(kube_http.patch(path, same, MERGE))["metadata"]["labels"] == {"a": "b"}


def test_watch_with_a_selector_sees_objects_enter_and_leave(
    kube_http: KubeHttp, kube_namespace: str
) -> None:
    create_pod(kube_http, kube_namespace, "mover", labels={"net": "yes"})
    path = PODS.object_path("mover", kube_namespace)
    query = {"labelSelector": "net=yes", "resourceVersion": "0"}
    with kube_http.watch(PODS.collection_path(kube_namespace), query) as watch:
        assert watch.expect().type == "ADDED"
        moved = ok(kube_http.patch(path, {"metadata": {"labels": {"net": "no"}}}, MERGE))
        left = watch.expect()
        # the last version that matched (reference/real-world.md), at the change's version
        assert (left.type, left.object["metadata"]["labels"]) == ("DELETED", {"net": "yes"})
        assert left.resource_version == moved["metadata"]["resourceVersion"]
        ok(kube_http.patch(path, {"metadata": {"labels": {"net": "yes"}}}, MERGE))
        assert watch.expect().type == "ADDED"
        create_pod(kube_http, kube_namespace, "other", labels={"net": "no"})
        assert watch.drain(0.3) == []


def test_watch_all_namespaces_and_one_object(
    kube_http: KubeHttp, kube_namespace: str, fake_api: KubeApi
) -> None:
    start = fake_api.resource_version
    with (
        kube_http.watch(NADS.collection_path(), {"resourceVersion": start}) as everywhere,
        kube_http.watch(
            NADS.collection_path(kube_namespace),
            {"resourceVersion": start, "fieldSelector": "metadata.name=wanted"},
        ) as one,
    ):
        for name in ("unwanted", "wanted"):
            body = objects.nad(name, kube_namespace, config="{}")
            ok(kube_http.post(NADS.collection_path(kube_namespace), body), 201)
        # other namespaces' objects may come and go meanwhile: an earlier test's namespace is
        # deleted by the namespace controller, its NADs with it, whenever that controller gets to it
        ours: list[str] = []
        while len(ours) < 2:
            event = everywhere.expect()
            if event.namespace == kube_namespace:
                ours.append(event.name)
        assert ours == ["unwanted", "wanted"]
        assert one.expect().name == "wanted"
        assert one.drain(0.2) == []


@pytest.mark.needs_fake(
    "bookmarks every 0.1 s (set_bookmark_interval): a real server sends one about a minute"
)
def test_bookmarks_arrive_with_allow_watch_bookmarks(
    kube_http: KubeHttp, kube_namespace: str, fake_api: KubeApi
) -> None:
    fake_api.set_bookmark_interval(0.1)
    create_pod(kube_http, kube_namespace, "b")
    query = {"resourceVersion": "0", "allowWatchBookmarks": "true"}
    with kube_http.watch(PODS.collection_path(kube_namespace), query) as watch:
        added = watch.expect()
        assert added.type == "ADDED"
        bookmark = watch.expect(2)
        assert bookmark.type == "BOOKMARK"
        # kube-apiserver 1.28's skeleton (reference/real-world.md): not a valid Pod.
        assert bookmark.object == {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": bookmark.resource_version, "creationTimestamp": None},
            "spec": {"containers": None},
            "status": {},
        }
        assert int(bookmark.resource_version) >= int(added.resource_version)
    with kube_http.watch(PODS.collection_path(kube_namespace), {"resourceVersion": "0"}) as plain:
        assert plain.expect().type == "ADDED"
        assert plain.drain(0.3) == []  # no bookmarks unless asked for
    with kube_http.watch(NADS.collection_path(kube_namespace), query) as custom:
        # a custom resource's bookmark is unstructured: metadata only
        assert custom.expect(2).object == {
            "kind": "NetworkAttachmentDefinition",
            "apiVersion": "k8s.cni.cncf.io/v1",
            "metadata": {"resourceVersion": fake_api.resource_version},
        }


def test_send_initial_events_ends_with_a_bookmark(
    kube_http: KubeHttp, kube_namespace: str, fake_api: KubeApi
) -> None:
    create_pod(kube_http, kube_namespace, "i")
    query = {
        "sendInitialEvents": "true",
        "resourceVersionMatch": "NotOlderThan",
        "allowWatchBookmarks": "true",
    }
    with kube_http.watch(PODS.collection_path(kube_namespace), query) as watch:
        assert watch.expect().type == "ADDED"
        end = watch.expect()
        assert end.type == "BOOKMARK"
        assert end.object["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_timeout_seconds_ends_the_stream(kube_http: KubeHttp, kube_namespace: str) -> None:
    began = time.monotonic()
    query = {"resourceVersion": "0", "timeoutSeconds": "1"}
    with kube_http.watch(PODS.collection_path(kube_namespace), query) as watch:
        assert watch.wait_ended(5) == "closed"
    assert 0.9 <= time.monotonic() - began < 4


@pytest.mark.needs_fake("compacts the history on demand (compact)")
def test_a_compacted_resource_version_gives_an_expired_error_event(
    kube_http: KubeHttp, kube_namespace: str, fake_api: KubeApi
) -> None:
    create_pod(kube_http, kube_namespace, "old")
    old = fake_api.resource_version
    create_pod(kube_http, kube_namespace, "new")
    current = fake_api.compact()
    with kube_http.watch(PODS.collection_path(kube_namespace), {"resourceVersion": old}) as watch:
        assert watch.status == 200
        error = watch.expect()
        assert error.type == "ERROR"
        assert error.object["kind"] == "Status"
        assert error.object["code"] == 410
        assert error.object["reason"] == "Expired"
        assert error.object["message"] == f"too old resource version: {old} ({current})"
        assert watch.wait_ended() == "closed"
    with kube_http.watch(PODS.collection_path(kube_namespace), {"resourceVersion": current}) as ok_:
        create_pod(kube_http, kube_namespace, "after")
        assert ok_.expect().name == "after"


def test_the_history_window_is_bounded() -> None:
    with FakeKubeApi(history_limit=3) as fake:
        http = KubeHttp(fake.connection())
        start = fake.resource_version
        for name in ("a", "b", "c", "d"):
            fake.create(objects.pod(name))
        with http.watch(PODS.collection_path("default"), {"resourceVersion": start}) as watch:
            assert watch.expect().object["reason"] == "Expired"
        one_later = str(int(start) + 1)
        with http.watch(PODS.collection_path("default"), {"resourceVersion": one_later}) as watch:
            assert [e.name for e in watch.take(3)] == ["b", "c", "d"]


@pytest.mark.needs_fake("restarts the API server (restart)")
def test_restart_cuts_watches_and_keeps_the_data(
    kube_http: KubeHttp, kube_namespace: str, fake_api: KubeApi
) -> None:
    fake_api.restart(0.0)  # skips on a real server
    create_pod(kube_http, kube_namespace, "before")
    with kube_http.watch(PODS.collection_path(kube_namespace), {"resourceVersion": "0"}) as watch:
        last = watch.expect()
        fake_api.restart(0.5, wait=False)
        assert watch.wait_ended(2) == "cut"
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(
            ("127.0.0.1", int(fake_api.connection().base_url.rsplit(":", 1)[1])), 1
        )
    fake_api.create(objects.pod("during", kube_namespace))  # the data lives on
    deadline = time.monotonic() + 3
    while True:
        try:
            kube_http.get("/version")
            break
        except OSError:
            assert time.monotonic() < deadline, "the fake did not come back"
            time.sleep(0.05)
    query = {"resourceVersion": last.resource_version}
    with kube_http.watch(PODS.collection_path(kube_namespace), query) as resumed:
        event = resumed.expect()
        assert (event.type, event.name) == ("ADDED", "during")
    assert ok(kube_http.get(PODS.object_path("before", kube_namespace)))


@pytest.mark.needs_fake("restarts the API server with a cold history (restart, compact)")
def test_restart_with_compact_expires_old_resource_versions(
    kube_http: KubeHttp, kube_namespace: str, fake_api: KubeApi
) -> None:
    old = fake_api.resource_version
    create_pod(kube_http, kube_namespace, "p")
    fake_api.restart(0.05, compact=True)
    with kube_http.watch(PODS.collection_path(kube_namespace), {"resourceVersion": old}) as watch:
        assert watch.expect().object["code"] == 410


@pytest.mark.needs_fake("stops and starts the API server (stop, start)")
def test_stop_and_start_keep_the_port_and_the_data(
    kube_http: KubeHttp, kube_namespace: str, fake_api: KubeApi
) -> None:
    fake_api.stop()
    with pytest.raises(ConnectionRefusedError):
        kube_http.get("/version")
    fake_api.start()
    assert ok(kube_http.get(NAMESPACES.object_path(kube_namespace)))["status"]["phase"] == "Active"


# -- finalizers, status, events ----------------------------------------------------------------


def test_finalizers_delay_deletion(kube_http: KubeHttp, kube_namespace: str) -> None:
    nad = objects.nad("held", kube_namespace, config="{}")
    nad["metadata"]["finalizers"] = ["netattach.test/hold"]
    created = ok(kube_http.post(NADS.collection_path(kube_namespace), nad), 201)
    path = NADS.object_path("held", kube_namespace)
    query = {"resourceVersion": created["metadata"]["resourceVersion"]}
    with kube_http.watch(NADS.collection_path(kube_namespace), query) as watch:
        terminating = ok(kube_http.delete(path))
        assert terminating["metadata"]["deletionTimestamp"]
        assert ok(kube_http.get(path))["metadata"]["deletionTimestamp"]
        event = watch.expect()
        assert event.type == "MODIFIED"
        assert event.object["metadata"]["deletionTimestamp"]
        ok(kube_http.patch(path, {"metadata": {"finalizers": None}}, MERGE))
        assert watch.expect().type == "DELETED"
    failure(kube_http.get(path), 404, "NotFound")


def test_a_graceful_pod_delete_is_modified_then_deleted_when_the_kubelet_confirms(
    kube_http: KubeHttp, kube_namespace: str
) -> None:
    created = create_pod(kube_http, kube_namespace, "grace", node_name="node-a")
    path = PODS.object_path("grace", kube_namespace)
    query = {"resourceVersion": created["metadata"]["resourceVersion"]}
    with kube_http.watch(PODS.collection_path(kube_namespace), query) as watch:
        terminating = ok(kube_http.delete(path))
        assert terminating["metadata"]["deletionTimestamp"]
        assert terminating["metadata"]["deletionGracePeriodSeconds"] == 30
        event = watch.expect()
        assert event.type == "MODIFIED"
        assert event.object["metadata"]["deletionTimestamp"]
        assert ok(kube_http.get(path))["metadata"]["deletionTimestamp"]  # still there
        # the kubelet, once the containers stopped (a real server may first send the grace
        # period shortened to 0 as another MODIFIED)
        ok(kube_http.request("DELETE", path, query={"gracePeriodSeconds": "0"}))
        (gone,) = without_deletion_marks(watch, 1)
        assert (gone.type, gone.name) == ("DELETED", "grace")
    failure(kube_http.get(path), 404, "NotFound")


def test_an_unscheduled_pod_is_deleted_at_once(kube_http: KubeHttp, kube_namespace: str) -> None:
    created = create_pod(kube_http, kube_namespace, "nowhere")
    query = {"resourceVersion": created["metadata"]["resourceVersion"]}
    with kube_http.watch(PODS.collection_path(kube_namespace), query) as watch:
        ok(kube_http.delete(PODS.object_path("nowhere", kube_namespace)))
        failure(kube_http.get(PODS.object_path("nowhere", kube_namespace)), 404, "NotFound")
        assert [e.type for e in without_deletion_marks(watch, 1)] == ["DELETED"]
        assert watch.drain(0.2) == []


def test_a_terminating_namespace_refuses_new_content_with_403(
    kube_http: KubeHttp, fake_api: KubeApi
) -> None:
    name = f"netattach-test-{secrets.token_hex(4)}"
    ok(kube_http.post(NAMESPACES.collection_path(), objects.namespace(name)), 201)
    held = objects.pod("held", name)
    if fake_api.is_fake:
        fake_api.set_namespace_controller(False)
    else:
        # A real namespace controller empties the namespace: a pod its finalizer holds keeps
        # the namespace Terminating until the finalizer goes.
        held["metadata"]["finalizers"] = [HOLD]
        ok(kube_http.post(PODS.collection_path(name), held), 201)
    try:
        _terminating_namespace_refuses(kube_http, name)
    finally:
        if not fake_api.is_fake:
            unhold = {"metadata": {"finalizers": None}}
            kube_http.patch(PODS.object_path("held", name), unhold, MERGE)


def _terminating_namespace_refuses(kube_http: KubeHttp, name: str) -> None:
    terminating = ok(kube_http.delete(NAMESPACES.object_path(name)))
    assert terminating["status"]["phase"] == "Terminating"
    assert terminating["metadata"]["deletionTimestamp"]
    event = objects.event("web.1", name, pod_name="web", reason="X", message="y")
    status = failure(kube_http.post(EVENTS.collection_path(name), event), 403, "Forbidden")
    assert status["message"] == (
        f'events "web.1" is forbidden: unable to create new content in namespace {name} '
        "because it is being terminated"
    )
    assert status["details"]["causes"][0]["reason"] == "NamespaceTerminating"
    # A second delete answers the namespace as it is (kube-apiserver 1.28 answered 409).
    again = ok(kube_http.delete(NAMESPACES.object_path(name)))
    assert again["status"]["phase"] == "Terminating"
    assert again["metadata"]["deletionTimestamp"] == terminating["metadata"]["deletionTimestamp"]


def test_pod_status_is_written_through_its_subresource(
    kube_http: KubeHttp, kube_namespace: str
) -> None:
    pod = create_pod(kube_http, kube_namespace, "st")
    path = PODS.object_path("st", kube_namespace)
    ignored = ok(kube_http.patch(path, {"status": {"phase": "Running"}}, MERGE))
    assert ignored["status"]["phase"] == "Pending"
    assert rv(ignored) == rv(pod)
    running = ok(kube_http.patch(path + "/status", {"status": {"phase": "Running"}}, MERGE))
    assert running["status"]["phase"] == "Running"
    assert rv(running) > rv(pod)


def test_pod_spec_is_mostly_immutable(kube_http: KubeHttp, kube_namespace: str) -> None:
    create_pod(kube_http, kube_namespace, "fixed", node_name="node-a")
    path = PODS.object_path("fixed", kube_namespace)
    moved = {"spec": {"nodeName": "node-b"}}
    failure(kube_http.patch(path, moved, MERGE), 422, "Invalid")


def test_events_about_a_pod(kube_http: KubeHttp, kube_namespace: str, fake_api: KubeApi) -> None:
    create_pod(kube_http, kube_namespace, "victim")
    body = objects.event(
        "victim.1", kube_namespace, pod_name="victim", reason="NoNetwork", message="nad missing"
    )
    ok(kube_http.post(EVENTS.collection_path(kube_namespace), body), 201)
    other = objects.event(
        "bystander.1", kube_namespace, pod_name="bystander", reason="X", message="y"
    )
    ok(kube_http.post(EVENTS.collection_path(kube_namespace), other), 201)
    (event,) = fake_api.events_for(kube_namespace, "victim")
    assert (event["reason"], event["message"], event["type"]) == (
        "NoNetwork",
        "nad missing",
        "Warning",
    )
    selected = ok(
        kube_http.get(
            EVENTS.collection_path(kube_namespace), fieldSelector="involvedObject.name=victim"
        )
    )
    assert names(selected) == ["victim.1"]
    elsewhere = objects.event("x.1", kube_namespace, pod_name="x", reason="X", message="y")
    elsewhere["involvedObject"]["namespace"] = "default"
    failure(kube_http.post(EVENTS.collection_path(kube_namespace), elsewhere), 422, "Invalid")


def test_deleting_a_namespace_deletes_its_objects(
    kube_http: KubeHttp, kube_namespace: str, fake_api: KubeApi
) -> None:
    create_pod(kube_http, kube_namespace, "inside")
    with kube_http.watch(
        PODS.collection_path(kube_namespace), {"resourceVersion": fake_api.resource_version}
    ) as w:
        ok(kube_http.delete(NAMESPACES.object_path(kube_namespace)))
        # A real namespace controller may first mark the pod (its DisruptionTarget condition):
        # MODIFIED events, then DELETED, then nothing. (The watch is of this namespace only: on a
        # shared server, other tests' namespaces are being emptied meanwhile.)
        events = [w.expect(timeout=30.0)]
        while events[-1].type != "DELETED":
            events.append(w.expect(timeout=30.0))
        assert {e.type for e in events[:-1]} <= {"MODIFIED"}, events
        assert events[-1].name == "inside"
        assert w.next(0.2) is None
    assert fake_api.get("Pod", "inside", kube_namespace) is None


# -- authentication and the fake's hooks -------------------------------------------------------


def test_a_wrong_token_is_401_when_it_is_the_only_credential(
    kube_http: KubeHttp, kube_namespace: str
) -> None:
    token_only = KubeHttp(kube_http.conn.token_only())
    response = token_only.request("GET", PODS.collection_path(kube_namespace), token="wrong")
    status = failure(response, 401, "Unauthorized")
    assert status["message"] == "Unauthorized"
    watch = token_only.watch(PODS.collection_path(kube_namespace), token="wrong")
    assert watch.status == 401
    assert watch.error["reason"] == "Unauthorized"


def test_a_wrong_token_next_to_a_client_certificate_is_not_looked_at(
    admin_kubeconfig: Path, kube_namespace: str
) -> None:
    """The local cluster's client-certificate identity (the fake serves HTTP: no certificates)."""
    kube_http = KubeHttp(connection_from_kubeconfig(admin_kubeconfig))
    assert kube_http.conn.client_certificate
    # the certificate authenticates (reference/real-world.md)
    response = kube_http.request("GET", PODS.collection_path(kube_namespace), token="wrong")
    assert ok(response)["items"] == []


@pytest.mark.needs_fake("changes the server's token (set_token)")
def test_set_token_controls_authentication(kube_http: KubeHttp, fake_api: KubeApi) -> None:
    fake_api.set_token("s3cret")
    failure(kube_http.request("GET", "/api/v1/namespaces", token=None), 401, "Unauthorized")
    assert kube_http.request("GET", "/api/v1/namespaces", token="s3cret").status == 200
    fake_api.set_token(None)
    assert kube_http.request("GET", "/api/v1/namespaces", token=None).status == 200


@pytest.mark.needs_fake("reads the server's request log (requests)")
def test_the_request_log_shows_how_an_object_was_written(
    kube_http: KubeHttp, kube_namespace: str, fake_api: KubeApi
) -> None:
    fake_api.clear_requests()
    create_pod(kube_http, kube_namespace, "logged")
    patch = {"metadata": {"annotations": {STATUS_ANNOTATION: "[]"}}}
    ok(kube_http.patch(PODS.object_path("logged", kube_namespace), patch, MERGE))
    with kube_http.watch(PODS.collection_path(kube_namespace), {"timeoutSeconds": "1"}) as watch:
        watch.expect()
    records = fake_api.requests
    assert [(r.method, r.status) for r in records] == [("POST", 201), ("PATCH", 200), ("GET", 200)]
    written = records[1]
    assert written.path == PODS.object_path("logged", kube_namespace)
    assert written.content_type == MERGE
    assert written.body == patch
    assert records[2].watch
    assert records[2].query == {"watch": "true", "timeoutSeconds": "1"}


@pytest.mark.needs_fake("injects errors (inject_error)")
def test_injected_errors(kube_http: KubeHttp, kube_namespace: str, fake_api: KubeApi) -> None:
    create_pod(kube_http, kube_namespace, "flaky")
    path = PODS.object_path("flaky", kube_namespace)
    fake_api.inject_error(409, method="PATCH", path="/pods/flaky$")
    patch = {"metadata": {"annotations": {"a": "b"}}}
    failure(kube_http.patch(path, patch, MERGE), 409, "Conflict")
    ok(kube_http.patch(path, patch, MERGE))
    fake_api.inject_error(503, times=2)
    failure(kube_http.get(path), 503, "ServiceUnavailable")
    failure(kube_http.get(path), 503, "ServiceUnavailable")
    ok(kube_http.get(path))
    fake_api.inject_error(429)
    assert kube_http.get(path).headers["retry-after"] == "1"
    fake_api.inject_error(410, path="/pods$")
    with kube_http.watch(PODS.collection_path(kube_namespace)) as watch:
        assert watch.expect().object["reason"] == "Expired"


@pytest.mark.needs_fake("lists the server's open watches (active_watches)")
def test_active_watches_are_visible(kube_http: KubeHttp, fake_api: KubeApi) -> None:
    with kube_http.watch(PODS.collection_path(), {"resourceVersion": fake_api.resource_version}):
        fake_api.wait_for_watches(1, path_contains="/pods")
        (info,) = fake_api.active_watches
        assert (info.resource, info.namespace, info.path) == ("pods", None, "/api/v1/pods")
    deadline = time.monotonic() + 2
    while fake_api.active_watches:  # the fake notices the client going away
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_hooks_share_the_api_rules(fake_api: KubeApi, kube_namespace: str) -> None:
    created = fake_api.create(
        objects.pod("hooked", kube_namespace, node_name="n1", status={"phase": "Running"})
    )
    assert created["status"]["phase"] == "Running"  # the control plane may set a status
    with pytest.raises(ApiStatusError) as raised:
        fake_api.create(objects.pod("hooked", kube_namespace))
    assert (raised.value.code, raised.value.reason) == (409, "AlreadyExists")
    fetched = fake_api.get("Pod", "hooked", kube_namespace)
    assert fetched is not None
    fetched["metadata"]["labels"] = {"x": "y"}
    updated = fake_api.update(fetched)
    assert rv(updated) > rv(created)
    with pytest.raises(ApiStatusError) as raised:
        fake_api.update(fetched)  # stale now
    assert raised.value.code == 409
    patched = fake_api.patch("Pod", "hooked", {"metadata": {"labels": None}}, kube_namespace)
    assert "labels" not in patched["metadata"]
    assert [p["metadata"]["name"] for p in fake_api.list("pods", kube_namespace)] == ["hooked"]
    assert fake_api.list("Pod", kube_namespace, field_selector="spec.nodeName=n2") == []
    fake_api.delete("Pod", "hooked", kube_namespace)
    assert fake_api.get("Pod", "hooked", kube_namespace) is None
    with pytest.raises(ApiStatusError) as raised:
        fake_api.delete("Pod", "hooked", kube_namespace)
    assert raised.value.code == 404


def test_kubeconfig_names_the_server_and_the_token(kubeconfig: Path, fake_api: KubeApi) -> None:
    config = yaml.safe_load(kubeconfig.read_text(encoding="utf-8"))
    assert config["kind"] == "Config"
    conn = connection_from_kubeconfig(kubeconfig)
    assert conn.base_url == fake_api.connection().base_url
    assert conn.token == fake_api.connection().token
    if fake_api.is_fake:
        assert conn.base_url.startswith("http://127.0.0.1:")
        assert conn.token
    assert KubeHttp(conn).get("/api/v1/namespaces").status == 200
