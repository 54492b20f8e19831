"""Label and field selectors as the Kubernetes API server parses and matches them.

Label selectors (`k8s.io/apimachinery/pkg/labels`): comma-separated requirements `key`, `!key`,
`key=v`, `key==v`, `key!=v`, `key in (a,b)`, `key notin (a,b)`, `key>N`, `key<N`. `!=` and `notin`
match objects without the label. Field selectors (`pkg/fields`): `field=v`, `field==v`,
`field!=v`, comma-separated, with `\\`, `\\,` and `\\=` escapes; a missing field reads as "".
Parse errors raise `SelectorError` (the server answers 400 BadRequest).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping

_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SUBDOMAIN_WHY = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character"
)
_NAME_WHY = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)


class SelectorError(ValueError):
    """A selector the API server would refuse to parse."""


def qualified_name_problem(key: str) -> str | None:
    """Why `key` is not a qualified name (label or annotation key), or None when it is."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "prefix part " + _SUBDOMAIN_WHY
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _NAME.match(name):
        return "name part " + _NAME_WHY
    return None


def label_value_problem(value: str) -> str | None:
    """Why `value` is not a valid label value, or None when it is."""
    if len(value) > 63:
        return "must be no more than 63 characters"
    if value and not _NAME.match(value):
        return "a valid label must be an empty string or " + _NAME_WHY.removeprefix("must ")
    return None


# -- label selectors ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # exists, !exists, =, !=, in, notin, gt, lt
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key, "")
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        if not present:
            return False
        try:
            number = int(value)
        except ValueError:
            return False
        bound = int(self.values[0])
        return number > bound if self.op == "gt" else number < bound


@dataclasses.dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(req.matches(labels) for req in self.requirements)


_LABEL_TOKEN = re.compile(r"\s*(!=|==|=|!|\(|\)|,|>|<|[^\s!=(),<>]+)")


