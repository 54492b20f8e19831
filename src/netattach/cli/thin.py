"""`netattach-thin`: the executable a container runtime runs as a CNI plugin.

A VERSION call is answered before anything heavy is imported: a runtime may ask it of every
plugin it finds, and it costs what the shim's start-up costs (tests/unit/test_thin_version.py).
ADD, DEL and the rest import the orchestrator.
"""

import gc
import os
import sys

from netattach import quickjson, wire
from netattach.cni import spec

# With one of these set, a VERSION call has something to validate: the full path answers it.
_VALIDATED_ON_VERSION = (spec.ENV_CONTAINERID, spec.ENV_IFNAME, spec.ENV_ARGS)


def version_reply(environ: dict[str, str] | os._Environ[str], stdin: bytes) -> bytes | None:
    """The reply to a plain VERSION call (what `dispatch.handle` answers), or None when the call
    is anything else or needs the full path to report a problem."""
    if environ.get(spec.ENV_COMMAND) != spec.VERSION:
        return None
    if any(environ.get(name) for name in _VALIDATED_ON_VERSION):
        return None
    cni_version = spec.CURRENT_VERSION
    if stdin.strip():
        try:
            raw = quickjson.loads(stdin.decode("utf-8"))
        except (ValueError, RecursionError):
            return None  # not JSON: the full path says so (error 6)
        if not isinstance(raw, dict) or wire.too_large(len(stdin)):
            return None
        declared = raw.get("cniVersion")
        if isinstance(declared, str) and declared in spec.VERSIONS:
            cni_version = declared
    return wire.version_reply(cni_version)


def _configure_logging() -> None:
    import logging

    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="netattach-thin %(levelname)s %(message)s"
    )


def main() -> int:
    stdin = sys.stdin.buffer.read()
    quick = version_reply(os.environ, stdin)
    if quick is not None:
        sys.stdout.buffer.write(quick)
        sys.stdout.flush()
        return 0

    # One call, then `exit_now`: what the imports and the call allocate is freed with the
    # process, so the cyclic collector's passes over it are skipped (~2.5 ms of the imports).
    gc.disable()
    from netattach import loggers
    from netattach.pods import thin

    # A call that goes well logs nothing: `logging` is imported and configured for the first line.
    loggers.on_first_use(_configure_logging)
    reply = thin.handle(os.environ, stdin)
    sys.stdout.buffer.write(reply.stdout)
    sys.stdout.flush()
    return reply.exit_code


def exit_now(code: int) -> None:  # never returns; NoReturn would import `typing` (and `re`)
    """End the process with `code` without the interpreter's teardown, which frees every object
    of every module the call imported (~12 ms on 2 cores): the reply is written, each file the
    call wrote is closed, each delegate reaped; only the standard streams need a flush."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
