"""The resources the fake serves, their URLs, field labels, defaults and built-in validation."""

from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any

from tests.kube.api import Obj
from tests.kube.schema import Cause
from tests.kube.selectors import label_value_problem, qualified_name_problem

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
DNS_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)

COMMON_VERBS = ("create", "delete", "get", "list", "patch", "update", "watch")

META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)
"""ObjectMeta's fields; the server drops any other key under `metadata`."""


@dataclasses.dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    custom: bool = False
    """Served from a CustomResourceDefinition (schema pruning; no strategic merge patch)."""
    create_on_update: bool = False
    """PUT of a missing object creates it (true for Events, false for the others)."""
    subresources: tuple[str, ...] = ()
    field_labels: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    @property
    def qualified(self) -> str:
        """`pods`, `network-attachment-definitions.k8s.cni.cncf.io`: as in error messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def key(self) -> str:
        return self.qualified

    def collection_path(self, namespace: str | None = None) -> str:
        if self.namespaced and namespace is not None:
            return f"{self.prefix}/namespaces/{namespace}/{self.plural}"
        return f"{self.prefix}/{self.plural}"

    def object_path(self, name: str, namespace: str | None = None) -> str:
        return f"{self.collection_path(namespace)}/{name}"

    def details(self, name: str, uid: str | None = None) -> Obj:
        details: Obj = {"name": name}
        if self.group:
            details["group"] = self.group
        details["kind"] = self.plural
        if uid:
            details["uid"] = uid
        return details

    def discovery(self) -> list[Obj]:
        entry: Obj = {
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(COMMON_VERBS),
        }
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        if self.categories:
            entry["categories"] = list(self.categories)
        entries = [entry]
        for sub in self.subresources:
            entries.append(
                {
                    "name": f"{self.plural}/{sub}",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "kind": self.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        return entries


NAMESPACES = Resource(
    "",
    "v1",
    "namespaces",
    "namespace",
    "Namespace",
    namespaced=False,
    short_names=("ns",),
    subresources=("status",),
    field_labels=("metadata.name", "status.phase"),
)
PODS = Resource(
    "",
    "v1",
    "pods",
    "pod",
    "Pod",
    namespaced=True,
    short_names=("po",),
    subresources=("status",),
    categories=("all",),
    field_labels=(
        "metadata.name",
        "metadata.namespace",
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
)
EVENTS = Resource(
    "",
    "v1",
    "events",
    "event",
    "Event",
    namespaced=True,
    short_names=("ev",),
    create_on_update=True,
    field_labels=(
        "metadata.name",
        "metadata.namespace",
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
)
NADS = Resource(
    "k8s.cni.cncf.io",
    "v1",
    "network-attachment-definitions",
    "network-attachment-definition",
    "NetworkAttachmentDefinition",
    namespaced=True,
    short_names=("net-attach-def",),
    custom=True,
    field_labels=("metadata.name", "metadata.namespace"),
)
POLICIES = Resource(
    "k8s.cni.cncf.io",
    "v1beta1",
    "multi-networkpolicies",
    "multi-networkpolicy",
    "MultiNetworkPolicy",
    namespaced=True,
    short_names=("multi-policy",),
    custom=True,
    field_labels=("metadata.name", "metadata.namespace"),
)
RESOURCES: tuple[Resource, ...] = (NAMESPACES, PODS, EVENTS, NADS, POLICIES)


# The zero value of each built-in kind's spec and status as Go's JSON encoder writes it: what a
# real server's BOOKMARK carries. A Pod's is not a valid Pod (`spec.containers: null`).
_SKELETON_BODIES: dict[str, Obj] = {
    "Pod": {"spec": {"containers": None}, "status": {}},
    "Namespace": {"spec": {}, "status": {}},
}


def bookmark_object(res: Resource, resource_version: int, annotations: Obj | None = None) -> Obj:
    """The object of a BOOKMARK event as kube-apiserver 1.28 sends it: an empty object of the
    kind (built-in kinds with `creationTimestamp: null` and their spec/status zero values;
    custom resources are unstructured: metadata only) carrying the resourceVersion."""
    meta: Obj = {"resourceVersion": str(resource_version)}
    if not res.custom:
        meta["creationTimestamp"] = None
    if annotations:
        meta["annotations"] = dict(annotations)
    body: Obj = {"kind": res.kind, "apiVersion": res.api_version, "metadata": meta}
    if not res.custom:
        body.update(copy.deepcopy(_SKELETON_BODIES.get(res.kind, {})))
    return body


def resource_for(kind: str) -> Resource:
    """The resource named by a kind ("Pod"), plural ("pods"), singular or short name."""
    for res in RESOURCES:
        names = (res.kind.lower(), res.plural, res.singular, *res.short_names)
        if kind.lower() in names:
            return res
    raise KeyError(f"the fake serves no resource {kind!r}")


def resource_of(obj: Obj) -> Resource:
    """The resource of an object from its apiVersion and kind."""
    for res in RESOURCES:
        if obj.get("kind") == res.kind and obj.get("apiVersion") in (res.api_version, None):
            return res
    raise KeyError(f"the fake serves no {obj.get('apiVersion')}/{obj.get('kind')}")


def field_value(obj: Obj, field: str) -> str:
    """A field label's value as the server compares it: missing is "", booleans are words."""
    if field == "source":
        field = "source.component"
    node: Any = obj
    for part in field.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