def _tokens(text: str) -> list[str]:
    tokens: list[str] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _LABEL_TOKEN.match(text, pos)
        if match is None:  # pragma: no cover - the pattern matches any non-space character
            raise SelectorError(f"unable to parse requirement: {text!r}")
        tokens.append(match.group(1))
        pos = match.end()
    return tokens


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse a `labelSelector` query value; empty selects everything."""
    if not text or not text.strip():
        return LabelSelector()
    tokens = _tokens(text)
    pos = 0
    reqs: list[Requirement] = []

    def fail(why: str) -> SelectorError:
        return SelectorError(f"unable to parse requirement: {why}")

    def key_at(index: int) -> str:
        if index >= len(tokens) or tokens[index] in ("!=", "==", "=", "!", "(", ")", ",", ">", "<"):
            raise fail(
                f"found '{tokens[index] if index < len(tokens) else ''}', expected: identifier"
            )
        key = tokens[index]
        problem = qualified_name_problem(key)
        if problem is not None:
            raise fail(f'invalid label key "{key}": {problem}')
        return key

    def value_ok(value: str) -> str:
        problem = label_value_problem(value)
        if problem is not None:
            raise fail(f'invalid label value: "{value}": {problem}')
        return value

    while pos < len(tokens):
        if tokens[pos] == "!":
            reqs.append(Requirement(key_at(pos + 1), "!exists"))
            pos += 2
        else:
            key = key_at(pos)
            pos += 1
            op = tokens[pos] if pos < len(tokens) else ","
            if op == ",":
                reqs.append(Requirement(key, "exists"))
            elif op in ("=", "==", "!="):
                pos += 1
                value = ""
                if pos < len(tokens) and tokens[pos] != ",":
                    value = tokens[pos]
                    pos += 1
                reqs.append(Requirement(key, "!=" if op == "!=" else "=", (value_ok(value),)))
            elif op in (">", "<"):
                pos += 1
                if pos >= len(tokens) or not re.fullmatch(r"-?\d+", tokens[pos]):
                    raise fail(f"for 'Gt', 'Lt' operators, the value must be an integer: {text}")
                reqs.append(Requirement(key, "gt" if op == ">" else "lt", (tokens[pos],)))
                pos += 1
            elif op in ("in", "notin"):
                pos += 1
                if pos >= len(tokens) or tokens[pos] != "(":
                    raise fail(f"found '{tokens[pos] if pos < len(tokens) else ''}', expected: '('")
                pos += 1
                values: list[str] = []
                expect_value = True
                while pos < len(tokens) and tokens[pos] != ")":
                    token = tokens[pos]
                    if token == ",":
                        if expect_value:
                            values.append("")
                        expect_value = True
                    else:
                        values.append(value_ok(token))
                        expect_value = False
                    pos += 1
                if pos >= len(tokens):
                    raise fail("found '', expected: ')'")
                pos += 1
                if not values:
                    raise fail("for 'in', 'notin' operators, values set can't be empty")
                reqs.append(Requirement(key, op, tuple(values)))
            else:
                raise fail(f"found '{op}', expected: in, notin, =, ==, !=, gt, lt")
        if pos < len(tokens):
            if tokens[pos] != ",":
                raise fail(f"found '{tokens[pos]}', expected: ','")
            pos += 1
            if pos >= len(tokens):
                raise fail("found '', expected: identifier")
    return LabelSelector(tuple(reqs))


def match_label_selector_object(selector: Mapping[str, object], labels: Mapping[str, str]) -> bool:
    """Match a structured `LabelSelector` (matchLabels/matchExpressions) object."""
    match_labels = selector.get("matchLabels") or {}
    assert isinstance(match_labels, Mapping)
    if any(labels.get(k) != v for k, v in match_labels.items()):
        return False
    expressions = selector.get("matchExpressions") or []
    assert isinstance(expressions, list)
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}
    for expr in expressions:
        req = Requirement(expr["key"], ops[expr["operator"]], tuple(expr.get("values") or ()))
        if not req.matches(labels):
            return False
    return True


# -- field selectors ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FieldTerm:
    field: str
    op: str  # = or !=
    value: str


@dataclasses.dataclass(frozen=True)
class FieldSelector:
    terms: tuple[FieldTerm, ...] = ()

    def fields(self) -> set[str]:
        return {term.field for term in self.terms}

    def matches(self, values: Callable[[str], str]) -> bool:
        for term in self.terms:
            equal = values(term.field) == term.value
            if equal != (term.op == "="):
                return False
        return True


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    escaped = False
    for char in text:
        if escaped:
            current.append("\\" + char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if escaped:
        current.append("\\")
    parts.append("".join(current))
    return parts


def _unescape(text: str) -> str:
    out: list[str] = []
    escaped = False
    for char in text:
        if escaped:
            if char not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence: \\{char}")
            out.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in ",=":
            raise SelectorError(f"invalid field selector: unescaped {char!r} in value")
        else:
            out.append(char)
    if escaped:
        raise SelectorError("invalid field selector: unterminated escape sequence")
    return "".join(out)


def parse_field_selector(text: str | None) -> FieldSelector:
    """Parse a `fieldSelector` query value; empty selects everything."""
    if not text:
        return FieldSelector()
    terms: list[FieldTerm] = []
    for part in _split_unescaped(text, ","):
        if not part:
            continue
        found = _split_term(part)
        if found is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
        field, op, value = found
        terms.append(FieldTerm(field, "!=" if op == "!=" else "=", _unescape(value)))
    return FieldSelector(tuple(terms))


def _split_term(term: str) -> tuple[str, str, str] | None:
    """Split at the first unescaped operator, trying `!=`, `==`, `=` at each position."""
    index = 0
    while index < len(term):
        if term[index] == "\\":
            index += 2
            continue
        for op in ("!=", "==", "="):
            if term.startswith(op, index):
                return term[:index], op, term[index + len(op) :]
        index += 1
    return None
