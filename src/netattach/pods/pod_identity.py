"""Which API pod a CNI call is about: its UID, or a static pod's mirror (RT-UID, RT-STATIC).

kubelet names the pod in CNI_ARGS (`K8S_POD_NAMESPACE`, `K8S_POD_NAME`, `K8S_POD_UID`):

    an API pod      K8S_POD_UID is the pod's metadata.uid. Another UID under that name is a
                    deleted-and-recreated pod: another pod, never attached in its place.
    a static pod    (a manifest file on the node) K8S_POD_UID is kubelet's config hash, 32 hex
                    digits. The API holds a *mirror pod* of it, with its own UID, that carries
                    the hash in `kubernetes.io/config.mirror`; kubelet creates it
                    asynchronously, so it may not exist yet at the first ADD, and it replaces a
                    mirror of an older hash. Either is "try again" (11): kubelet retries the
                    sandbox, where a refusal would never let the pod start.

Status and Events of a static pod go to its mirror pod: the orchestrator takes the UID it
writes with from the API pod this module matched, never from K8S_POD_UID.
"""

from __future__ import annotations

import re

from netattach.cluster import model
from netattach.cni import errors

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

# Patterns as text: `re` compiles each on first use and caches it, so a start of the thin
# plugin compiles only those its call needs.
# kubelet's config hash (pkg/kubelet/config: an md5 in hex) where an API pod has a UUID.
_CONFIG_HASH: Final = r"^[0-9a-f]{32}$"


class PodUIDMismatchError(errors.UnknownContainerError):
    """The pod of that name has another UID: it was deleted and created again (code 3)."""

    event_reason = "PodUIDMismatch"


class MirrorPodMissingError(errors.TryAgainLaterError):
    """A static pod whose mirror pod is not in the API (yet): try again (code 11)."""

    event_reason = "MirrorPodNotFound"


def is_config_hash(runtime_uid: str) -> bool:
    """Whether kubelet's K8S_POD_UID is a static pod's config hash, not an API pod's UID."""
    return bool(re.match(_CONFIG_HASH, runtime_uid))


def is_same_pod(runtime_uid: str, pod: model.KubeObject) -> bool:
    """Whether `pod` (from the API) is the pod the runtime means by `runtime_uid`."""
    uid = model.uid_of(pod)
    if not runtime_uid or not uid or uid == runtime_uid:
        return True
    return model.annotation(pod, model.MIRROR_ANNOTATION) == runtime_uid


def check_pod(prefix: str, runtime_uid: str, pod: model.KubeObject | None) -> model.KubeObject:
    """The API pod the runtime means, or the error that says why there is none.

    `prefix` is the `[ns/pod/uid]` of the call, put in front of every message.
    """
    static = is_config_hash(runtime_uid)
    if pod is None:
        if static:
            raise MirrorPodMissingError(
                f"{prefix} static pod: its mirror pod is not in the API yet (kubelet creates it "
                "shortly); try again",
                f"no pod with kubernetes.io/config.mirror={runtime_uid}",
            )
        raise errors.UnknownContainerError(f"{prefix} pod not found")
    if is_same_pod(runtime_uid, pod):
        return pod
    uid = model.uid_of(pod)
    if static:
        mirror = model.annotation(pod, model.MIRROR_ANNOTATION)
        what = f"the mirror pod of config hash {mirror}" if mirror else "not a mirror pod"
        raise MirrorPodMissingError(
            f"{prefix} static pod: the API pod of that name (UID {uid}) is {what}, not of "
            f"{runtime_uid}; kubelet replaces it shortly; try again"
        )
    raise PodUIDMismatchError(
        f"{prefix} the runtime asks for pod UID {runtime_uid}, the pod has UID {uid}"
    )
