"""CNI errors: one class per well-known code, to and from the CNI error JSON.

    CNIError                                 any CNI error; carries code, msg, details
    ├── IncompatibleVersionError             1
    ├── UnsupportedFieldError                2
    ├── UnknownContainerError                3
    ├── InvalidEnvironmentError              4
    ├── IOFailureError                       5
    ├── DecodingFailureError                 6
    ├── InvalidNetworkConfigError            7
    ├── TryAgainLaterError                   11
    ├── PluginNotAvailableError              50   (STATUS)
    ├── PluginNotAvailableLimitedError       51   (STATUS)
    ├── InternalError                        999
    ├── DaemonUnavailableError               100  netattach's own codes, never renumbered
    ├── AttachmentNotFoundError              101
    ├── InvalidSelectionError                102
    ├── DelegateFailedError                  103  delegate failed without a parseable error
    ├── PolicyApplyError                     104
    ├── AddressesExhaustedError              105  a pool of netattach's IPAM has no free address
    └── PluginError                          any  a delegate's own error, its code passed through

Codes 100+ are "plugin specific" in the CNI spec, so a delegate may use 101 for something of its
own: errors read from a *delegate* become `PluginError` (see `from_plugin_raw`), never one of ours.

Each class names the reason of the Warning Event a failed ADD records (`event_reason`, what a user
can act on: `NetworkAttachmentDefinitionNotFound`, `PodNotFound`, ...); a subclass elsewhere names
its own (`DelegateRefusedError`: `NetworkAttachmentRefused`). `with_prefix` puts the pod and
network in front of a message and keeps the class, so the code and the reason stay the error's.

This module is imported by the shim: standard library only, no `dataclasses`, and `typing` and
`collections.abc` for mypy only (they would cost the shim ~3 ms of start-up).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import ClassVar, Final, Self

# The Event reason of an error no class names one for.
FAILED_ATTACH: Final = "FailedAttachNetwork"


class CNIError(Exception):
    """A CNI error object `{cniVersion, code, msg, details}`."""

    code: ClassVar[int] = 999
    event_reason: ClassVar[str] = FAILED_ATTACH

    def __init__(self, msg: str, details: str = "") -> None:
        super().__init__(msg)
        self.msg = msg
        self.details = details

    def with_prefix(self, prefix: str) -> Self:
        """The same error with `prefix` (`[ns/pod/uid:network]`) in front of its message: its
        class, code, Event reason, details and any attribute of its own are kept."""
        prefixed = type(self).__new__(type(self))
        prefixed.__dict__.update(self.__dict__)
        prefixed.msg = f"{prefix} {self.msg}"
        prefixed.args = (prefixed.msg,)
        return prefixed

    def __str__(self) -> str:
        if self.details:
            return f"{self.msg}: {self.details}"
        return self.msg

    def to_raw(self, cni_version: str) -> dict[str, object]:
        raw: dict[str, object] = {"cniVersion": cni_version, "code": self.code, "msg": self.msg}
        if self.details:
            raw["details"] = self.details
        return raw


class IncompatibleVersionError(CNIError):
    code = 1


class UnsupportedFieldError(CNIError):
    code = 2


class UnknownContainerError(CNIError):
    code = 3
    event_reason = "PodNotFound"


class InvalidEnvironmentError(CNIError):
    code = 4


class IOFailureError(CNIError):
    code = 5


class DecodingFailureError(CNIError):
    code = 6


class InvalidNetworkConfigError(CNIError):
    code = 7
    event_reason = "InvalidNetworkConfig"


class TryAgainLaterError(CNIError):
    code = 11
    event_reason = "NetworkNotReady"


class PluginNotAvailableError(CNIError):
    code = 50


class PluginNotAvailableLimitedError(CNIError):
    code = 51


class InternalError(CNIError):
    code = 999

    @classmethod
    def unexpected(cls, exc: BaseException, prefix: str = "") -> InternalError:
        """`exc`, which no error code was planned for (a bug), as the runtime reads it: its
        type and text in the details, after `prefix` (`[ns/pod/uid]`) when given. The caller
        logs the traceback; the runtime never sees it."""
        msg = f"{prefix} internal error" if prefix else "internal error in netattach"
        return cls(msg, f"{type(exc).__name__}: {exc}")


class DaemonUnavailableError(CNIError):
    code = 100


class AttachmentNotFoundError(CNIError):
    code = 101
    event_reason = "NetworkAttachmentDefinitionNotFound"


class InvalidSelectionError(CNIError):
    code = 102
    event_reason = "InvalidNetworkSelection"


class DelegateFailedError(CNIError):
    code = 103


class PolicyApplyError(CNIError):
    code = 104


class AddressesExhaustedError(CNIError):
    """The pool of a network with netattach's IPAM has no free address (IPAM-BAD)."""

    code = 105
    event_reason = "AddressesExhausted"


class PluginError(CNIError):
    """An error a delegate plugin returned; its own code is kept as it was."""

    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(msg, details)
        self.code = code  # type: ignore[misc]  # instance value shadows the class default
        # A delegate's well-known code reads as ours does in an Event (its 7: InvalidNetworkConfig).
        known = BY_CODE.get(code)
        self.event_reason = FAILED_ATTACH if known is None else known.event_reason  # type: ignore[misc]


BY_CODE: dict[int, type[CNIError]] = {
    cls.code: cls
    for cls in (
        IncompatibleVersionError,
        UnsupportedFieldError,
        UnknownContainerError,
        InvalidEnvironmentError,
        IOFailureError,
        DecodingFailureError,
        InvalidNetworkConfigError,
        TryAgainLaterError,
        PluginNotAvailableError,
        PluginNotAvailableLimitedError,
        InternalError,
        DaemonUnavailableError,
        AttachmentNotFoundError,
        InvalidSelectionError,
        DelegateFailedError,
        PolicyApplyError,
        AddressesExhaustedError,
    )
}


def is_error_raw(raw: object) -> bool:
    """True when `raw` has the shape of a CNI error object (an integer `code`, a string `msg`)."""
    return (
        isinstance(raw, dict)
        and isinstance(raw.get("code"), int)
        and not isinstance(raw.get("code"), bool)
        and isinstance(raw.get("msg", ""), str)
    )


def _fields(raw: Mapping[str, object]) -> tuple[int, str, str]:
    if not is_error_raw(raw):
        raise DecodingFailureError("not a CNI error object", repr(raw)[:200])
    code = raw["code"]
    assert isinstance(code, int)
    msg = raw.get("msg", "")
    details = raw.get("details", "")
    return code, str(msg), details if isinstance(details, str) else str(details)


def from_raw(raw: Mapping[str, object]) -> CNIError:
    """The error object as the class of its code (an unknown code gives a `PluginError`)."""
    code, msg, details = _fields(raw)
    cls = BY_CODE.get(code)
    if cls is None:
        return PluginError(code, msg, details)
    return cls(msg, details)


def from_plugin_raw(raw: Mapping[str, object]) -> PluginError:
    """An error object printed by a delegate plugin, its code passed through unchanged."""
    code, msg, details = _fields(raw)
    return PluginError(code, msg, details)
