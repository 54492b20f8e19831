"""Tests of netattach.pods.dispatch (one CNI call's edges) and the orchestrator's pure helper
`pod_ref`: what is read from stdin and CNI_ARGS, and what the runtime reads back.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from netattach import wire
from netattach.cni import env, errors, spec
from netattach.pods import dispatch, refs

# ---------------------------------------------------------------------------------------------
# parse_netconf: untrusted stdin becomes a dict or a DecodingFailureError (6), nothing else


def test_a_json_object_on_stdin_is_the_netconf() -> None:
    raw = {"cniVersion": "1.0.0", "name": "net", "type": "netattach", "settings": {"a": [1]}}
    assert dispatch.parse_netconf(json.dumps(raw).encode()) == raw


@pytest.mark.parametrize(
    ("stdin", "reason"),
    [
        (b"{", "not JSON"),
        (b"cniVersion: 1.0.0", "not JSON"),
        (b"\xff\xfe\xfd", "not JSON"),
        (b"[" * 100_000, "not JSON"),
        (b'{"a":' * 100_000, "not JSON"),
        (b'{"a":' + b"1" * 5000 + b"}", "not JSON"),
        (b"[]", "not a JSON object"),
        (b'"text"', "not a JSON object"),
        (b"null", "not a JSON object"),
        (b"42", "not a JSON object"),
    ],
    ids=[
        "truncated",
        "yaml",
        "binary",
        "deep-list",
        "deep-object",
        "huge-int",
        "list",
        "string",
        "null",
        "int",
    ],
)
def test_stdin_that_is_not_a_json_object_is_a_decoding_failure(stdin: bytes, reason: str) -> None:
    # A RecursionError from deep nesting would become 999 with a traceback: it must not escape.
    with pytest.raises(errors.DecodingFailureError) as caught:
        dispatch.parse_netconf(stdin)
    assert type(caught.value) is errors.DecodingFailureError
    assert caught.value.code == 6
    assert caught.value.msg.endswith(reason)


def test_stdin_over_the_size_limit_is_refused_before_parsing() -> None:
    stdin = b" " * (wire.MAX_REQUEST_BYTES + 1)
    with pytest.raises(errors.DecodingFailureError) as caught:
        dispatch.parse_netconf(stdin)
    assert caught.value.code == 6
    assert str(wire.MAX_REQUEST_BYTES + 1) in caught.value.msg
    assert str(wire.MAX_REQUEST_BYTES) in caught.value.msg.split("more than")[1]


def test_the_bound_is_one_mebibyte_inclusive() -> None:
    assert wire.MAX_REQUEST_BYTES == 1024 * 1024
    assert not wire.too_large(wire.MAX_REQUEST_BYTES)
    assert wire.too_large(wire.MAX_REQUEST_BYTES + 1)


def test_stdin_of_exactly_the_size_limit_is_parsed() -> None:
    head, tail = b'{"pad":"', b'"}'
    stdin = head + b"x" * (wire.MAX_REQUEST_BYTES - len(head) - len(tail)) + tail
    assert len(stdin) == wire.MAX_REQUEST_BYTES
    assert dispatch.parse_netconf(stdin) == {"pad": "x" * (len(stdin) - len(head) - len(tail))}


# ---------------------------------------------------------------------------------------------
# valid_container_ids: CNI 1.1 GC's cni.dev/valid-attachments


def test_valid_attachments_give_their_container_ids() -> None:
    netconf = {
        spec.VALID_ATTACHMENTS_KEY: [
            {"containerID": "aaa", "ifname": "eth0"},
            {"containerID": "bbb", "ifname": "eth0"},
            {"containerID": "aaa", "ifname": "net1"},
        ]
    }
    assert dispatch.valid_container_ids(netconf) == {"aaa", "bbb"}


def test_no_valid_attachments_is_no_valid_container() -> None:
    assert dispatch.valid_container_ids({}) == set()
    assert dispatch.valid_container_ids({spec.VALID_ATTACHMENTS_KEY: []}) == set()


@pytest.mark.parametrize(
    "valid",
    [
        {"containerID": "aaa"},
        "aaa",
        None,
        ["aaa"],
        [{"ifname": "eth0"}],
        [{"containerID": 5}],
        [{"containerID": "aaa"}, None],
    ],
    ids=["object", "string", "null", "string-item", "no-id", "int-id", "null-item"],
)
def test_malformed_valid_attachments_are_an_invalid_config(valid: Any) -> None:
    with pytest.raises(errors.InvalidNetworkConfigError) as caught:
        dispatch.valid_container_ids({spec.VALID_ATTACHMENTS_KEY: valid})
    assert caught.value.code == 7
    assert spec.VALID_ATTACHMENTS_KEY in caught.value.msg


# ---------------------------------------------------------------------------------------------
# replies: what the runtime reads on stdout


@pytest.mark.parametrize("cni_version", ["0.4.0", "1.0.0", "1.1.0"])
def test_an_error_reply_is_a_cni_error_object_with_exit_code_1(cni_version: str) -> None:
    reply = dispatch.error_reply(
        errors.AttachmentNotFoundError("NetworkAttachmentDefinition ns/a not found", "why"),
        cni_version,
    )
    assert reply.exit_code == 1
    assert json.loads(reply.stdout) == {
        "cniVersion": cni_version,
        "code": 101,
        "msg": "NetworkAttachmentDefinition ns/a not found",
        "details": "why",
    }


def test_an_error_reply_keeps_a_delegates_own_code() -> None:
    reply = dispatch.error_reply(errors.PluginError(42, "macvlan: no master"), "1.0.0")
    assert json.loads(reply.stdout) == {
        "cniVersion": "1.0.0",
        "code": 42,
        "msg": "macvlan: no master",
    }


def test_an_unexpected_exception_is_code_999_with_the_traceback_in_the_log_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def fail() -> None:
        raise ValueError("boom")

    with caplog.at_level(logging.ERROR, logger="netattach.dispatch"):
        try:
            fail()
        except ValueError as exc:
            reply = dispatch.unexpected_reply(exc, "1.0.0")

    assert reply.exit_code == 1
    assert json.loads(reply.stdout) == {
        "cniVersion": "1.0.0",
        "code": 999,
        "msg": "internal error in netattach",
        "details": "ValueError: boom",
    }
    assert b"Traceback" not in reply.stdout
    assert b"fail" not in reply.stdout
    [logged] = caplog.records
    assert logged.exc_info is not None
    assert logged.exc_info[1] is not None
    assert str(logged.exc_info[1]) == "boom"
    assert "in fail" in caplog.text  # the traceback


def test_unexpected_reply_logs_the_traceback_of_the_exception_it_is_given(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def fail() -> None:
        raise ValueError("boom")

    caught: ValueError | None = None
    try:
        fail()
    except ValueError as exc:
        caught = exc
    assert caught is not None
    with caplog.at_level(logging.ERROR, logger="netattach.dispatch"):
        dispatch.unexpected_reply(caught, "1.0.0")
    [logged] = caplog.records
    assert logged.exc_info is not None
    assert logged.exc_info[1] is caught


def test_version_reply_lists_every_supported_version() -> None:
    assert json.loads(wire.version_reply("1.0.0")) == {
        "cniVersion": "1.0.0",
        "supportedVersions": list(spec.VERSIONS),
    }


# ---------------------------------------------------------------------------------------------
# refs.pod_ref: KUBE-ARGS, the pod-identity half


def _call(**args: str) -> env.Environment:
    return env.Environment(
        command=spec.ADD,
        container_id="c0ffee",
        netns="/var/run/netns/x",
        ifname="eth0",
        args=tuple(args.items()),
    )


@pytest.mark.req("KUBE-ARGS")
def test_pod_identity_comes_from_cni_args() -> None:
    """KUBE-ARGS, the pod-identity half: K8S_POD_NAMESPACE / K8S_POD_NAME / K8S_POD_UID."""
    pairs = env.parse_cni_args(
        "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=pod-a;"
        "K8S_POD_INFRA_CONTAINER_ID=c0ffee;K8S_POD_UID=1234-abcd"
    )
    call = env.Environment(command=spec.ADD, container_id="c0ffee", args=pairs)
    assert refs.pod_ref(call) == refs.PodRef(namespace="ns1", name="pod-a", uid="1234-abcd")


@pytest.mark.req("KUBE-ARGS")
def test_pod_identity_without_a_uid_has_an_empty_uid() -> None:
    ref = refs.pod_ref(_call(K8S_POD_NAMESPACE="ns1", K8S_POD_NAME="pod-a"))
    assert ref == refs.PodRef(namespace="ns1", name="pod-a", uid="")


@pytest.mark.req("KUBE-ARGS")
@pytest.mark.parametrize(
    "args",
    [
        {},
        {"K8S_POD_NAME": "pod-a", "K8S_POD_UID": "u"},
        {"K8S_POD_NAMESPACE": "ns1", "K8S_POD_UID": "u"},
        {"K8S_POD_NAMESPACE": "", "K8S_POD_NAME": "pod-a"},
        {"K8S_POD_NAMESPACE": "ns1", "K8S_POD_NAME": ""},
    ],
    ids=["none", "no-namespace", "no-name", "empty-namespace", "empty-name"],
)
def test_no_pod_identity_without_namespace_and_name(args: dict[str, str]) -> None:
    assert refs.pod_ref(_call(**args)) is None


def test_pod_ref_prefix_names_pod_uid_and_network() -> None:
    ref = refs.PodRef(namespace="ns1", name="pod-a", uid="u1")
    assert ref.prefix() == "[ns1/pod-a/u1]"
    assert ref.prefix("ns1/net-a") == "[ns1/pod-a/u1:ns1/net-a]"
