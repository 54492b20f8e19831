"""One CNI call, from its environment and stdin to what the runtime reads back.

Shared by the thin plugin (in-process) and the daemon (behind the shim): parse the call,
run it on the orchestrator, and turn the outcome into stdout bytes and an exit code. Every
error leaves as a CNI error object; anything unexpected becomes code 999 with the traceback in
the log only.
"""

import dataclasses
import json
import logging
from collections.abc import Mapping
from typing import Any

from netattach.cni import env, errors, spec
from netattach.daemon import orchestrator as orchestrator_mod

log = logging.getLogger("netattach.dispatch")

MAX_STDIN_BYTES = 1024 * 1024


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    exit_code: int
    stdout: bytes


def parse_netconf(stdin: bytes) -> dict[str, Any]:
    if len(stdin) > MAX_STDIN_BYTES:
        raise errors.DecodingFailureError(
            f"network configuration on stdin is {len(stdin)} bytes, more than {MAX_STDIN_BYTES}"
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


def version_reply(cni_version: str) -> bytes:
    return json.dumps(
        {"cniVersion": cni_version, "supportedVersions": list(spec.VERSIONS)}
    ).encode()


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


def unexpected_reply(exc: BaseException, cni_version: str) -> Reply:
    log.error("internal error: %s", exc, exc_info=exc)
    failure = errors.InternalError("internal error in netattach", f"{type(exc).__name__}: {exc}")
    return error_reply(failure, cni_version)
