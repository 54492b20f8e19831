"""One INFO line per finished ADD, DEL and CHECK: what an operator greps for a pod.

    [blue/web/6f1c] ADD container 3f2a9c1b7d4e: eth0 cluster-default, net1 blue/a; 48 ms; code 0

The pod prefix comes first (as every line about a pod), then the command, the container (its
first 12 characters, as crictl shows it), the interfaces with their networks, the duration and
the CNI result code (0 for success), with the error's message after a failure. A working pod thus
leaves one line per call; the details of a failure are in the orchestrator's ERROR line before it.

`dispatch` opens a `CallNote` around the call (a context variable, so concurrent calls on the
event loop keep theirs apart); the orchestrator notes in it which pod and attachments the call is
about, as soon as it knows (`note_record`): the line says so even when the call fails halfway.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator, Sequence

from netattach import loggers
from netattach.cni import env, errors, spec
from netattach.pods import records as records_mod

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

log = loggers.get("netattach.calls")

# The commands that get a line; VERSION, STATUS and GC are the runtime's housekeeping.
LOGGED: Final = frozenset({spec.ADD, spec.DEL, spec.CHECK})
SHORT_ID: Final = 12
_MESSAGE_MAX: Final = 300


# CallNote and Outcome are plain classes, not dataclasses: creating a dataclass compiles its
# methods (~0.5 ms each), and the thin plugin imports this module on every exec.
class CallNote:
    __slots__ = ("interfaces", "namespace", "pod", "uid")

    def __init__(self) -> None:
        self.namespace = ""
        self.pod = ""
        self.uid = ""
        self.interfaces: tuple[tuple[str, str], ...] = ()  # (ifname, network), in attachment order


_current: contextvars.ContextVar[CallNote | None] = contextvars.ContextVar(
    "netattach_call_note", default=None
)


def note_pod(namespace: str, pod: str, uid: str) -> None:
    """The pod the running call is about (no effect outside a noted call)."""
    note = _current.get()
    if note is not None:
        note.namespace, note.pod, note.uid = namespace, pod, uid


def note_record(
    record: records_mod.PodRecord,
    attachments: Sequence[records_mod.AttachmentRecord] | None = None,
) -> None:
    """The pod and attachments (the record's unless given) the running call is about."""
    note = _current.get()
    if note is None:
        return
    note.namespace, note.pod, note.uid = record.namespace, record.pod, record.uid
    chosen = record.attachments if attachments is None else attachments
    note.interfaces = tuple((att.ifname, att.status_name) for att in chosen)


def describe(
    command: str, container_id: str, note: CallNote, millis: float, failure: errors.CNIError | None
) -> str:
    interfaces = ", ".join(f"{ifname} {network}" for ifname, network in note.interfaces)
    line = (
        f"{command} container {container_id[:SHORT_ID] or '-'}: {interfaces or 'no interfaces'}; "
        f"{millis:.0f} ms; code {0 if failure is None else failure.code}"
    )
    if failure is not None:
        line += f" ({str(failure)[:_MESSAGE_MAX]})"
    return line


class Outcome:
    """Where the caller leaves the call's error, when it failed, for the line."""

    __slots__ = ("failure",)

    def __init__(self) -> None:
        self.failure: errors.CNIError | None = None


@contextlib.contextmanager
def noted(call: env.Environment) -> Iterator[Outcome]:
    """Note the call while it runs; on leaving, log its line (for ADD, DEL and CHECK)."""
    note = CallNote()
    outcome = Outcome()
    token = _current.set(note)
    started = time.monotonic()
    try:
        yield outcome
    finally:
        _current.reset(token)
        if call.command in LOGGED and log.isEnabledFor(loggers.INFO):
            # Imported only for a line that is written: it imports `logging` (see loggers.py).
            from netattach import logs

            millis = (time.monotonic() - started) * 1000
            line = describe(call.command, call.container_id, note, millis, outcome.failure)
            extra = logs.pod_fields(note.namespace, note.pod, note.uid) if note.pod else None
            log.info("%s", line, extra=extra)
