"""What the Kubernetes feed keeps of each object: the fields netattach reads, nothing else.

A node daemon caches every Namespace, NetworkAttachmentDefinition and MultiNetworkPolicy of the
cluster and the pods of its node (of the whole cluster when policy is enforced: peers run
anywhere), so each object is cut down as it arrives (`trim_*`):

    all kinds   metadata.name, .namespace, .uid, .resourceVersion, .labels (selectors read them)
                and the annotations under `k8s.v1.cni.cncf.io/` (networks, network-status,
                policy-for, resourceName), a static pod's `kubernetes.io/config.mirror`
                (RT-STATIC) and a pod's `v1.multus-cni.io/default-network` (DEV-DEFAULT);
                other annotations (last-applied-configuration...) go
    Pod         spec.nodeName, the named container ports (name, containerPort, protocol);
                status.phase, status.resourceClaimStatuses (DEV-RESOURCE)
    Namespace   nothing more (namespaceSelector reads its labels)
    NAD         spec.config (plan.resolve_nad); `spec: {}` is kept apart from no spec at all
    Policy      the whole spec (podSelector, policyTypes, ingress, egress)

Pods and Namespaces arrive as lightkube's typed models, the custom resources as plain mappings
(lightkube's generic resources); both become `model.KubeObject` dicts with apiVersion and kind.

Thousands of pods repeat the same label maps, annotations, specs and statuses: with a `Shared`
table, equal parts are one object (and names one interned string), so a cached pod costs
little beyond its name, UID and resourceVersion. Cached objects are read, never changed in
place, which is what makes the sharing safe.
"""

import dataclasses
import json
import sys
from collections.abc import Mapping
from typing import Any, Final

from lightkube.models import meta_v1
from lightkube.resources import core_v1

from netattach.cluster import model

# The Network Plumbing WG's annotation prefix: every annotation netattach reads starts with it.
OUR_ANNOTATIONS: Final = "k8s.v1.cni.cncf.io/"


# Annotations of other prefixes that netattach reads.
KEPT_ANNOTATIONS: Final = frozenset({model.MIRROR_ANNOTATION, model.DEFAULT_NETWORK_ANNOTATION})


class Shared:
    """One object per distinct content of the parts many objects repeat (bounded: when full it
    starts again empty; sharing saves memory, it is never needed for correctness)."""

    def __init__(self, limit: int = 65536) -> None:
        self.limit = limit
        # Keyed by the hash of the content's canonical JSON, not the JSON itself (~250 bytes an
        # entry kept for nothing); a hit is checked equal, so a hash collision only goes unshared.
        self._table: dict[tuple[str, int], Any] = {}

    def get(self, kind: str, value: Any) -> Any:
        key = (kind, hash(json.dumps(value, sort_keys=True, separators=(",", ":"))))
        found = self._table.get(key)
        if found is not None and found == value:
            return found
        if found is not None:
            return _interned(value)  # another content with the same hash: not shared
        if len(self._table) >= self.limit:
            self._table.clear()
        found = self._table[key] = _interned(value)
        return found


def _interned(value: Any) -> Any:
    """`value` with every string in it interned."""
    if isinstance(value, str):
        return sys.intern(value)
    if isinstance(value, dict):
        return {sys.intern(k) if isinstance(k, str) else k: _interned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_interned(v) for v in value]
    return value


def _share(shared: Shared | None, kind: str, value: Any) -> Any:
    return value if shared is None else shared.get(kind, value)


# The parts of a trimmed object that `pack` hands over as they are, not through its JSON: those
# many objects share (one object each through `Shared`, or an interned string), in this order.
_HANDED_PARTS: Final = ("apiVersion", "kind", "spec", "status")
_HANDED_META: Final = ("namespace", "labels", "annotations")
# A pod's spec and status are shared; a NAD's or a policy's spec is its own (through the JSON).
_POD_ONLY: Final = frozenset({"spec", "status"})
# What stands in the JSON for a part handed over: a small int, which Python never allocates anew.
_HOLE: Final = 0
# In `Packed.parts`, for a part that is not handed over (absent, or in the JSON).
_NOT_HANDED: Final = object()


