"""The pieces the admission policy's CEL is built from (SEC-ADMISSION).

CEL in Kubernetes cannot decode JSON, and `spec.config` is a JSON string, so every check reads the
config as text (`variables.config`) with RE2 regular expressions: a `"key": "value"` pair is
found by `pair`, its value judged by `names_check` (the regexes `globs` renders from a list), and
what a config holds counted by `count`. `admission` and `admission_node` build their checks from
these, so the two read a config the same way.

    Check(tokens, each, whole)   one list's check: every match of `tokens` satisfies `each`
    literal(text)                `text` as a CEL string literal
    key(names), pair(names)      the regex of a JSON key (one of `names`), and of its string pair
    matches(token, regex)        CEL: `token` matches `regex`
    count(regex)                 CEL: how often `regex` matches the config
"""

import dataclasses
from collections.abc import Callable, Sequence
from typing import Final

from netattach.guard import delegate_policy, globs

CONFIG: Final = "variables.config"
WS: Final = r"\s*"
QUOTE: Final = '"'
# The start of a value that is no JSON string: anything but a quote or white space.
NOT_A_STRING: Final = r'[^"\s]'
# A JSON string without escapes (a config with a backslash is refused first).
STRING: Final = '"[^"]*"'


def literal(text: str) -> str:
    """`text` as a CEL string literal (single-quoted; backslashes and quotes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def key(names: Sequence[str]) -> str:
    """The regex of a JSON key, one of `names`."""
    inner = "|".join(names)
    return f'"(?:{inner})"' if len(names) > 1 else f'"{inner}"'


def pair(names: Sequence[str]) -> str:
    """The regex of a `"key": "value"` pair, its key one of `names`."""
    return key(names) + WS + ":" + WS + STRING


def alternatives(regexes: Sequence[str]) -> str | None:
    return "(?:" + "|".join(regexes) + ")" if regexes else None


def matches(token: str, regex: str) -> str:
    """CEL: `token` (a CEL expression of a string) matches `regex`."""
    return f"{token}.matches({literal(regex)})"


def count(regex: str) -> str:
    """CEL: how many times `regex` matches the config."""
    return f"{CONFIG}.findAll({literal(regex)}).size()"


def value_check(token: str, names: Sequence[str], allowed: str | None, denied: str | None) -> str:
    """CEL: the pair `token` (`"key": "value"`) has a value `allowed` takes and `denied` not."""
    head, tail = "^" + key(names) + WS + ":" + WS + QUOTE, QUOTE + "$"
    parts = ["false"] if allowed is None else [matches(token, head + allowed + tail)]
    if denied is not None:
        parts.append("!" + matches(token, head + denied + tail))
    return " && ".join(parts)


def names_check(names: Sequence[str], patterns: globs.Patterns, empty: str | None = None) -> str:
    """CEL on the pair `m`: its value is allowed by `patterns`; `empty` is the CEL constant
    deciding an empty value (None: like any other value)."""
    allowed = alternatives([globs.glob_regex(p) for p in patterns.included])
    denied = alternatives([globs.glob_regex(p) for p in patterns.excluded])
    check = value_check("m", names, allowed, denied)
    if empty is not None:
        blank = "^" + key(names) + WS + ":" + WS + QUOTE + QUOTE + "$"
        check = f"({matches('m', blank)} ? {empty} : ({check}))"
    return check


def strings_only(names: Sequence[str]) -> str:
    """CEL: every `names` key of the config has a string value."""
    return "!" + matches(CONFIG, key(names) + WS + ":" + WS + NOT_A_STRING)


@dataclasses.dataclass(frozen=True, slots=True)
class Check:
    """One list's check in CEL: each `tokens` match `m` of the config must satisfy `each`, and
    the whole config `whole` (the value kinds, the plugins left without a name)."""

    tokens: str
    each: str
    whole: tuple[str, ...] = ()

    def expression(self) -> str:
        found = f"{CONFIG}.findAll({literal(self.tokens)})"
        return " && ".join((*self.whole, f"{found}.all(m, {self.each})"))

    def offenders(self) -> str:
        """CEL: the matches that fail, a list of strings for the message."""
        return f"{CONFIG}.findAll({literal(self.tokens)}).filter(m, !({self.each}))"


# A list's check, from the lists of one namespace (or the cluster-wide ones).
Render = Callable[[delegate_policy.DelegateRules], Check]
