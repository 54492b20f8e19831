"""The parts of Kubernetes objects netattach reads, as the API sends them (raw payloads).

TypedDicts, not models: objects arrive as JSON/YAML and are read where needed, so unknown fields
cost nothing and survive untouched.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Final, TypedDict

NAD_GROUP: Final = "k8s.cni.cncf.io"
NETWORKS_ANNOTATION: Final = "k8s.v1.cni.cncf.io/networks"
STATUS_ANNOTATION: Final = "k8s.v1.cni.cncf.io/network-status"
# On a static pod's mirror pod: kubelet's config hash, which kubelet sends as K8S_POD_UID.
MIRROR_ANNOTATION: Final = "kubernetes.io/config.mirror"
# On a NAD: the device-plugin resource (or DRA claim) whose devices its attachments get
# (DEV-RESOURCE, as Multus reads it).
RESOURCE_ANNOTATION: Final = "k8s.v1.cni.cncf.io/resourceName"
# On a pod: the NAD that replaces the cluster default network for it (DEV-DEFAULT, Multus's).
DEFAULT_NETWORK_ANNOTATION: Final = "v1.multus-cni.io/default-network"

POD: Final = "Pod"
NAMESPACE: Final = "Namespace"
NAD: Final = "NetworkAttachmentDefinition"
POLICY: Final = "MultiNetworkPolicy"

# apiVersion each kind must carry.
API_VERSIONS: Final = {
    POD: "v1",
    NAMESPACE: "v1",
    NAD: f"{NAD_GROUP}/v1",
    POLICY: f"{NAD_GROUP}/v1beta1",
}

# The policy controller's peer groups (POL-SPAN): read by the Kubernetes feed of a node whose
# policy peers come from the controller; no manifest of the directory feed holds one.
PEER_GROUP: Final = "PolicyPeerGroup"
PEER_GROUP_API: Final = "policy.netattach.io/v1alpha1"
PEER_GROUP_LABEL: Final = "policy.netattach.io/group"  # the group's id, on each of its shards
STORED_KINDS: Final = (*API_VERSIONS, PEER_GROUP)

if TYPE_CHECKING:

    class ObjectMeta(TypedDict, total=False):
        name: str
        namespace: str
        uid: str
        labels: dict[str, str]
        annotations: dict[str, str]
        resourceVersion: str

    class KubeObject(TypedDict, total=False):
        apiVersion: str
        kind: str
        metadata: ObjectMeta
        spec: dict[str, Any]
        status: dict[str, Any]

else:  # what calling a TypedDict makes: a dict (and no `typing` on the thin path)
    ObjectMeta = KubeObject = dict


def meta(obj: KubeObject) -> ObjectMeta:
    return obj.get("metadata") or ObjectMeta()


def name_of(obj: KubeObject) -> str:
    return meta(obj).get("name", "")


def namespace_of(obj: KubeObject) -> str:
    return meta(obj).get("namespace", "")


def uid_of(obj: KubeObject) -> str:
    return meta(obj).get("uid", "")


def annotation(obj: KubeObject, key: str) -> str | None:
    return (meta(obj).get("annotations") or {}).get(key)


def labels(obj: KubeObject) -> dict[str, str]:
    return dict(meta(obj).get("labels") or {})
