"""How netattach's processes log: one `configure()` call sets the level and the line format.

Two formats, chosen on the command line (`--log-format`), never in the settings file:

    text   `2024-05-01T10:00:00.123Z netattach INFO netattach.orchestrator: [ns/pod/uid:net] ...`
    json   one object per line: `time`, `level`, `logger`, `message`, and `pod`, `uid`,
           `network` when the line is about a pod, `exception` with the traceback

A line is about a pod when the record carries `pod` (and maybe `uid`, `network`) as `extra`
(`pod_fields()` builds them), or when its message already starts with the `[ns/pod/uid:network]`
prefix that `pods.refs.PodRef.prefix` writes (Multus's form). Either way the text line starts
with that prefix and the JSON line has the fields, so operators grep one shape and log pipelines
index the other.

The level applies to netattach's own loggers (`netattach.*`): `debug` shows its decisions, not
the HTTP client's requests. Other libraries' loggers log warnings and errors only, unless the
settings' `loggers` name them with a level of their own.
"""

import json
import logging
import re
import sys
from collections.abc import Mapping
from typing import Final, Literal, TextIO

LogFormat = Literal["text", "json"]
FORMATS: Final[tuple[LogFormat, ...]] = ("text", "json")
LEVELS: Final = ("debug", "info", "warning", "error")

# netattach's own loggers are this one's children; every other logger (httpx2 and httpcore2, which
# log each request, lightkube, asyncio, pyroute2...) stays at WARNING unless named in `loggers`.
OWN: Final = "netattach"
THIRD_PARTY_LEVEL: Final = logging.WARNING
# Patterns as text: `re` compiles each on first use and caches it, so a start of the thin
# plugin compiles only those its call needs.
# `[ns/pod/uid]` or `[ns/pod/uid:network]` at the start of a message; a NAD network is `ns/net`.
_PREFIX: Final = (
    r"\[(?P<namespace>[^/\]\s]*)/(?P<pod>[^/\]\s]+)/(?P<uid>[^:\]\s]*)(?::(?P<network>[^\]\s]+))?\]"
)


def pod_fields(namespace: str, pod: str, uid: str = "", network: str = "") -> dict[str, str]:
    """The `extra` of a log call about a pod: `log.info("...", extra=pod_fields(...))`."""
    fields = {"pod": f"{namespace}/{pod}", "uid": uid}
    if network:
        fields["network"] = network
    return fields


def prefix(fields: Mapping[str, str]) -> str:
    """`[ns/pod/uid:network]` from `pod_fields()`."""
    network = fields.get("network", "")
    return f"[{fields['pod']}/{fields.get('uid', '')}{':' + network if network else ''}]"


def _pod_of(record: logging.LogRecord, message: str) -> dict[str, str]:
    """The pod fields of a record: its `extra`, else the prefix its message starts with."""
    pod = getattr(record, "pod", None)
    if isinstance(pod, str) and pod:
        fields = {"pod": pod, "uid": str(getattr(record, "uid", "") or "")}
        network = getattr(record, "network", None)
        if isinstance(network, str) and network:
            fields["network"] = network
        return fields
    found = re.match(_PREFIX, message)
    if found is None:
        return {}
    fields = {"pod": f"{found['namespace']}/{found['pod']}", "uid": found["uid"]}
    if found["network"]:
        fields["network"] = found["network"]
    return fields


def _timestamp(record: logging.LogRecord) -> str:
    import datetime  # here: the thin plugin's calls seldom log

    moment = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class TextFormatter(logging.Formatter):
    """Human-readable lines; a line about a pod starts its message with the pod prefix."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        fields = _pod_of(record, message)
        if fields and not re.match(_PREFIX, message):
            message = f"{prefix(fields)} {message}"
        line = f"{_timestamp(record)} netattach {record.levelname} {record.name}: {message}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


class JSONFormatter(logging.Formatter):
    """One JSON object per line (newlines inside values are escaped by JSON itself)."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        line: dict[str, object] = {
            "time": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": message,
        }
        line.update(_pod_of(record, message))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


# The loggers the last `configure` set a level on (put back to NOTSET by the next one).
_named: set[str] = set()


def configure(
    level: str,
    log_format: LogFormat = "text",
    stream: TextIO | None = None,
    *,
    loggers: Mapping[str, str] | None = None,
) -> None:
    """Send netattach's records at `level` and above to `stream` (stderr) in `log_format`;
    other libraries' at WARNING and above, or at the level `loggers` names for them
    (`{"httpx2": "debug"}`: a logger and its children).

    Replaces the root logger's handlers, so calling it again (a test, a re-exec) does not
    double every line; loggers named by an earlier call go back to the default.
    """
    named = dict(loggers or {})
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
    for name, value in named.items():
        if value not in LEVELS:
            raise ValueError(
                f"the level of logger {name!r} must be one of {', '.join(LEVELS)}, got {value!r}"
            )
    if log_format not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {log_format!r}")
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(JSONFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(THIRD_PARTY_LEVEL)
    for name in _named:
        logging.getLogger(name).setLevel(logging.NOTSET)
    _named.clear()
    _named.update({OWN, *named})
    logging.getLogger(OWN).setLevel(level.upper())
    for name, value in named.items():
        logging.getLogger(name).setLevel(value.upper())