@dataclasses.dataclass(frozen=True, slots=True)
class Packed:
    data: bytes  # the objects as JSON, their handed-over parts as `_HOLE`s
    parts: list[Any]  # per object, _HANDED_PARTS then _HANDED_META: the part or _NOT_HANDED


def _hand_over(
    mapping: dict[str, Any], keys: tuple[str, ...], parts: list[Any], *, skip: frozenset[str]
) -> None:
    for key in keys:
        if key in mapping and key not in skip:
            parts.append(mapping[key])
            mapping[key] = _HOLE
        else:
            parts.append(_NOT_HANDED)


def pack(objects: list[model.KubeObject]) -> Packed:
    """Trimmed objects as one compact block, to be `unpack`ed once the list's transient
    objects are gone (objects made then sit together in memory, not between their holes).

    The parts objects share are handed over as they are, so that unpacking makes only each
    object's own dicts and strings: a shared part made again from the JSON, then swapped for
    the shared one, would leave a hole beside every object kept.
    """
    parts: list[Any] = []
    skeletons: list[dict[str, Any]] = []
    for obj in objects:
        skeleton: dict[str, Any] = dict(obj)
        skip = frozenset() if skeleton.get("kind") == model.POD else _POD_ONLY
        _hand_over(skeleton, _HANDED_PARTS, parts, skip=skip)
        meta = skeleton.get("metadata")
        if isinstance(meta, dict):
            skeleton["metadata"] = meta = dict(meta)
            _hand_over(meta, _HANDED_META, parts, skip=frozenset())
        else:
            parts += [_NOT_HANDED] * len(_HANDED_META)
        skeletons.append(skeleton)
    return Packed(json.dumps(skeletons, separators=(",", ":")).encode(), parts)


def unpack(packed: Packed) -> list[model.KubeObject]:
    """What `pack` packed: the objects as they were, sharing what they shared."""
    out: list[model.KubeObject] = json.loads(packed.data)
    parts = iter(packed.parts)
    for obj in out:
        top: dict[str, Any] = obj  # type: ignore[assignment]
        for key in _HANDED_PARTS:
            part = next(parts)
            if part is not _NOT_HANDED:
                top[key] = part
        meta = obj.get("metadata")
        for key in _HANDED_META:
            part = next(parts)
            if part is not _NOT_HANDED and isinstance(meta, dict):
                meta[key] = part  # type: ignore[literal-required]
    return out


def _our_annotations(annotations: Mapping[str, Any] | None) -> dict[str, str]:
    return {
        key: value
        for key, value in (annotations or {}).items()
        if isinstance(key, str)
        and (key.startswith(OUR_ANNOTATIONS) or key in KEPT_ANNOTATIONS)
        and isinstance(value, str)
    }


def _labels(labels: Mapping[str, Any] | None) -> dict[str, str]:
    return {k: v for k, v in (labels or {}).items() if isinstance(k, str) and isinstance(v, str)}


def _meta(
    *,
    name: object,
    namespace: object,
    uid: object,
    resource_version: object,
    labels: Mapping[str, Any] | None,
    annotations: Mapping[str, Any] | None,
    shared: Shared | None = None,
) -> model.ObjectMeta:
    meta = model.ObjectMeta()
    if isinstance(name, str):
        meta["name"] = name
    if isinstance(namespace, str) and namespace:
        meta["namespace"] = sys.intern(namespace)
    if isinstance(uid, str) and uid:
        meta["uid"] = uid
    if isinstance(resource_version, str) and resource_version:
        meta["resourceVersion"] = resource_version
    kept_labels = _labels(labels)
    if kept_labels:
        meta["labels"] = _share(shared, "labels", kept_labels)
    kept_annotations = _our_annotations(annotations)
    if kept_annotations:
        meta["annotations"] = _share(shared, "annotations", kept_annotations)
    return meta