# -- names and metadata ------------------------------------------------------------------------


def name_problem(res: Resource, name: str) -> str | None:
    if res is NAMESPACES:
        if len(name) > 63:
            return "must be no more than 63 characters"
        return None if _DNS_LABEL.match(name) else DNS_LABEL_MESSAGE
    if len(name) > 253:
        return "must be no more than 253 characters"
    return None if _DNS_SUBDOMAIN.match(name) else DNS_SUBDOMAIN_MESSAGE


def _invalid(field: str, value: Any, why: str) -> Cause:
    shown = value if isinstance(value, str) else repr(value)
    return Cause("FieldValueInvalid", field, f'Invalid value: "{shown}": {why}')


def _required(field: str, why: str = "") -> Cause:
    return Cause("FieldValueRequired", field, f"Required value{': ' + why if why else ''}")


def validate_metadata(res: Resource, meta: Obj) -> list[Cause]:
    causes: list[Cause] = []
    name = meta.get("name") or ""
    if not name:
        causes.append(_required("metadata.name", "name or generateName is required"))
    else:
        problem = name_problem(res, name)
        if problem is not None:
            causes.append(_invalid("metadata.name", name, problem))
    for key, value in (meta.get("labels") or {}).items():
        problem = qualified_name_problem(key)
        if problem is not None:
            causes.append(_invalid("metadata.labels", key, problem))
        problem = label_value_problem(value)
        if problem is not None:
            causes.append(_invalid("metadata.labels", value, problem))
    total = 0
    for key, value in (meta.get("annotations") or {}).items():
        problem = qualified_name_problem(key.lower())
        if problem is not None:
            causes.append(_invalid("metadata.annotations", key, problem))
        total += len(key) + len(value)
    if total > 256 * 1024:
        causes.append(
            Cause(
                "FieldValueTooLong",
                "metadata.annotations",
                "Too long: must have at most 262144 bytes",
            )
        )
    return causes


def metadata_type_problem(meta: Any) -> str | None:
    """A decoding error of `metadata` (the server answers 400 BadRequest), or None."""
    if not isinstance(meta, dict):
        return "json: cannot unmarshal metadata: expected an object"
    for field in ("labels", "annotations"):
        value = meta.get(field)
        if value is None:
            continue
        if not isinstance(value, dict):
            return (
                "json: cannot unmarshal into Go struct field "
                f"ObjectMeta.metadata.{field} of type map[string]string"
            )
        for key, item in value.items():
            if not isinstance(item, str):
                kind = "number" if isinstance(item, int | float) else type(item).__name__
                return (
                    f"json: cannot unmarshal {kind} into Go struct field "
                    f"ObjectMeta.metadata.{field} of type string (key {key!r})"
                )
    finalizers = meta.get("finalizers")
    if finalizers is not None and (
        not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers)
    ):
        return (
            "json: cannot unmarshal into Go struct field ObjectMeta.metadata.finalizers "
            "of type []string"
        )
    return None


