"""The Kubernetes feed's trimmed objects packed after a list page and unpacked after the last."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from lightkube.resources import core_v1

from netattach.cluster import kube_objects, model


def raw_pod(name: str, app: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": "7",
            "labels": {"app": app},
            "annotations": {model.NETWORKS_ANNOTATION: "blue", "note": "dropped"},
        },
        "spec": {
            "nodeName": "node-a",
            "containers": [
                {"name": "c", "image": "i", "ports": [{"name": "http", "containerPort": 80}]}
            ],
        },
        "status": {"phase": "Running"},
    }


def trimmed(shared: kube_objects.Shared) -> list[model.KubeObject]:
    nad = {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": model.NAD,
        "metadata": {"name": "blue", "namespace": "ns", "labels": {"app": "web"}},
        "spec": {"config": '{"cniVersion": "1.0.0", "type": "macvlan"}'},
    }
    policy = {
        "apiVersion": "k8s.cni.cncf.io/v1beta1",
        "kind": model.POLICY,
        "metadata": {"name": "only-web", "namespace": "ns"},
        "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress"]},
    }
    bare_pod = msgspec.convert({"metadata": {"name": "bare"}}, core_v1.Pod)
    return [
        kube_objects.trim_pod(msgspec.convert(raw_pod("a", "web"), core_v1.Pod), shared=shared),
        kube_objects.trim_pod(msgspec.convert(raw_pod("b", "web"), core_v1.Pod), shared=shared),
        kube_objects.trim_pod(bare_pod, shared=shared),
        kube_objects.trim_nad(nad, shared=shared),
        kube_objects.trim_nad({**nad, "spec": {}}, shared=shared),
        kube_objects.trim_policy(policy, shared=shared),
        kube_objects.trim_namespace(
            msgspec.convert({"metadata": {"name": "ns"}}, core_v1.Namespace)
        ),
    ]


@pytest.mark.req("KUBE-CACHE")
def test_unpacked_objects_are_the_packed_ones_key_order_included() -> None:
    objects = trimmed(kube_objects.Shared())
    expected = json.dumps(objects)
    unpacked = kube_objects.unpack(kube_objects.pack(objects))
    assert unpacked == objects
    assert json.dumps(unpacked) == expected
    assert json.dumps(objects) == expected  # packing left the objects alone


@pytest.mark.req("KUBE-CACHE")
def test_unpacked_objects_still_share_what_they_shared() -> None:
    a, b, *_ = kube_objects.unpack(kube_objects.pack(trimmed(kube_objects.Shared())))
    meta_a, meta_b = model.meta(a), model.meta(b)
    assert meta_a["labels"] is meta_b["labels"]
    assert meta_a["annotations"] is meta_b["annotations"]
    assert meta_a["namespace"] is meta_b["namespace"]
    assert a["spec"] is b["spec"]
    assert a["status"] is b["status"]
    assert a["kind"] is model.POD
    assert meta_a["name"] == "a"
    assert meta_a["uid"] == "uid-a"


@pytest.mark.req("KUBE-CACHE")
def test_equal_parts_are_one_object_and_a_hash_collision_is_not_shared() -> None:
    shared = kube_objects.Shared()
    first = shared.get("labels", {"app": "web", "tier": "front"})
    assert shared.get("labels", {"tier": "front", "app": "web"}) is first
    assert shared.get("annotations", {"app": "web", "tier": "front"}) is not first
    # Another content stored under the same key, as a hash collision would: not handed out.
    (key,) = (k for k in shared._table if k[0] == "labels")
    shared._table[key] = {"app": "db"}
    assert shared.get("labels", {"app": "web", "tier": "front"}) == {"app": "web", "tier": "front"}
