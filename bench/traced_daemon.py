"""`netattach daemon` with timing probes, for `bench.breakdown` (no change to src/ needed).

    NETATTACH_BENCH_TRACE=FILE python -m bench.traced_daemon daemon --config SETTINGS

Wraps, before the daemon starts, the functions where a CNI call spends its time (the request
handler, the container lock, planning, pod records, the attachment cache, atomic writes and
every `os.fsync`, delegate executions, status publishing, Events) so that each call records
(probe, request, start, end); the request is `COMMAND:CONTAINERID` of the CNI call it serves
(a context variable set by the handler, inherited by tasks and `asyncio.to_thread`). The spans
are written to FILE, one JSON list per line, when the daemon exits.

With NETATTACH_BENCH_NO_FSYNC=1 `os.fsync` returns at once: the daemon as it would be without
any fsync, to measure what they cost (an experiment, never a configuration).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from netattach import atomic
from netattach.cli import main as cli_main
from netattach.cluster import files, kube
from netattach.daemon import server, service
from netattach.pods import events, locks, orchestrator, records
from netattach.runtime import cache, execute, invoke

TRACE_ENV = "NETATTACH_BENCH_TRACE"
NO_FSYNC_ENV = "NETATTACH_BENCH_NO_FSYNC"

REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="-")
SPANS: list[tuple[str, str, float, float]] = []


def _record(name: str, started: float) -> None:
    SPANS.append((name, REQUEST.get(), started, time.perf_counter()))


def wrap(owner: Any, attribute: str, name: str) -> None:
    """Replace `owner.attribute` (function or coroutine function) by a timed one."""
    original: Callable[..., Any] = getattr(owner, attribute)
    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await original(*args, **kwargs)
            finally:
                _record(name, started)

        setattr(owner, attribute, timed_async)
        return

    @functools.wraps(original)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            _record(name, started)

    setattr(owner, attribute, timed)


def wrap_handler() -> None:
    """The daemon's request handler: names the request for every span under it."""
    original = service.Daemon.handle

    @functools.wraps(original)
    async def handle(self: service.Daemon, environ: Any, stdin: bytes) -> Any:
        request = f"{environ.get('CNI_COMMAND', '?')}:{environ.get('CNI_CONTAINERID', '?')}"
        token = REQUEST.set(request)
        started = time.perf_counter()
        try:
            return await original(self, environ, stdin)
        finally:
            _record("handle", started)
            REQUEST.reset(token)

    service.Daemon.handle = handle  # type: ignore[method-assign]


def install(no_fsync: bool) -> None:
    wrap_handler()
    wrap(server.CNIServer, "_serve", "connection")
    wrap(locks.ContainerLocks, "_acquire", "lock")
    wrap(orchestrator.Orchestrator, "_plan", "plan")
    wrap(orchestrator.Orchestrator, "_undo_earlier_add", "earlier-add check")
    wrap(events.PodEvents, "added", "events")
    for method in ("save", "load", "delete"):
        wrap(records.PodRecords, method, f"pod record {method}")
        wrap(cache.AttachmentCache, method, f"cache {method}")
    wrap(atomic, "write_atomic", "atomic write")
    wrap(atomic, "remove", "atomic remove")
    wrap(atomic, "fsync_directory", "fsync (directory)")
    wrap(invoke.Invoker, "_run", "delegate (with slot wait)")
    wrap(execute.SubprocessExec, "run", "delegate process")
    for feed in (files.DirectoryFeed, kube.KubeFeed):
        wrap(feed, "publish_status", "status publish")
        wrap(feed, "remove_status", "status remove")
    wrap(kube.KubeFeed, "record_event", "event")
    if no_fsync:
        os.fsync = lambda fd: None
    wrap(os, "fsync", "fsync")


def main() -> int:
    trace = os.environ[TRACE_ENV]
    install(os.environ.get(NO_FSYNC_ENV) == "1")
    try:
        return cli_main.main(sys.argv[1:])
    finally:
        with open(trace, "w", encoding="utf-8") as out:
            for span in SPANS:
                out.write(json.dumps(span) + "\n")


if __name__ == "__main__":
    sys.exit(main())
