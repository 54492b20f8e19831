"""The CNI environment: `CNI_*` variables, `CNI_ARGS`, container IDs and interface names.

Validation follows the CNI specification: a missing or invalid variable is error 4 naming it.
"""

import re
from collections.abc import Iterable, Mapping

from netattach.cni import errors, spec
from netattach.values import NamedTuple

# Patterns as text: `re` compiles each on first use and caches it, so a start of the thin
# plugin compiles only those its call needs.
# CNI spec 1.0 "Parameters": a container ID starts with an alphanumeric character, then any of
# alphanumerics, underscore, period and hyphen.
_CONTAINER_ID = r"[a-zA-Z0-9][a-zA-Z0-9_.\-]*"

_KERNEL_SPACE_BYTES = frozenset({0xA0})

# Which variables each command needs (CNI spec 1.0 "Parameters"; DEL may come without a netns).
_REQUIRED: Mapping[str, tuple[str, ...]] = {
    spec.ADD: (spec.ENV_CONTAINERID, spec.ENV_NETNS, spec.ENV_IFNAME, spec.ENV_PATH),
    spec.CHECK: (spec.ENV_CONTAINERID, spec.ENV_NETNS, spec.ENV_IFNAME, spec.ENV_PATH),
    spec.DEL: (spec.ENV_CONTAINERID, spec.ENV_IFNAME, spec.ENV_PATH),
    spec.GC: (spec.ENV_PATH,),
    spec.STATUS: (spec.ENV_PATH,),
    spec.VERSION: (),
}


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class Environment(NamedTuple):
    """A validated CNI invocation environment."""

    command: str
    container_id: str = ""
    netns: str = ""
    ifname: str = ""
    args: tuple[tuple[str, str], ...] = ()
    path: tuple[str, ...] = ()


def container_id_problem(value: str) -> str | None:
    if re.fullmatch(_CONTAINER_ID, value):
        return None
    return "a container ID starts with a letter or digit, then letters, digits, '_', '.', '-'"


def check_container_id(value: str, *, source: str = spec.ENV_CONTAINERID) -> str:
    if not re.fullmatch(_CONTAINER_ID, value):
        raise errors.InvalidEnvironmentError(
            f"invalid {source} {value!r}",
            "a container ID starts with a letter or digit, then letters, digits, '_', '.', '-'",
        )
    return value


def interface_name_problem(value: str) -> str | None:
    """Why `value` is not a valid Linux interface name, or None when it is."""
    if not value:
        return "an interface name must not be empty"
    if len(value.encode("utf-8")) > spec.IFNAME_MAX_BYTES:
        return f"an interface name has at most {spec.IFNAME_MAX_BYTES} bytes"
    if value in (".", ".."):
        return "an interface name must not be '.' or '..'"
    bad = sorted({c for c in value if c in "/:\0" or c.isspace()})
    if bad:
        return f"an interface name must not contain {''.join(bad)!r}"
    # The kernel (dev_valid_name) tests bytes with its Latin-1 isspace, so a UTF-8 byte 0xA0
    # (as in "à") is refused there although no character of the name is a space.
    if any(b in _KERNEL_SPACE_BYTES for b in value.encode("utf-8")):
        return "an interface name must not contain byte 0xa0 (the kernel reads it as a space)"
    return None


def check_ifname(value: str, *, source: str = spec.ENV_IFNAME) -> str:
    problem = interface_name_problem(value)
    if problem is not None:
        raise errors.InvalidEnvironmentError(f"invalid {source} {value!r}", problem)
    return value


def parse_cni_args(text: str) -> tuple[tuple[str, str], ...]:
    """`"K=V;K2=V2"` → `(("K", "V"), ("K2", "V2"))`; empty pieces are skipped, `=` in V kept."""
    pairs: list[tuple[str, str]] = []
    for piece in text.split(";"):
        if not piece:
            continue
        key, sep, value = piece.partition("=")
        if not sep or not key:
            raise errors.InvalidEnvironmentError(
                f"invalid {spec.ENV_ARGS} {text!r}", f"{piece!r} is not KEY=VALUE"
            )
        pairs.append((key, value))
    return tuple(pairs)


def format_cni_args(pairs: Iterable[tuple[str, str]]) -> str:
    return ";".join(f"{key}={value}" for key, value in pairs)


def _is_true(value: str) -> bool:
    return value.lower() in ("1", "true")


def load_args(pairs: Iterable[tuple[str, str]], known: Iterable[str]) -> dict[str, str]:
    """The pairs as a dict; keys not in `known` are refused unless `IgnoreUnknown` (libcni)."""
    wanted = set(known)
    result = dict(pairs)
    ignore_unknown = _is_true(result.pop("IgnoreUnknown", "false"))
    unknown = sorted(set(result) - wanted)
    if unknown and not ignore_unknown:
        raise errors.InvalidEnvironmentError(
            f"invalid {spec.ENV_ARGS}: unknown key(s) {', '.join(map(repr, unknown))}",
            "set IgnoreUnknown=true to allow them",
        )
    return {k: v for k, v in result.items() if k in wanted}


def parse_environment(environ: Mapping[str, str]) -> Environment:
    """Read and validate the `CNI_*` variables the command needs."""
    command = environ.get(spec.ENV_COMMAND, "")
    if not command:
        raise errors.InvalidEnvironmentError(f"{spec.ENV_COMMAND} is not set")
    if command not in spec.COMMANDS:
        raise errors.InvalidEnvironmentError(f"invalid {spec.ENV_COMMAND} {command!r}")
    missing = [name for name in _REQUIRED[command] if not environ.get(name)]
    if missing:
        raise errors.InvalidEnvironmentError(
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set for {command}"
        )
    container_id = environ.get(spec.ENV_CONTAINERID, "")
    if container_id:
        check_container_id(container_id)
    ifname = environ.get(spec.ENV_IFNAME, "")
    if ifname:
        check_ifname(ifname)
    for name in (spec.ENV_NETNS, spec.ENV_ARGS, spec.ENV_PATH):  # the rest are checked above
        if "\0" in environ.get(name, ""):
            # A runtime cannot pass one (execve takes C strings), the daemon's socket can; a
            # plugin could never be given it.
            raise errors.InvalidEnvironmentError(
                f"invalid {name} {environ[name]!r}", "a variable's value cannot hold a NUL"
            )
    path = tuple(p for p in environ.get(spec.ENV_PATH, "").split(":") if p)
    return Environment(
        command=command,
        container_id=container_id,
        netns=environ.get(spec.ENV_NETNS, ""),
        ifname=ifname,
        args=parse_cni_args(environ.get(spec.ENV_ARGS, "")),
        path=path,
    )
