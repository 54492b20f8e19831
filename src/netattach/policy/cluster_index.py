"""The cluster as compile reads it: its pods, namespaces and policies, and the indexes over them.

Every index here is derived from the three inputs and changed only by the method that changes
its input, so that they always agree:

    pods        key -> view; namespace -> label id -> pods (`_buckets`); namespace -> pod
                selector -> the pods it matches (`_matches`, dropped when one of the
                namespace's pods changes); network -> declared ports -> host -> how many pods
                declaring them hold it (`_declaring`)
    namespaces  name -> its interned labels, with the automatic name label
    policies    key -> policy; key -> its pod selector's id; namespace -> its policies, in key
                order

Label selectors are small ids (`Selectors`), each matched once per distinct label map.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from netattach.policy.model import NAMESPACE_NAME_LABEL, AddressRange, LabelSelector, Policy
from netattach.policy.named_ports import Declared
from netattach.policy.views import Interner, PodView

PolicyKey = tuple[str, str, str]  # namespace, name, uid
# (network, a pod's declared ports, host, whether pods declaring them hold it now): the first
# pod declaring those ports got the host, or the last one lost it
DeclaredChange = tuple[str, Declared, AddressRange, bool]


def policy_key(policy: Policy) -> PolicyKey:
    return policy.namespace, policy.name, policy.uid


class Selectors:
    """Label selectors as small ids, each matched once per distinct label map (by its id)."""

    def __init__(self) -> None:
        self._ids: dict[LabelSelector, int] = {}
        self._selectors: list[LabelSelector] = []
        self._memo: list[dict[int, bool]] = []

    def id(self, selector: LabelSelector) -> int:
        found = self._ids.get(selector)
        if found is None:
            found = self._ids[selector] = len(self._selectors)
            self._selectors.append(selector)
            self._memo.append({})
        return found

    def matches(self, sid: int, label_id: int, labels_: Mapping[str, str]) -> bool:
        memo = self._memo[sid]
        found = memo.get(label_id)
        if found is None:
            found = memo[label_id] = self._selectors[sid].matches(labels_)
        return found


@dataclass(frozen=True, slots=True)
class Peer:
    """A peer with its selectors as ids (None: that selector is absent)."""

    namespace_selector: int | None
    pod_selector: int | None
    block: tuple[AddressRange, ...] | None  # an ipBlock's addresses


@dataclass(frozen=True, slots=True)
class PodChange:
    """A pod went from `before` to `after` (None: absent), as the indexes now hold it."""

    before: PodView | None
    after: PodView | None
    relabel_only: bool  # the same addresses and ports: only its labels changed
    declared: list[DeclaredChange]  # in the order the hosts crossed


class ClusterIndex:
    """The pods, namespaces and policies compile reads, indexed (see the module docstring)."""

    def __init__(self, interner: Interner) -> None:
        self.interner = interner
        self.selectors = Selectors()
        self._pods: dict[str, PodView] = {}
        self._buckets: dict[str, dict[int, dict[str, PodView]]] = {}  # ns -> label id -> pods
        self._matches: dict[str, dict[int | None, list[PodView]]] = {}  # ns -> selector -> pods
        self._ns_labels: dict[str, tuple[int, Mapping[str, str]]] = {}
        # network -> a pod's declared ports -> host -> how many pods declaring them hold it
        self._declaring: dict[str, dict[Declared, dict[AddressRange, int]]] = {}
        self._policies: dict[PolicyKey, Policy] = {}
        self._policy_selector: dict[PolicyKey, int] = {}
        # namespace -> its policies, in key order (an edit then touches its own entries, not a
        # scan of every policy's)
        self._by_namespace: dict[str, dict[PolicyKey, Policy]] = {}

    # -- namespaces -----------------------------------------------------------------------------

    def namespace(self, name: str) -> tuple[int, Mapping[str, str]]:
        """A namespace's label id and labels (only the name label, for one not seen)."""
        found = self._ns_labels.get(name)
        if found is None:
            found = self.interner.labels({NAMESPACE_NAME_LABEL: name})
        return found

    def set_namespace(self, name: str, labels_: Mapping[str, str]) -> bool:
        """Whether the namespace's labels changed."""
        before = self.namespace(name)
        self._ns_labels[name] = self.interner.labels({NAMESPACE_NAME_LABEL: name, **labels_})
        return self._ns_labels[name][0] != before[0]

    def remove_namespace(self, name: str) -> bool:
        """Whether the namespace's labels changed (a namespace gone keeps its name label)."""
        before = self._ns_labels.pop(name, None)
        return before is not None and before[0] != self.namespace(name)[0]

    def namespaces(self) -> set[str]:
        return set(self._ns_labels)

    # -- pods -----------------------------------------------------------------------------------

    def pod(self, key: str) -> PodView | None:
        return self._pods.get(key)

    def pods(self) -> set[str]:
        return set(self._pods)

    def set_pod(self, view: PodView) -> PodChange | None:
        """The pod is `view` now: what changed (None: nothing)."""
        before = self._pods.get(view.key)
        if before is not None:
            if before == view:
                return None
            self._unbucket(before)
        self._pods[view.key] = view
        self._buckets.setdefault(view.namespace, {}).setdefault(view.label_id, {})[view.key] = view
        return self._pod_changed(before, view)

    def remove_pod(self, key: str) -> PodChange | None:
        """The pod is gone: what changed (None: it was not there)."""
        before = self._pods.pop(key, None)
        if before is None:
            return None
        self._unbucket(before)
        return self._pod_changed(before, None)

    def declaring(self, network: str) -> Mapping[Declared, Mapping[AddressRange, int]]:
        """Per declared ports, the hosts on `network` pods declaring them hold."""
        return self._declaring.get(network, {})

    def members(self, peers: Iterable[Peer], policy_ns: str) -> list[PodView]:
        """The pods the pod-selecting `peers` of a policy of `policy_ns` pick now."""
        out: list[PodView] = []
        selectors = [p for p in peers if p.block is None]
        for ns in self._buckets:
            ns_id, ns_labels = self.namespace(ns)
            in_scope = {
                p.pod_selector
                for p in selectors
                if (
                    ns == policy_ns
                    if p.namespace_selector is None
                    else self.selectors.matches(p.namespace_selector, ns_id, ns_labels)
                )
            }
            if None in in_scope:
                out.extend(self._matching(ns, None))
            elif len(in_scope) == 1:
                out.extend(self._matching(ns, in_scope.pop()))
            elif in_scope:
                found = {v.key: v for sid in in_scope for v in self._matching(ns, sid)}
                out.extend(found.values())
        return out

    def _matching(self, ns: str, sid: int | None) -> list[PodView]:
        """The pods of `ns` a pod selector (None: every pod) matches, kept until one of the
        namespace's pods changes."""
        per_ns = self._matches.setdefault(ns, {})
        found = per_ns.get(sid)
        if found is None:
            found = per_ns[sid] = [
                v
                for label_id, bucket in self._buckets.get(ns, {}).items()
                if sid is None
                or self.selectors.matches(sid, label_id, next(iter(bucket.values())).labels)
                for v in bucket.values()
            ]
        return found

    def _unbucket(self, view: PodView) -> None:
        buckets = self._buckets[view.namespace]
        bucket = buckets[view.label_id]
        del bucket[view.key]
        if not bucket:
            del buckets[view.label_id]
            if not buckets:
                del self._buckets[view.namespace]

    def _pod_changed(self, before: PodView | None, after: PodView | None) -> PodChange:
        for view in (before, after):
            if view is not None:
                self._matches.pop(view.namespace, None)
        relabel_only = (
            before is not None
            and after is not None
            and before.addresses == after.addresses
            and before.ports == after.ports
        )
        declared = [] if relabel_only else self._declared_changed(before, after)
        return PodChange(before, after, relabel_only, declared)

    def _declared_changed(
        self, before: PodView | None, after: PodView | None
    ) -> list[DeclaredChange]:
        """Keep the index of which hosts pods declaring each set of ports hold; the hosts
        the first pod declaring those ports got, or the last one lost."""
        out: list[DeclaredChange] = []
        for view, step in ((before, -1), (after, 1)):
            if view is None:
                continue
            for network, hosts in view.addresses.items():
                counts = self._declaring.setdefault(network, {}).setdefault(view.ports, {})
                for host in hosts:
                    count = counts.get(host, 0) + step
                    if count:
                        counts[host] = count
                    else:
                        del counts[host]
                    if count == (1 if step > 0 else 0):
                        out.append((network, view.ports, host, step > 0))
                if not counts:
                    del self._declaring[network][view.ports]
        return out

    # -- policies -------------------------------------------------------------------------------

    def policies(self) -> Mapping[PolicyKey, Policy]:
        return self._policies

    def set_policy(self, key: PolicyKey, policy: Policy | None) -> tuple[Policy | None, list[int]]:
        """The policy `key` is `policy` now (None: gone): the one it was, and the ids of the
        pod selectors of both (the pods whose rules it can change)."""
        before = self._policies.pop(key, None)
        selectors = [] if before is None else [self._policy_selector.pop(key)]
        ns = key[0]
        of_namespace = self._by_namespace.get(ns, {})
        of_namespace.pop(key, None)
        if policy is not None:
            self._policies[key] = policy
            of_namespace[key] = policy
            self._policy_selector[key] = self.selectors.id(policy.pod_selector)
            selectors.append(self._policy_selector[key])
        self._by_namespace[ns] = dict(sorted(of_namespace.items()))
        return before, selectors

    def selecting(self, target: PodView) -> list[Policy]:
        """The policies of the target's namespace that select it, in key order."""
        return [
            p
            for p in self._by_namespace.get(target.namespace, {}).values()
            if self.selectors.matches(
                self._policy_selector[(p.namespace, p.name, p.uid)],
                target.label_id,
                target.labels,
            )
        ]
