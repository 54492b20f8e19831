"""CNI errors: one class per well-known code, encoded to and decoded from the CNI error JSON."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netattach.cni import errors

pytestmark = pytest.mark.req("CNI-ERR")

# The contract of each class: the CNI spec's well-known codes plus netattach's own 100-105.
CODES: list[tuple[type[errors.CNIError], int]] = [
    (errors.IncompatibleVersionError, 1),
    (errors.UnsupportedFieldError, 2),
    (errors.UnknownContainerError, 3),
    (errors.InvalidEnvironmentError, 4),
    (errors.IOFailureError, 5),
    (errors.DecodingFailureError, 6),
    (errors.InvalidNetworkConfigError, 7),
    (errors.TryAgainLaterError, 11),
    (errors.PluginNotAvailableError, 50),
    (errors.PluginNotAvailableLimitedError, 51),
    (errors.InternalError, 999),
    (errors.DaemonUnavailableError, 100),
    (errors.AttachmentNotFoundError, 101),
    (errors.InvalidSelectionError, 102),
    (errors.DelegateFailedError, 103),
    (errors.PolicyApplyError, 104),
    (errors.AddressesExhaustedError, 105),
]
KNOWN_CODES = {code for _, code in CODES}


@pytest.mark.parametrize(("cls", "code"), CODES, ids=[c.__name__ for c, _ in CODES])
def test_each_class_carries_its_code(cls: type[errors.CNIError], code: int) -> None:
    err = cls("boom", "why")
    assert err.code == code
    assert cls.code == code
    assert isinstance(err, errors.CNIError)
    assert isinstance(err, Exception)
    assert (err.msg, err.details) == ("boom", "why")


def test_every_code_has_exactly_one_class() -> None:
    assert {code: cls for cls, code in CODES} == errors.BY_CODE
    assert len(KNOWN_CODES) == len(CODES)


def test_str_joins_msg_and_details_only_when_details_present() -> None:
    assert str(errors.IOFailureError("cannot read", "EACCES")) == "cannot read: EACCES"
    assert str(errors.IOFailureError("cannot read")) == "cannot read"


def test_to_raw_has_cni_version_code_msg_and_details() -> None:
    raw = errors.InvalidNetworkConfigError("bad config", "type missing").to_raw("1.0.0")
    assert raw == {
        "cniVersion": "1.0.0",
        "code": 7,
        "msg": "bad config",
        "details": "type missing",
    }


def test_to_raw_omits_empty_details() -> None:
    raw = errors.TryAgainLaterError("busy").to_raw("0.4.0")
    assert raw == {"cniVersion": "0.4.0", "code": 11, "msg": "busy"}
    assert "details" not in raw


def test_plugin_error_to_raw_keeps_the_delegate_code() -> None:
    raw = errors.PluginError(42, "vendor failure", "disk").to_raw("1.1.0")
    assert raw == {"cniVersion": "1.1.0", "code": 42, "msg": "vendor failure", "details": "disk"}


@pytest.mark.parametrize(("cls", "code"), CODES, ids=[c.__name__ for c, _ in CODES])
def test_from_raw_gives_the_class_of_each_known_code(cls: type[errors.CNIError], code: int) -> None:
    err = errors.from_raw({"cniVersion": "1.0.0", "code": code, "msg": "m", "details": "d"})
    assert type(err) is cls
    assert (err.code, err.msg, err.details) == (code, "m", "d")


@pytest.mark.parametrize("code", [0, 8, 12, 49, 52, 99, 106, 998, 1000, -1])
def test_from_raw_gives_plugin_error_for_unknown_codes(code: int) -> None:
    err = errors.from_raw({"cniVersion": "1.0.0", "code": code, "msg": "m"})
    assert type(err) is errors.PluginError
    assert (err.code, err.msg, err.details) == (code, "m", "")


def test_from_raw_without_msg_or_details_gives_empty_strings() -> None:
    err = errors.from_raw({"code": 5})
    assert type(err) is errors.IOFailureError
    assert (err.msg, err.details) == ("", "")


def test_from_raw_stringifies_non_string_details() -> None:
    err = errors.from_raw({"code": 5, "msg": "m", "details": 17})
    assert err.details == "17"


@pytest.mark.parametrize("code", [1, 4, 7, 50, 100, 101, 102, 103, 104, 105, 999, 12345])
def test_from_plugin_raw_is_always_a_plugin_error_keeping_the_code(code: int) -> None:
    err = errors.from_plugin_raw({"cniVersion": "1.0.0", "code": code, "msg": "m", "details": "d"})
    assert type(err) is errors.PluginError
    assert (err.code, err.msg, err.details) == (code, "m", "d")


def test_delegate_code_101_is_not_our_attachment_not_found() -> None:
    err = errors.from_plugin_raw({"code": 101, "msg": "vendor meaning of 101"})
    assert not isinstance(err, errors.AttachmentNotFoundError)
    assert err.code == 101
    # The same object from netattach itself does decode to our own class.
    assert type(errors.from_raw({"code": 101, "msg": "x"})) is errors.AttachmentNotFoundError


def test_plugin_error_code_is_per_instance() -> None:
    a = errors.PluginError(200, "a")
    b = errors.PluginError(201, "b")
    assert (a.code, b.code) == (200, 201)
    assert errors.PluginError.code == 999  # the class default is untouched


MALFORMED: list[tuple[str, dict[str, Any]]] = [
    ("code missing", {"msg": "m"}),
    ("code true", {"code": True, "msg": "m"}),
    ("code false", {"code": False, "msg": "m"}),
    ("code a string", {"code": "7", "msg": "m"}),
    ("code a float", {"code": 7.0, "msg": "m"}),
    ("code null", {"code": None, "msg": "m"}),
    ("msg a number", {"code": 7, "msg": 3}),
    ("msg a list", {"code": 7, "msg": ["m"]}),
    ("msg null", {"code": 7, "msg": None}),
]


@pytest.mark.parametrize("raw", [r for _, r in MALFORMED], ids=[i for i, _ in MALFORMED])
@pytest.mark.parametrize("decode", [errors.from_raw, errors.from_plugin_raw])
def test_malformed_error_objects_raise_decoding_failure(
    decode: Callable[[Mapping[str, object]], errors.CNIError], raw: dict[str, Any]
) -> None:
    with pytest.raises(errors.DecodingFailureError) as info:
        decode(raw)
    assert info.value.code == 6
    assert info.value.msg == "not a CNI error object"
    assert info.value.details == repr(raw)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"code": 7, "msg": "m"}, True),
        ({"code": 7}, True),
        ({"code": True, "msg": "m"}, False),
        ({"code": "7", "msg": "m"}, False),
        ({"code": 7, "msg": 1}, False),
        ({"msg": "m"}, False),
        ([("code", 7)], False),
        ("code", False),
        (None, False),
    ],
)
def test_is_error_raw_recognises_only_the_error_shape(raw: object, expected: bool) -> None:
    assert errors.is_error_raw(raw) is expected


@st.composite
def cni_errors(draw: st.DrawFn) -> errors.CNIError:
    msg = draw(st.text())
    details = draw(st.text())
    if draw(st.booleans()):
        cls = draw(st.sampled_from([cls for cls, _ in CODES]))
        return cls(msg, details)
    code = draw(
        st.integers(min_value=-(2**31), max_value=2**31).filter(lambda c: c not in KNOWN_CODES)
    )
    return errors.PluginError(code, msg, details)


@settings(database=None, max_examples=200)
@given(err=cni_errors(), cni_version=st.sampled_from(["0.1.0", "0.4.0", "1.0.0", "1.1.0"]))
def test_from_raw_of_to_raw_round_trips(err: errors.CNIError, cni_version: str) -> None:
    raw = err.to_raw(cni_version)
    back = errors.from_raw(raw)
    assert type(back) is type(err)
    assert (back.code, back.msg, back.details) == (err.code, err.msg, err.details)
    assert raw["cniVersion"] == cni_version


# -- with_prefix: an error gains context without losing its class or attributes ----------------

PREFIX = "[ns1/pod-a/u1:ns1/net-a]"


@pytest.mark.parametrize("cls", [errors.BY_CODE[code] for code in sorted(errors.BY_CODE)])
def test_with_prefix_keeps_the_class_code_and_details(cls: type[errors.CNIError]) -> None:
    prefixed = cls("it failed", "the details").with_prefix(PREFIX)
    assert type(prefixed) is cls
    assert prefixed.code == cls.code
    assert prefixed.msg == f"{PREFIX} it failed"
    assert str(prefixed) == f"{PREFIX} it failed: the details"
    assert prefixed.details == "the details"
    assert prefixed.event_reason == cls.event_reason


@pytest.mark.parametrize("code", [1, 7, 101, 102, 999, 12345])
def test_with_prefix_keeps_a_delegates_error_a_plugin_error(code: int) -> None:
    # A delegate's 101 is its own, not our "attachment not found": it stays a PluginError.
    prefixed = errors.PluginError(code, "macvlan failed", "d").with_prefix(PREFIX)
    assert type(prefixed) is errors.PluginError
    assert prefixed.code == code
    assert prefixed.msg == f"{PREFIX} macvlan failed"
    assert prefixed.details == "d"
    assert prefixed.to_raw("1.0.0")["code"] == code


def test_with_prefix_keeps_a_subclass_its_event_reason_and_its_own_attributes() -> None:
    class NADMissingError(errors.AttachmentNotFoundError):
        event_reason = "SomethingOfItsOwn"

        def __init__(self, msg: str, namespace: str, name: str) -> None:
            super().__init__(msg)
            self.namespace, self.name = namespace, name

    original = NADMissingError("no NAD blue/net-a", "blue", "net-a")
    prefixed = original.with_prefix(PREFIX)
    assert type(prefixed) is NADMissingError
    assert (prefixed.namespace, prefixed.name) == ("blue", "net-a")
    assert prefixed.event_reason == "SomethingOfItsOwn"
    assert prefixed.code == 101
    assert prefixed.msg == prefixed.args[0] == f"{PREFIX} no NAD blue/net-a"
    assert original.msg == "no NAD blue/net-a"  # the original is left as it was


def test_with_prefix_twice_puts_the_outer_context_first() -> None:
    inner = errors.TryAgainLaterError("not synced").with_prefix("[net-a]")
    assert inner.with_prefix("[ns/pod/uid]").msg == "[ns/pod/uid] [net-a] not synced"


# -- the Event reason is an attribute of the error class -----------------------------------------

REASONS = {
    errors.AttachmentNotFoundError: "NetworkAttachmentDefinitionNotFound",
    errors.InvalidSelectionError: "InvalidNetworkSelection",
    errors.InvalidNetworkConfigError: "InvalidNetworkConfig",
    errors.UnknownContainerError: "PodNotFound",
    errors.TryAgainLaterError: "NetworkNotReady",
    errors.AddressesExhaustedError: "AddressesExhausted",
}


@pytest.mark.parametrize(("cls", "code"), CODES, ids=[c.__name__ for c, _ in CODES])
def test_each_class_names_its_event_reason(cls: type[errors.CNIError], code: int) -> None:
    assert cls("x").event_reason == REASONS.get(cls, "FailedAttachNetwork")


@pytest.mark.parametrize("code", [1, 3, 7, 11, 101, 102, 12345])
def test_a_delegates_error_reads_as_the_class_of_its_code_in_an_event(code: int) -> None:
    cls = errors.BY_CODE.get(code)
    expected = "FailedAttachNetwork" if cls is None else cls.event_reason
    assert errors.PluginError(code, "failed").event_reason == expected


# -- InternalError.unexpected: what no code was planned for is 999, one way ---------------------


def test_an_unexpected_exception_is_999_with_its_type_and_text_in_the_details() -> None:
    err = errors.InternalError.unexpected(KeyError("x"))
    assert (err.code, err.msg, err.details) == (999, "internal error in netattach", "KeyError: 'x'")


def test_an_unexpected_exception_in_a_pods_call_names_the_pod() -> None:
    err = errors.InternalError.unexpected(ValueError("bad"), "[ns/pod/uid:net]")
    assert (err.msg, err.details) == ("[ns/pod/uid:net] internal error", "ValueError: bad")