def _typed_meta(meta: meta_v1.ObjectMeta | None, shared: Shared | None = None) -> model.ObjectMeta:
    if meta is None:
        return model.ObjectMeta()
    return _meta(
        name=meta.name,
        namespace=meta.namespace,
        uid=meta.uid,
        resource_version=meta.resourceVersion,
        labels=meta.labels,
        annotations=meta.annotations,
        shared=shared,
    )


def _raw_meta(raw: Mapping[str, Any], shared: Shared | None = None) -> model.ObjectMeta:
    meta = raw.get("metadata")
    if not isinstance(meta, Mapping):
        return model.ObjectMeta()
    labels = meta.get("labels")
    annotations = meta.get("annotations")
    return _meta(
        name=meta.get("name"),
        namespace=meta.get("namespace"),
        uid=meta.get("uid"),
        resource_version=meta.get("resourceVersion"),
        labels=labels if isinstance(labels, Mapping) else None,
        annotations=annotations if isinstance(annotations, Mapping) else None,
        shared=shared,
    )


def _object(kind: str, meta: model.ObjectMeta) -> model.KubeObject:
    api = model.PEER_GROUP_API if kind == model.PEER_GROUP else model.API_VERSIONS[kind]
    return model.KubeObject(apiVersion=api, kind=kind, metadata=meta)


def trim_pod(pod: core_v1.Pod, *, shared: Shared | None = None) -> model.KubeObject:
    obj = _object(model.POD, _typed_meta(pod.metadata, shared))
    spec: dict[str, Any] = {}
    if pod.spec is not None:
        if pod.spec.nodeName:
            spec["nodeName"] = pod.spec.nodeName
        # Named container ports: a MultiNetworkPolicy may name them (POL-PORTS).
        named = [
            {"name": p.name, "containerPort": p.containerPort, "protocol": p.protocol or "TCP"}
            for c in pod.spec.containers or ()
            for p in c.ports or ()
            if p.name
        ]
        if named:
            spec["containers"] = [{"ports": named}]
    if spec:
        obj["spec"] = _share(shared, "podspec", spec)
    status: dict[str, Any] = {}
    if pod.status is not None:
        if pod.status.phase:
            status["phase"] = pod.status.phase
        # DEV-RESOURCE: the pod's claim names and the ResourceClaims they became (a NAD's
        # resourceName may name either).
        claims = [
            {"name": c.name, "resourceClaimName": c.resourceClaimName}
            for c in pod.status.resourceClaimStatuses or ()
            if c.name and c.resourceClaimName
        ]
        if claims:
            status["resourceClaimStatuses"] = claims
    if status:
        obj["status"] = _share(shared, "status", status)
    return obj


def trim_namespace(
    namespace: core_v1.Namespace, *, shared: Shared | None = None
) -> model.KubeObject:
    return _object(model.NAMESPACE, _typed_meta(namespace.metadata, shared))


def trim_nad(raw: Mapping[str, Any], *, shared: Shared | None = None) -> model.KubeObject:
    obj = _object(model.NAD, _raw_meta(raw, shared))
    spec = raw.get("spec")
    if isinstance(spec, Mapping):
        obj["spec"] = {"config": spec["config"]} if "config" in spec else {}
    return obj


def trim_policy(raw: Mapping[str, Any], *, shared: Shared | None = None) -> model.KubeObject:
    return _with_spec(model.POLICY, raw, shared)


def trim_peer_group(raw: Mapping[str, Any], *, shared: Shared | None = None) -> model.KubeObject:
    """A PolicyPeerGroup: its name, labels and spec (the members are read whole)."""
    return _with_spec(model.PEER_GROUP, raw, shared)


def _with_spec(kind: str, raw: Mapping[str, Any], shared: Shared | None) -> model.KubeObject:
    obj = _object(kind, _raw_meta(raw, shared))
    spec = raw.get("spec")
    if isinstance(spec, Mapping):
        obj["spec"] = dict(spec)
    return obj
