"""What the settings say of policy: MultiNetworkPolicy enforcement, and the delegate policy.

policy.enabled   MultiNetworkPolicy on the pods the daemon attaches (POL-*)
delegatePolicy   SEC-DELEGATE: what the NADs of a namespace may make netattach run; its
                 rules are guard/delegate_policy.py's, and netattach's own directories (as
                 these settings place them) are always protected (SEC-NODE)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from netattach.guard import delegate_policy
from netattach.settings import fields
from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

_POLICY_KEYS: Final = ("enabled",)


class PolicySettings(NamedTuple):
    """MultiNetworkPolicy enforcement on the pods the daemon attaches (issue POL-*).

    Enabled, the Kubernetes feed watches every pod of the cluster (trimmed), not only this
    node's: a policy's peers may run anywhere.
    """

    enabled: bool = True


def section(value: object, key: str, problems: list[str]) -> PolicySettings | None:
    """The `policy` section."""
    enabled = fields.switch(value, key, _POLICY_KEYS, problems)
    return None if enabled is None else PolicySettings(enabled=enabled)


def protected(
    policy: delegate_policy.DelegatePolicy | None, own_dirs: Sequence[Path]
) -> delegate_policy.DelegatePolicy:
    """The delegate policy in force: as written (or the default), with netattach's directories
    `own_dirs` protected from every delegate (SEC-NODE)."""
    chosen = delegate_policy.DEFAULT_POLICY if policy is None else policy
    return chosen.with_protected(tuple(str(d) for d in own_dirs))
