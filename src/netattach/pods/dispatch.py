"""One CNI call, from its environment and stdin to what the runtime reads back.

Shared by the thin plugin (in-process) and the daemon (behind the shim): parse the call,
run it on the orchestrator, and turn the outcome into stdout bytes and an exit code. Every
error leaves as a CNI error object; anything unexpected becomes code 999 with the traceback in
the log only.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping

from netattach import loggers, wire
from netattach.cni import env, errors, spec
from netattach.pods import call_log, refs
from netattach.pods import orchestrator as orchestrator_mod
from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

log = loggers.get("netattach.dispatch")


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class Reply(NamedTuple):
    exit_code: int
    stdout: bytes


def parse_netconf(stdin: bytes) -> dict[str, Any]:
    if wire.too_large(len(stdin)):
        raise errors.DecodingFailureError(
            f"network configuration on stdin is {len(stdin)} bytes, more than "
            f"{wire.MAX_REQUEST_BYTES}"
        )
    try:
        raw = json.loads(stdin)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise errors.DecodingFailureError(
            "network configuration on stdin is not JSON", str(exc)[:200]
        ) from exc
    if not isinstance(raw, dict):
        raise errors.DecodingFailureError("network configuration on stdin is not a JSON object")
    return raw


def valid_container_ids(netconf: Mapping[str, Any]) -> set[str]:
    """The containers a CNI 1.1 GC says are still attached to our network."""
    valid = netconf.get(spec.VALID_ATTACHMENTS_KEY, [])
    if not isinstance(valid, list):
        raise errors.InvalidNetworkConfigError(f"{spec.VALID_ATTACHMENTS_KEY} must be a list")
    ids = set()
    for item in valid:
        if not isinstance(item, dict) or not isinstance(item.get("containerID"), str):
            raise errors.InvalidNetworkConfigError(
                f"{spec.VALID_ATTACHMENTS_KEY} entries need a string containerID, got {item!r}"
            )
        ids.add(item["containerID"])
    return ids


async def run_call(
    orchestrator: orchestrator_mod.Orchestrator,
    call: env.Environment,
    netconf: Mapping[str, Any],
) -> bytes:
    """Run one parsed call; the stdout of a success (empty for all but ADD and VERSION)."""
    if call.command == spec.ADD:
        return json.dumps((await orchestrator.add(call, netconf)).to_raw()).encode()
    if call.command == spec.DEL:
        await orchestrator.delete(call)
    elif call.command == spec.CHECK:
        await orchestrator.check(call)
    elif call.command == spec.GC:
        await orchestrator.gc(valid_container_ids(netconf))
    elif call.command == spec.STATUS:
        await orchestrator.status()
    return b""


def error_reply(exc: errors.CNIError, cni_version: str) -> Reply:
    return Reply(exit_code=1, stdout=json.dumps(exc.to_raw(cni_version)).encode())


# The one table from internal errors to CNI codes (the habit "typed exceptions inside, CNI codes
# at one boundary"). CNI errors pass through with their own code; anything not listed is a bug:
# 999, the traceback in the log only.
ERROR_TABLE: tuple[tuple[type[BaseException], type[errors.CNIError]], ...] = (
    (wire.WireError, errors.DecodingFailureError),
    (TimeoutError, errors.TryAgainLaterError),
    (ConnectionError, errors.TryAgainLaterError),
    (OSError, errors.IOFailureError),
)


def as_cni_error(exc: BaseException) -> errors.CNIError:
    if isinstance(exc, errors.CNIError):
        return exc
    for internal, cni in ERROR_TABLE:
        if isinstance(exc, internal):
            return cni(str(exc) or type(exc).__name__)
    log.error("internal error: %s", exc, exc_info=exc)
    return errors.InternalError.unexpected(exc)


def unexpected_reply(exc: BaseException, cni_version: str) -> Reply:
    return error_reply(as_cni_error(exc), cni_version)


if TYPE_CHECKING:
    OrchestratorFor = Callable[[Mapping[str, Any]], Awaitable[orchestrator_mod.Orchestrator]]


async def handle(
    environ: Mapping[str, str], stdin: bytes, orchestrator_for: OrchestratorFor
) -> Reply:
    """One CNI call, environment and stdin in, reply out; nothing escapes as an exception.

    `orchestrator_for(netconf)` gives the orchestrator to run on: the thin plugin builds one from
    the settings its config names, the daemon hands its long-lived one (or raises code 11 while
    it is not ready).
    """
    cni_version = spec.CURRENT_VERSION
    try:
        call = env.parse_environment(environ)
        netconf = parse_netconf(stdin) if stdin.strip() else {}
        declared = netconf.get("cniVersion")
        if isinstance(declared, str) and declared in spec.VERSIONS:
            cni_version = declared
        if call.command == spec.VERSION:
            return Reply(exit_code=0, stdout=wire.version_reply(cni_version))
    except Exception as exc:  # the runtime gets a CNI error, the log the traceback
        return error_reply(as_cni_error(exc), cni_version)
    with call_log.noted(call) as outcome:
        ref = refs.pod_ref(call)
        if ref is not None:
            call_log.note_pod(ref.namespace, ref.name, ref.uid)
        try:
            orchestrator = await orchestrator_for(netconf)
            return Reply(exit_code=0, stdout=await run_call(orchestrator, call, netconf))
        except Exception as exc:  # the runtime gets a CNI error, the log the traceback
            outcome.failure = as_cni_error(exc)
            return error_reply(outcome.failure, cni_version)