# -- pods --------------------------------------------------------------------------------------


def _image_pull_policy(image: str) -> str:
    last = image.rsplit("/", 1)[-1]
    if "@" in last:
        return "IfNotPresent"
    tag = last.split(":", 1)[1] if ":" in last else "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def default_pod(obj: Obj) -> None:
    """Fill in the defaults the API server gives a pod (a subset: see README.md)."""
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    for field in ("containers", "initContainers"):
        for container in spec.get(field) or []:
            if not isinstance(container, dict):
                continue
            container.setdefault("resources", {})
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
            if isinstance(container.get("image"), str):
                container.setdefault("imagePullPolicy", _image_pull_policy(container["image"]))


def pod_qos(spec: Obj) -> str:
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    resources = [c.get("resources") or {} for c in containers if isinstance(c, dict)]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    for res in resources:
        limits = res.get("limits") or {}
        requests = res.get("requests") or {}
        if not all(k in limits for k in ("cpu", "memory")):
            return "Burstable"
        if any(requests.get(k, limits[k]) != limits[k] for k in ("cpu", "memory")):
            return "Burstable"
    return "Guaranteed"


def validate_pod(obj: Obj) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [_required("spec")]
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        return [_required("spec.containers")]
    causes: list[Cause] = []
    seen: set[str] = set()
    for index, container in enumerate(containers):
        where = f"spec.containers[{index}]"
        if not isinstance(container, dict):
            causes.append(_invalid(where, container, "must be an object"))
            continue
        name = container.get("name")
        if not name:
            causes.append(_required(f"{where}.name"))
        elif not isinstance(name, str) or not _DNS_LABEL.match(name):
            causes.append(_invalid(f"{where}.name", name, DNS_LABEL_MESSAGE))
        elif name in seen:
            causes.append(
                Cause("FieldValueDuplicate", f"{where}.name", f'Duplicate value: "{name}"')
            )
        else:
            seen.add(name)
        if not container.get("image"):
            causes.append(_required(f"{where}.image"))
    return causes


_POD_MUTABLE = (
    "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
    "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set "
    "to 1 if it was previously negative)"
)


def _pod_spec_fixed_part(spec: Obj) -> Obj:
    fixed = {
        k: v
        for k, v in spec.items()
        if k not in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds")
    }
    for field in ("containers", "initContainers"):
        if isinstance(fixed.get(field), list):
            fixed[field] = [
                {k: v for k, v in c.items() if k != "image"} if isinstance(c, dict) else c
                for c in fixed[field]
            ]
    return fixed


def pod_update_problem(old: Obj, new: Obj) -> Cause | None:
    """A pod update through the API may change only a few spec fields (images, tolerations...)."""
    old_spec = old.get("spec") or {}
    new_spec = new.get("spec") or {}
    if _pod_spec_fixed_part(old_spec) != _pod_spec_fixed_part(new_spec):
        return Cause("FieldValueForbidden", "spec", _POD_MUTABLE)
    return None


# -- namespaces and events -------------------------------------------------------------------


def default_namespace(obj: Obj, *, reset_status: bool) -> None:
    meta = obj["metadata"]
    labels = meta.get("labels") or {}
    labels["kubernetes.io/metadata.name"] = meta.get("name", "")
    meta["labels"] = labels
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        spec = {}
    spec.setdefault("finalizers", ["kubernetes"])
    obj["spec"] = spec
    if reset_status or not isinstance(obj.get("status"), dict):
        obj["status"] = {"phase": "Active"}


def validate_event(obj: Obj) -> list[Cause]:
    involved = obj.get("involvedObject")
    if involved is None:
        return []
    if not isinstance(involved, dict):
        return [_invalid("involvedObject", involved, "must be an object")]
    namespace = obj["metadata"].get("namespace", "")
    other = involved.get("namespace") or ""
    if other and other != namespace:
        return [_invalid("involvedObject.namespace", other, "does not match event.namespace")]
    return []
