"""Which API pod a CNI call means: the pod of its UID, or a static pod's mirror (RT-UID,
RT-STATIC)."""

from __future__ import annotations

import pytest

from netattach.cluster import model
from netattach.cni import errors
from netattach.pods import pod_identity
from tests import builders

HASH = "c6ece545af030efda204074880a48939"  # a config hash kubelet sent (reference/real-world.md)
UID = "8f0e5f4e-1c7b-4d8e-9a55-0c1f2b3a4d5e"


def pod(uid: str, mirror: str | None = None) -> model.KubeObject:
    annotations = None if mirror is None else {model.MIRROR_ANNOTATION: mirror}
    return builders.pod(name="etcd-n1", namespace="kube-system", uid=uid, annotations=annotations)


@pytest.mark.parametrize(
    ("runtime_uid", "expected"),
    [(HASH, True), (UID, False), (HASH.upper(), False), (HASH[:-1], False), ("", False)],
)
def test_a_config_hash_is_32_lowercase_hex_digits(runtime_uid: str, expected: bool) -> None:
    assert pod_identity.is_config_hash(runtime_uid) is expected


@pytest.mark.req("RT-STATIC")
def test_a_mirror_pod_is_the_static_pod_of_its_hash() -> None:
    mirror = pod(UID, mirror=HASH)
    assert pod_identity.check_pod("[p]", HASH, mirror) is mirror
    assert pod_identity.check_pod("[p]", UID, mirror) is mirror  # by its own UID too


@pytest.mark.req("RT-STATIC")
def test_no_mirror_pod_yet_is_try_again_never_a_refusal() -> None:
    with pytest.raises(pod_identity.MirrorPodMissingError) as raised:
        pod_identity.check_pod("[kube-system/etcd-n1/" + HASH + "]", HASH, None)
    assert raised.value.code == errors.TryAgainLaterError.code == 11
    assert "mirror pod is not in the API yet" in raised.value.msg
    assert raised.value.details == f"no pod with kubernetes.io/config.mirror={HASH}"
    assert raised.value.event_reason == "MirrorPodNotFound"


@pytest.mark.req("RT-STATIC")
@pytest.mark.parametrize("mirror", [None, "0" * 32])
def test_an_api_pod_that_is_not_this_hashs_mirror_is_try_again(mirror: str | None) -> None:
    with pytest.raises(pod_identity.MirrorPodMissingError) as raised:
        pod_identity.check_pod("[p]", HASH, pod(UID, mirror=mirror))
    assert f"(UID {UID})" in raised.value.msg
    assert ("not a mirror pod" if mirror is None else f"config hash {mirror}") in raised.value.msg


@pytest.mark.req("RT-UID")
def test_another_uid_is_a_recreated_pod_with_its_own_reason() -> None:
    with pytest.raises(pod_identity.PodUIDMismatchError) as raised:
        pod_identity.check_pod("[ns/web/old]", "old", pod(UID))
    assert raised.value.code == errors.UnknownContainerError.code == 3
    assert (
        raised.value.msg == f"[ns/web/old] the runtime asks for pod UID old, the pod has UID {UID}"
    )
    assert raised.value.event_reason == "PodUIDMismatch"
    assert errors.UnknownContainerError("x").event_reason == "PodNotFound"


def test_a_missing_pod_of_an_api_uid_is_not_found() -> None:
    with pytest.raises(errors.UnknownContainerError, match=r"^\[p\] pod not found$"):
        pod_identity.check_pod("[p]", UID, None)
    assert pod_identity.check_pod("[p]", "", pod(UID))["metadata"]["uid"] == UID
