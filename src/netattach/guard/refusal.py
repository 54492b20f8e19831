"""What the guard says when it refuses: a `Refusal`, and how a key's path and a value are
written in one. Every rule of the package (`check`, `node_rules`, `effects`, `node_guard`'s
claims) builds its refusals from these, so a refusal reads the same whichever rule made it.

    Refusal(key, value, rule, why)   "plugins[1].master "eth0" is not allowed by delegatePolicy..."
    join(path, key)                  the path of `key` inside the object at `path`
    show(value)                      a value as JSON, cut when long
"""

from __future__ import annotations

import json

from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

NOT_ALLOWED: Final = "is not allowed by"
_SHOW: Final = 256  # a path may be long; a hostile value is still cut


# A NamedTuple, not a frozen dataclass: the thin plugin imports this module at every ADD of a NAD
# (the policy is on by default), and a dataclass costs ~0.5 ms to create (it compiles each of its
# methods) and `import dataclasses` ~7 ms; a NamedTuple a fifth of the first.
class Refusal(NamedTuple):
    """One thing a config may not do: `key` is its path in the config (`plugins[1].master`),
    `value` the value as JSON, `rule` the settings list that refused it, with its entries."""

    key: str
    value: str
    rule: str
    why: str = NOT_ALLOWED

    def __str__(self) -> str:
        return f"{self.key} {self.value} {self.why} {self.rule}".rstrip()


def join(path: str, key: str) -> str:
    """The path of `key` in the object at `path` ("" for the config itself)."""
    return f"{path}.{key}" if path else key


def show(value: object) -> str:
    """`value` as JSON for a refusal, cut when long."""
    try:
        shown = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        shown = repr(value)
    return shown if len(shown) <= _SHOW else shown[:_SHOW] + "..."
