"""Allowlists of host resource names, as the delegate policy writes them (SEC-DELEGATE).

Two kinds of list, both pure and both also rendered as RE2 regular expressions, so that the
admission policy (CEL) decides exactly what the daemon decides:

    Patterns   names (plugin types, interfaces, bridges, PCI addresses, sysctls): `*` stands for
               any run of characters (none too), `?` for exactly one, every other character for
               itself; no escapes and no classes, which no name we check needs.
    Prefixes   absolute directories (IPAM `dataDir`): a path is in the list when it is one of
               them or lies below one, compared component by component; a path with a `..`
               component is never in a list, whatever it names.

In both, an entry that starts with `!` excludes: a value is allowed when some plain entry takes
it and no `!` entry does, so order does not matter and `["*", "!cni0"]` reads as "any but cni0".
"""

from __future__ import annotations

from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

EXCLUDE: Final = "!"
# Characters RE2 (and Python's re) treat as syntax; every other character stands for itself.
_REGEX_SYNTAX: Final = frozenset("\\.+*?()|[]{}^$")


def glob_matches(pattern: str, value: str) -> bool:
    """Whether the whole of `value` matches the glob `pattern` (`*` any run, `?` one character).

    Greedy with one remembered star, as shells match: linear in practice, never exponential.
    """
    p = v = 0
    star = -1  # index in pattern just after the last `*` seen
    resume = 0  # index in value where that `*` took its current run
    while v < len(value):
        if p < len(pattern) and pattern[p] == "*":
            star, resume = p + 1, v
            p += 1
        elif p < len(pattern) and (pattern[p] == "?" or pattern[p] == value[v]):
            p += 1
            v += 1
        elif star >= 0:
            resume += 1  # the last `*` takes one more character
            p, v = star, resume
        else:
            return False
    return all(char == "*" for char in pattern[p:])


def glob_regex(pattern: str) -> str:
    """`pattern` as an unanchored RE2 expression matching the same strings."""
    parts: list[str] = []
    for char in pattern:
        if char == "*":
            parts.append(".*")
        elif char == "?":
            parts.append(".")
        elif char in _REGEX_SYNTAX:
            parts.append("\\" + char)
        else:
            parts.append(char)
    return "".join(parts)


def has_dotdot(path: str) -> bool:
    """Whether `path` has a `..` component (which could climb out of any prefix)."""
    return ".." in path.split("/")


def normal_path(path: str) -> str | None:
    """`path` as the kernel resolves its spelling: `//` and `/./` collapsed, no trailing `/`;
    None when it is not absolute or has a `..` component (symlinks are the caller's)."""
    if not path.startswith("/") or has_dotdot(path) or "\0" in path:
        return None
    parts = [p for p in path.split("/") if p not in ("", ".")]
    return "/" + "/".join(parts)


def under(path: str, directory: str) -> bool:
    """Whether `path` is `directory` or lies below it; both absolute, compared by component."""
    top = directory.rstrip("/")
    return path in (directory, top) or path.startswith(top + "/")


# The value types below are NamedTuples rather than frozen dataclasses: the thin plugin imports
# this module on every exec, and a dataclass costs ~0.5 ms to create (it compiles each of its
# methods), a NamedTuple a fifth of that. They are built by keyword and never changed.
class Patterns(NamedTuple):
    """An allowlist of names; `entries` as written, `!` exclusions among them."""

    entries: tuple[str, ...]

    @property
    def included(self) -> tuple[str, ...]:
        return tuple(e for e in self.entries if not e.startswith(EXCLUDE))

    @property
    def excluded(self) -> tuple[str, ...]:
        return tuple(e[1:] for e in self.entries if e.startswith(EXCLUDE))

    def allows(self, value: str) -> bool:
        return any(glob_matches(p, value) for p in self.included) and not any(
            glob_matches(p, value) for p in self.excluded
        )

    @property
    def allows_anything(self) -> bool:
        """Whether every name is allowed (a `*` and no exclusion): a name left unset, which the
        plugin replaces with one of its own choosing, is allowed only then."""
        return "*" in self.included and not self.excluded

    def __str__(self) -> str:
        return "[" + ", ".join(self.entries) + "]"


class Prefixes(NamedTuple):
    """An allowlist of absolute directories; `entries` as written, `!` exclusions among them."""

    entries: tuple[str, ...]

    @property
    def included(self) -> tuple[str, ...]:
        return tuple(e for e in self.entries if not e.startswith(EXCLUDE))

    @property
    def excluded(self) -> tuple[str, ...]:
        return tuple(e[1:] for e in self.entries if e.startswith(EXCLUDE))

    def allows(self, path: str) -> bool:
        if not path.startswith("/") or has_dotdot(path):
            return False
        return any(under(path, d) for d in self.included) and not any(
            under(path, d) for d in self.excluded
        )

    def holds(self, path: str) -> bool:
        """Whether `path` is one of the included directories or lies below one."""
        return any(under(path, d) for d in self.included)

    def __str__(self) -> str:
        return "[" + ", ".join(self.entries) + "]"


def prefix_regex(directory: str) -> str:
    """The RE2 expression of the paths `under(path, directory)` takes (unanchored)."""
    top = directory.rstrip("/")
    if not top:  # "/" itself: every absolute path
        return "/.*"
    return _literal(top) + "(/.*)?"


def _literal(text: str) -> str:
    return "".join("\\" + c if c in _REGEX_SYNTAX else c for c in text)
