"""What the settings say of policy: MultiNetworkPolicy enforcement, and the delegate policy.

policy.enabled   MultiNetworkPolicy on the pods the daemon attaches (POL-*)
policy.peers     where the Kubernetes feed reads the policies' peers from (POL-SPAN):
                 "allPods", every pod of the cluster, watched by each node (small clusters);
                 "controller", the peer groups the policy controller publishes, only those
                 this node's pods' policies name
policy.unpublishedGroups
                 with "controller", a pod whose policies name a group still unpublished after
                 the wait (the controller down): "failClosed", its table allows none of that
                 group's pods; "failOpen", it has no table (all allowed) until the group comes
delegatePolicy   SEC-DELEGATE: what the NADs of a namespace may make netattach run; its
                 rules are guard/delegate_policy.py's, and netattach's own directories (as
                 these settings place them) are always protected (SEC-NODE)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from netattach.guard import delegate_policy
from netattach.settings import fields
from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

_POLICY_KEYS: Final = ("enabled", "peers", "unpublishedGroups")
ALL_PODS: Final = "allPods"
CONTROLLER: Final = "controller"
FAIL_CLOSED: Final = "failClosed"
FAIL_OPEN: Final = "failOpen"


class PolicySettings(NamedTuple):
    """MultiNetworkPolicy enforcement on the pods the daemon attaches (issue POL-*).

    Enabled, the Kubernetes feed reads the pods a policy's peers may pick anywhere in the
    cluster: every pod (`peers` ALL_PODS) or the groups the policy controller publishes
    (CONTROLLER, POL-SPAN).
    """

    enabled: bool = True
    peers: str = "allPods"
    unpublished_groups: str = "failClosed"  # POL-CTRL: FAIL_CLOSED or FAIL_OPEN


def section(value: object, key: str, problems: list[str]) -> PolicySettings | None:
    """The `policy` section."""
    enabled = fields.switch(value, key, _POLICY_KEYS, problems)
    if enabled is None:
        return None
    peers = value.get("peers", ALL_PODS) if isinstance(value, Mapping) else ALL_PODS
    if peers not in (ALL_PODS, CONTROLLER):
        problems.append(
            f"{key}.peers: must be {ALL_PODS!r} or {CONTROLLER!r}, got {fields.show(peers)}"
        )
        return None
    unpublished = (
        value.get("unpublishedGroups", FAIL_CLOSED) if isinstance(value, Mapping) else FAIL_CLOSED
    )
    if unpublished not in (FAIL_CLOSED, FAIL_OPEN):
        problems.append(
            f"{key}.unpublishedGroups: must be {FAIL_CLOSED!r} or {FAIL_OPEN!r}, "
            f"got {fields.show(unpublished)}"
        )
        return None
    return PolicySettings(enabled=enabled, peers=peers, unpublished_groups=unpublished)


def protected(
    policy: delegate_policy.DelegatePolicy | None, own_dirs: Sequence[Path]
) -> delegate_policy.DelegatePolicy:
    """The delegate policy in force: as written (or the default), with netattach's directories
    `own_dirs` protected from every delegate (SEC-NODE)."""
    chosen = delegate_policy.DEFAULT_POLICY if policy is None else policy
    return chosen.with_protected(tuple(str(d) for d in own_dirs))
