"""Builders for the objects the Kubernetes tests create: valid for a real API server too."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tests.kube.api import Obj

PAUSE_IMAGE = "registry.k8s.io/pause:3.9"


def _meta(
    name: str,
    namespace: str | None,
    labels: Mapping[str, str] | None,
    annotations: Mapping[str, str] | None,
) -> Obj:
    meta: Obj = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def namespace(name: str, *, labels: Mapping[str, str] | None = None) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(name, None, labels, None)}


def pod(
    name: str,
    namespace: str = "default",
    *,
    node_name: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    status: Obj | None = None,
    image: str = PAUSE_IMAGE,
) -> Obj:
    """A one-container pod; `status` (e.g. {"phase": "Running", "podIP": ...}) is kept by the
    fake's `create` hook, and written through /status by the real-server adapter."""
    spec: Obj = {"containers": [{"name": "main", "image": image}]}
    if node_name is not None:
        spec["nodeName"] = node_name
    obj: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(name, namespace, labels, annotations),
        "spec": spec,
    }
    if status is not None:
        obj["status"] = status
    return obj


def nad(
    name: str,
    namespace: str = "default",
    *,
    config: str | Mapping[str, Any] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> Obj:
    """A NetworkAttachmentDefinition; `config` as JSON text or as a mapping to serialize."""
    obj: Obj = {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": _meta(name, namespace, None, annotations),
    }
    if config is not None:
        obj["spec"] = {"config": config if isinstance(config, str) else json.dumps(config)}
    return obj


def policy(
    name: str,
    namespace: str = "default",
    *,
    spec: Obj | None = None,
    policy_for: str | None = None,
) -> Obj:
    """A MultiNetworkPolicy; `policy_for` is the k8s.v1.cni.cncf.io/policy-for annotation."""
    annotations = {"k8s.v1.cni.cncf.io/policy-for": policy_for} if policy_for else None
    return {
        "apiVersion": "k8s.cni.cncf.io/v1beta1",
        "kind": "MultiNetworkPolicy",
        "metadata": _meta(name, namespace, None, annotations),
        "spec": spec if spec is not None else {"podSelector": {}},
    }


def event(
    name: str,
    namespace: str,
    *,
    pod_name: str,
    reason: str,
    message: str,
    type: str = "Warning",
    component: str = "netattach",
) -> Obj:
    """A core/v1 Event about a pod."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod_name,
            "namespace": namespace,
        },
        "reason": reason,
        "message": message,
        "type": type,
        "source": {"component": component},
        "reportingComponent": component,
        "count": 1,
    }
