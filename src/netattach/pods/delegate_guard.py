"""The delegate policy at ADD: a plan's NADs checked before any of its plugins runs (SEC-DELEGATE).

The orchestrator calls `check_plan` once a pod's plan (or a hot-plug's additions) stands and
before anything is recorded or run, so a refused attachment leaves nothing behind. The cluster
default network is the operator's own and is never checked; the NAD a pod names in its place
(`v1.multus-cni.io/default-network`, DEV-DEFAULT) is a NAD author's and is. A NAD is judged by
the lists of *its* namespace (the namespace whose NAD authors wrote it, as admission judges it),
whichever pod uses it.

    DelegateRefusedError (7)   names the NAD, then each refused key, value and rule

`refused_nads` lists the NADs of a view the policy refuses, for `netattach status`: before any
pod selects one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from netattach.cluster import model, store
from netattach.cni import errors
from netattach.guard import delegate_policy, refusal
from netattach.pods import plan as plan_mod

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol, TypeGuard

    class NamespaceLookup(Protocol):
        def lookup_namespace(self, name: str) -> model.KubeObject | None: ...


class DelegateRefusedError(errors.InvalidNetworkConfigError):
    """A NAD's config does what the delegate policy does not allow (CNI code 7)."""

    # What an operator filters on.
    event_reason = "NetworkAttachmentRefused"


def _looks_up_namespaces(view: object) -> TypeGuard[NamespaceLookup]:
    return callable(getattr(view, "lookup_namespace", None))


def namespace_labels(view: object, namespace: str) -> Mapping[str, str]:
    """The labels of `namespace` as the view holds it; none when it is not known."""
    if not _looks_up_namespaces(view):
        return {}
    found = view.lookup_namespace(namespace)
    return model.labels(found) if found is not None else {}


def check_nad(
    reference: str,
    raw: Mapping[str, object],
    policy: delegate_policy.DelegatePolicy,
    view: object,
    resource: str = "",
) -> list[refusal.Refusal]:
    """Every refusal of the NAD `namespace/name`: of its config `raw`, and of the device
    resource its `resourceName` annotation names (DEV-RESOURCE; "" for none)."""
    if not policy.enabled:
        return []
    # Imported only with a policy to check: every ADD of the thin plugin would pay for it.
    from netattach.guard import check

    namespace = reference.partition("/")[0]
    rules = policy.rules_for(namespace, namespace_labels(view, namespace))
    refusals = check.check_config(raw, rules, policy.protected)
    if resource and not rules.resource_name.allows(resource):
        rule = f"{rules.source}.resourceName {rules.resource_name}"
        refusals.append(refusal.Refusal(key="resourceName", value=repr(resource), rule=rule))
    return refusals


def refused(reference: str, refusals: Sequence[refusal.Refusal]) -> DelegateRefusedError:
    more = f" (and {len(refusals) - 1} more)" if len(refusals) > 1 else ""
    return DelegateRefusedError(
        f"NetworkAttachmentDefinition {reference} refused by the delegate policy: "
        f"{refusals[0]}{more}",
        "; ".join(str(r) for r in refusals),
    )


def check_plan(
    plan: Sequence[plan_mod.PlannedAttachment],
    policy: delegate_policy.DelegatePolicy,
    view: object,
) -> None:
    """Raise `DelegateRefusedError` for the first attachment of `plan` the policy refuses."""
    for planned in plan:
        if planned.is_default and not planned.pod_default:
            continue  # the operator's own network
        # Standard §4.1.1: a selected network (and a pod's default-network NAD) is named
        # `namespace/name`.
        refusals = check_nad(
            planned.status_name, planned.network.raw, policy, view, planned.resource
        )
        if refusals:
            raise refused(planned.status_name, refusals)


def refused_nads(
    view: store.ClusterStore,
    policy: delegate_policy.DelegatePolicy,
    networks_dir: Path,
    *,
    namespace: str = "",
) -> list[str]:
    """A problem line per NAD of `view` (of `namespace`, when given) that `policy` refuses:
    `NetworkAttachmentDefinition ns/name: refused by the delegate policy: <refusals>`. A NAD that
    does not resolve is left to the problems that already say so."""
    if not policy.enabled:
        return []
    problems: list[str] = []
    nads = sorted(view.objects(model.NAD), key=lambda n: (model.namespace_of(n), model.name_of(n)))
    for nad in nads:
        ns, name = model.namespace_of(nad), model.name_of(nad)
        if namespace and ns != namespace:
            continue
        try:
            found = plan_mod.delegate_of(nad, ns, name, networks_dir)
        except errors.CNIError:
            continue
        resource = plan_mod.resource_of(nad)
        refusals = check_nad(f"{ns}/{name}", found.network.raw, policy, view, resource)
        if refusals:
            details = "; ".join(str(r) for r in refusals)
            problems.append(f"{model.NAD} {ns}/{name}: refused by the delegate policy: {details}")
    return problems
