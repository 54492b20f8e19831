"""The shim ↔ daemon format: one HTTP/1.1 request per CNI call on the daemon's UNIX socket.

    POST /cni HTTP/1.1                        {"env": {"CNI_COMMAND": "ADD", ...},
    Content-Type: application/json     →       "stdin": "<the CNI config, as text>"}

    HTTP/1.1 200 OK                           {"exitCode": 0, "stdout": "<what to print>"}

Every reply the daemon sends — 200 for a CNI outcome (a result or a CNI error), 4xx for a request
it cannot read, 503 while it is not ready — carries that body, so the shim's job is only: print
`stdout`, exit with `exitCode`. Only `CNI_*` variables travel; the shim's other environment stays
on the host.

Two answers every form of the plugin gives alike live here too, so that the shim (C and Python),
the thin plugin and the daemon cannot drift apart: the VERSION reply (`version_reply`), and the
bound on what a call carries (`MAX_REQUEST_BYTES`, `too_large`).

Standard library only, no dataclasses and no `json` (see `quickjson`): the shim imports this
module.
"""

from netattach import quickjson
from netattach.cni import spec

PATH = "/cni"
CONTENT_TYPE = "application/json"
# A CNI config is a few KiB. A stdin past this is refused before it is parsed (by the shim with
# error 7, by the thin plugin and the daemon with error 6), and a request body with 413.
MAX_REQUEST_BYTES = 1024 * 1024


def too_large(size: int) -> bool:
    """Is `size` bytes (a CNI call's stdin, a request's body) past `MAX_REQUEST_BYTES`?"""
    return size > MAX_REQUEST_BYTES


def version_reply(cni_version: str) -> bytes:
    """The stdout of a VERSION call (CNI spec "VERSION"), answered from the config's
    `cniVersion` without any network config: the same bytes from the shim, the thin plugin and
    the daemon."""
    reply = {"cniVersion": cni_version, "supportedVersions": list(spec.VERSIONS)}
    return quickjson.dumps(reply).encode()


class WireError(ValueError):
    """A request or reply that does not have this module's shape."""


def encode_request(environ: dict[str, str], stdin: bytes) -> bytes:
    env = {k: v for k, v in environ.items() if k.startswith("CNI_")}
    # surrogateescape: a config that is not UTF-8 still reaches the daemon byte for byte,
    # which then reports it as a decoding failure (code 6) instead of the shim guessing.
    text = stdin.decode("utf-8", errors="surrogateescape")
    return quickjson.dumps({"env": env, "stdin": text}).encode("utf-8", errors="surrogateescape")


def decode_request(body: bytes) -> tuple[dict[str, str], bytes]:
    try:
        raw = quickjson.loads(body.decode("utf-8", errors="surrogateescape"))
    except (ValueError, RecursionError) as exc:
        raise WireError(f"request body is not JSON: {str(exc)[:120]}") from exc
    if not isinstance(raw, dict):
        raise WireError("request body is not a JSON object")
    env, stdin = raw.get("env"), raw.get("stdin", "")
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise WireError("request 'env' must map names to strings")
    if not isinstance(stdin, str):
        raise WireError("request 'stdin' must be a string")
    return env, stdin.encode("utf-8", errors="surrogateescape")


def encode_reply(exit_code: int, stdout: bytes) -> bytes:
    text = stdout.decode("utf-8", errors="surrogateescape")
    return quickjson.dumps({"exitCode": exit_code, "stdout": text}).encode(
        "utf-8", errors="surrogateescape"
    )


def decode_reply(body: bytes) -> tuple[int, bytes]:
    # Terse on purpose: the shim's C form words these the same (netattach-shim.c decode_reply).
    try:
        raw = quickjson.loads(body.decode("utf-8", errors="surrogateescape"))
    except (ValueError, RecursionError) as exc:
        raise WireError("reply body is not JSON") from exc
    if not isinstance(raw, dict):
        raise WireError("reply body is not a JSON object")
    code, stdout = raw.get("exitCode"), raw.get("stdout", "")
    if not isinstance(code, int) or isinstance(code, bool) or not isinstance(stdout, str):
        raise WireError("reply needs an integer 'exitCode' and a string 'stdout'")
    if not 0 <= code <= 255:
        raise WireError("reply 'exitCode' must be from 0 to 255")
    try:
        return code, stdout.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError as exc:
        raise WireError("reply 'stdout' is not text") from exc
