"""The delegate policy's verdict on one config, as the pure checks test it: the rules a
`delegatePolicy` section's lists write, and what they refuse."""

from __future__ import annotations

from typing import Any

from netattach.guard import check, delegate_policy
from tests.builders import delegate_policy_of


def rules(**lists: Any) -> delegate_policy.DelegateRules:
    """The cluster-wide rules of a delegate policy written as `lists`; it must be valid."""
    return delegate_policy_of(lists).rules


def refusals(config: object, **lists: Any) -> list[str]:
    """What the rules `lists` write refuse in `config`, each as its message; [] when allowed."""
    assert isinstance(config, dict)
    return [str(r) for r in check.check_config(config, rules(**lists))]
