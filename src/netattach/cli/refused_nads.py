"""The NADs of a cluster view that the delegate policy would refuse (SEC-DELEGATE), for
`netattach status`: reported before any pod selects one, as the daemon would refuse it at ADD.

One problem line per NAD: `NetworkAttachmentDefinition ns/name: refused by the delegate policy:
<key> <value> is not allowed by <rule>; ...`. A NAD that does not resolve (bad spec.config, no
file on disk) is left to the problems that already say so.
"""

from pathlib import Path

from netattach.attach import delegate_rules
from netattach.cluster import model, store
from netattach.cni import errors
from netattach.daemon import delegate_guard, plan


def refused_nads(
    view: store.ClusterStore,
    policy: delegate_rules.DelegatePolicy,
    networks_dir: Path,
    *,
    namespace: str = "",
) -> list[str]:
    """A problem per NAD of the view (of `namespace`, when given) that `policy` refuses."""
    if not policy.enabled:
        return []
    problems: list[str] = []
    nads = sorted(view.objects(model.NAD), key=lambda n: (model.namespace_of(n), model.name_of(n)))
    for nad in nads:
        ns, name = model.namespace_of(nad), model.name_of(nad)
        if namespace and ns != namespace:
            continue
        try:
            found = plan.resolve_nad(view, ns, name, networks_dir)
        except errors.CNIError:
            continue
        reference = f"{ns}/{name}"
        refusals = delegate_guard.check_nad(reference, found.network.raw, policy, view)
        if refusals:
            details = "; ".join(str(r) for r in refusals)
            problems.append(f"{model.NAD} {reference}: refused by the delegate policy: {details}")
    return problems
