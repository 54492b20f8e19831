"""Watch lines as a real API server sends them, read type first (KUBE-BOOKMARK)."""

from __future__ import annotations

import json

import lightkube
import pytest
from lightkube.resources import core_v1

from netattach.cluster import kube_client, watch_stream
from tests import builders

# Recorded from kube-apiserver 1.28.7 (reference/real-world.md): not a valid Pod.
REAL_BOOKMARK = (
    '{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":'
    '{"resourceVersion":"5161","creationTimestamp":null},"spec":{"containers":null},"status":{}}}'
)


def line(event_type: str, obj: object) -> str:
    return json.dumps({"type": event_type, "object": obj})


def pod(name: str, **spec: object) -> dict[str, object]:
    return dict(
        builders.pod(
            name=name,
            namespace="ns",
            uid=None,
            resource_version="77",
            spec={"containers": [{"name": "c", "image": "i"}], **spec},
        )
    )


@pytest.mark.req("KUBE-BOOKMARK")
def test_a_real_bookmark_is_read_for_its_version_only() -> None:
    event = watch_stream.parse_line(REAL_BOOKMARK, core_v1.Pod, "Pod")
    assert event == watch_stream.Bookmark(resource_version="5161")


@pytest.mark.req("KUBE-BOOKMARK")
def test_an_error_event_is_raised_as_the_api_error_it_carries() -> None:
    status = builders.failure_status(410, "Expired", "too old resource version: 5 (90)")
    with pytest.raises(lightkube.ApiError) as raised:
        watch_stream.parse_line(line("ERROR", status), core_v1.Pod, "Pod")
    assert raised.value.status.code == 410
    assert raised.value.status.message == "too old resource version: 5 (90)"


@pytest.mark.req("KUBE-BOOKMARK")
@pytest.mark.parametrize("event_type", ["ADDED", "MODIFIED", "DELETED"])
def test_a_resource_is_decoded_into_the_typed_model(event_type: str) -> None:
    event = watch_stream.parse_line(line(event_type, pod("web")).encode(), core_v1.Pod, "Pod")
    assert isinstance(event, watch_stream.Change)
    assert event.type == event_type
    assert isinstance(event.obj, core_v1.Pod)
    assert event.obj.metadata is not None
    assert event.obj.metadata.name == "web"


@pytest.mark.req("KUBE-BOOKMARK")
def test_an_object_the_model_cannot_decode_is_named_not_raised() -> None:
    event = watch_stream.parse_line(
        line("MODIFIED", pod("odd", priority="high")), core_v1.Pod, "Pod"
    )
    assert isinstance(event, watch_stream.Undecodable)
    assert (event.type, event.kind, event.namespace, event.name, event.resource_version) == (
        "MODIFIED",
        "Pod",
        "ns",
        "odd",
        "77",
    )
    assert "$.spec.priority" in event.why
    assert event.describe() == "Pod ns/odd"


@pytest.mark.parametrize("text", ["not json", '{"object": {}}', "[1, 2]"])
def test_a_line_that_is_no_watch_event_is_a_broken_stream(text: str) -> None:
    with pytest.raises(ValueError, match="not a watch event"):
        watch_stream.parse_line(text, core_v1.Pod, "Pod")


@pytest.mark.req("KUBE-BOOKMARK")
def test_a_list_page_decodes_each_item_on_its_own() -> None:
    body = json.dumps(
        {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "900", "continue": "token"},
            "items": [pod("a"), pod("odd", priority="high"), pod("b")],
        }
    ).encode()
    version, cont, decoded = watch_stream.parse_list(body, core_v1.Pod, "Pod")
    assert (version, cont) == ("900", "token")
    items = list(decoded)
    assert [type(item).__name__ for item in items] == ["Change", "Undecodable", "Change"]
    odd = items[1]
    assert isinstance(odd, watch_stream.Undecodable)
    assert odd.describe() == "Pod ns/odd"


def test_the_last_page_has_no_continue_and_a_custom_resource_is_a_mapping() -> None:
    nad = {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": "blue", "namespace": "ns"},
        "spec": {"config": "{}"},
    }
    body = json.dumps({"metadata": {"resourceVersion": "5"}, "items": [nad]}).encode()
    version, cont, items = watch_stream.parse_list(
        body, kube_client.NetworkAttachmentDefinition, "NAD"
    )
    assert (version, cont) == ("5", "")
    (item,) = items
    assert isinstance(item, watch_stream.Change)
    assert item.obj["spec"] == {"config": "{}"}


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"items": {}}'])
def test_a_page_that_is_no_list_is_an_error(body: bytes) -> None:
    with pytest.raises(ValueError, match="a list of Pod is not"):
        watch_stream.parse_list(body, core_v1.Pod, "Pod")
