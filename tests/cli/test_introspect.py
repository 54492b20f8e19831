"""The daemon's pod report (`daemon/introspect.py`) from pod records on disk and the policy state
the daemon's policy sync gives, as `GET /v1/pods` answers it; and its wire form read back."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from netattach.daemon import introspect
from netattach.pods import records
from tests import builders

RESULT: dict[str, Any] = {
    "cniVersion": "1.0.0",
    "interfaces": [{"name": "net1", "mac": "0a:58:0a:51:00:05", "sandbox": "/run/netns/x"}],
    "ips": [{"address": "10.81.0.5/24", "interface": 0}],
}


def attachment(
    ifname: str, network: str, *, result: dict[str, object] | None
) -> records.AttachmentRecord:
    config = {
        "cniVersion": "1.0.0",
        "name": network,
        "plugins": [{"type": "bridge", "ipam": {"type": "host-local", "subnet": "10.81.0.0/24"}}],
    }
    return records.AttachmentRecord(
        status_name=network,
        ifname=ifname,
        is_default=ifname == "eth0",
        config=config,
        capability_args={},
        result=result,
    )


def save(state: Path, container_id: str, *atts: records.AttachmentRecord) -> None:
    records.PodRecords(state).save(
        builders.pod_record(container_id, *atts, netns="/run/netns/x", uid="uid-web", complete=True)
    )


def reply(
    state: Path, policy: Mapping[str, Mapping[str, object]], **query: str
) -> dict[str, object]:
    return asyncio.run(introspect.pods_reply(records.PodRecords(state), policy.get, query))


def test_policy_state_marks_the_governed_interfaces_and_an_error_is_a_problem(
    tmp_path: Path,
) -> None:
    eth0: dict[str, Any] = {**RESULT, "interfaces": [{"name": "eth0", "sandbox": "/run/netns/x"}]}
    save(
        tmp_path,
        "c1",
        attachment("eth0", "cluster-default", result=eth0),
        attachment("net1", "blue/net-a", result=RESULT),
    )
    state = {
        "c1": {
            "applied": False,
            "interfaces": ["net1"],
            "policies": ["blue/deny"],
            "error": "nft: Could not process rule",
        }
    }

    (pod,) = introspect.parse_reply(reply(tmp_path, state))

    assert [(a.interface, a.policies, a.policy_applied) for a in pod.attachments] == [
        ("eth0", (), None),
        ("net1", ("blue/deny",), False),
    ]
    assert pod.attachments[1].ips == ("10.81.0.5/24",)
    assert pod.attachments[1].mac == "0a:58:0a:51:00:05"
    assert pod.problems == ("policy not enforced: nft: Could not process rule",)


def test_a_result_without_the_address_its_ipam_gives_is_a_problem(tmp_path: Path) -> None:
    save(tmp_path, "c1", attachment("net1", "blue/net-a", result={"cniVersion": "1.0.0"}))

    (pod,) = introspect.parse_reply(reply(tmp_path, {}))

    assert pod.problems == (
        "interface 'net1' of network 'blue/net-a' has no IP address, but its network assigns "
        "addresses (IPAM or requested ips)",
    )


def test_the_query_filters_by_namespace_and_name(tmp_path: Path) -> None:
    save(tmp_path, "c1", attachment("net1", "blue/net-a", result=RESULT))

    assert len(reply(tmp_path, {}, namespace="blue", name="web")["pods"]) == 1  # type: ignore[arg-type]
    assert reply(tmp_path, {}, namespace="red")["pods"] == []
    with pytest.raises(ValueError, match="unknown query parameter 'uid'"):
        reply(tmp_path, {}, uid="x")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], "reply: not an object, got []"),
        ({"kind": "x", "pods": []}, "reply: kind must be 'netattachPodReport', got 'x'"),
        (
            {"kind": "netattachPodReport", "pods": [{"name": 3}]},
            "reply.pods[0].name: not a string, got 3",
        ),
        (
            {"kind": "netattachPodReport", "pods": [{"attachments": [{"default": "yes"}]}]},
            "reply.pods[0].attachments[0].default: not a boolean, got 'yes'",
        ),
    ],
)
def test_a_reply_of_another_shape_is_refused_naming_the_field(raw: object, message: str) -> None:
    with pytest.raises(introspect.ReportFormatError) as caught:
        introspect.parse_reply(raw)
    assert str(caught.value) == message
