"""Policies -> a rule IR per pod and interface (POL-SELECT, POL-PEERS, POL-PORTS, POL-IPBLOCK).

Pure: the inputs are the cluster's objects, the output is data. One allow rule per policy rule
(split only when a named port resolves differently for different destination pods), with its
peers as an address set and its ports as a port set, so the rule count never grows with
peers x ports (POL-COMPACT).

`Compiler` keeps the cluster between compiles and recompiles only what a change touches: a pod,
namespace or policy changed marks the peer selections it can enter or leave and the targets
(local pods) it can select; `compile_changed` recompiles those targets alone, with every other
selection's addresses reused. `compile_pods` is the same compiler built from scratch.

`Compiler` is the front of four parts, each its own module:

    cluster_index  the pods, namespaces and policies, and the indexes over them
    peers          each selection's members, addresses and named-port destinations
    named_ports    a rule's ports resolved against the ports a destination declares
    targets        each target's rules: compiled whole, then patched in place
    (ir            the rules they make)

A change goes in at the top and down: the cluster index says what changed about a pod, the
peers which selections moved, the targets which rules to patch or compile again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from netattach.cluster.model import KubeObject, labels, name_of
from netattach.policy.cluster_index import ClusterIndex, PolicyKey, policy_key
from netattach.policy.ir import PodRules
from netattach.policy.model import NAMESPACE_NAME_LABEL, Policy
from netattach.policy.peers import Peers
from netattach.policy.targets import Targets
from netattach.policy.views import Interner, PodView, ViewCache, build_view, pod_key

__all__ = ["Compiler", "compile_pod", "compile_pods", "namespace_labels"]


def namespace_labels(namespaces: Iterable[KubeObject]) -> dict[str, dict[str, str]]:
    """Namespace name -> labels, with the automatic `kubernetes.io/metadata.name` label."""
    out: dict[str, dict[str, str]] = {}
    for ns in namespaces:
        out[name_of(ns)] = {NAMESPACE_NAME_LABEL: name_of(ns), **labels(ns)}
    return out


class Compiler:
    """The cluster as compile reads it, and the rules of each target, kept up to date.

    Feed it with `set_*`/`remove_*` (pods are every pod of the cluster, as peers; targets are
    the pods whose rules are wanted, with their own view of their interfaces); then
    `compile_changed` recompiles exactly the targets some change can have touched. Peer
    selections are resolved lazily, once, for the targets that use them.
    """

    def __init__(self, interner: Interner | None = None) -> None:
        self.interner = interner or Interner()
        self._index = ClusterIndex(self.interner)
        self._peers = Peers(self._index)
        self._targets = Targets(self._index, self._peers)

    # -- inputs ---------------------------------------------------------------------------------

    def view(self, pod: KubeObject) -> PodView:
        return build_view(pod, self.interner)

    def set_namespace(self, name: str, labels_: Mapping[str, str]) -> None:
        if self._index.set_namespace(name, labels_):
            self._targets.dirty(self._peers.namespace_changed())

    def remove_namespace(self, name: str) -> None:
        if self._index.remove_namespace(name):
            self._targets.dirty(self._peers.namespace_changed())

    def set_pod(self, view: PodView) -> None:
        change = self._index.set_pod(view)
        if change is not None:
            self._peers.pod_changed(change)

    def remove_pod(self, key: str) -> None:
        change = self._index.remove_pod(key)
        if change is not None:
            self._peers.pod_changed(change)

    def set_policies(self, policies: Iterable[Policy]) -> None:
        """The cluster's valid policies now: only those added, changed or gone count."""
        fresh = {policy_key(p): p for p in policies}
        current = self._index.policies()
        for key in [k for k in current if k not in fresh]:
            self._set_policy(key, None)
        for key, policy in fresh.items():
            before = current.get(key)
            if before is not policy and before != policy:
                self._set_policy(key, policy)

    def set_target(self, view: PodView) -> None:
        self._targets.set_target(view)

    def remove_target(self, key: str) -> None:
        self._targets.remove_target(key)

    def targets(self) -> list[str]:
        return self._targets.keys()

    def pods(self) -> set[str]:
        return self._index.pods()

    def namespaces(self) -> set[str]:
        return self._index.namespaces()

    # -- outputs --------------------------------------------------------------------------------

    def compile_changed(self) -> dict[str, PodRules]:
        """Recompile every target a change since the last call can have touched (patch, when
        only the addresses of selections it uses changed)."""
        return self._targets.compile_changed()

    def rules(self, key: str) -> PodRules:
        return self._targets.rules(key)

    def _set_policy(self, key: PolicyKey, policy: Policy | None) -> None:
        before, selectors = self._index.set_policy(key, policy)
        self._peers.forget_rules(key)
        self._targets.policy_changed(key, before, policy, selectors)


def compile_pod(
    pod: KubeObject,
    namespaces: Sequence[KubeObject],
    pods: Sequence[KubeObject],
    policies: Sequence[Policy],
) -> PodRules:
    """The rules of every interface of `pod` whose network some policy selecting it governs.

    An empty result means the pod is untouched (POL-SELECT).
    """
    return compile_pods([pod], namespaces, pods, policies)[pod_key(pod)]


def compile_pods(
    targets: Iterable[KubeObject],
    namespaces: Sequence[KubeObject],
    pods: Sequence[KubeObject],
    policies: Sequence[Policy],
    *,
    cache: ViewCache | None = None,
) -> dict[str, PodRules]:
    """`compile_pod` for each of `targets` ("ns/name" -> rules), from scratch.

    `cache`: reuse the pod views of an earlier compile."""
    targets = list(targets)
    compiler = Compiler(cache.interner if cache is not None else None)
    views = cache.views(pods) if cache is not None else [compiler.view(p) for p in pods]
    for ns in namespaces:
        compiler.set_namespace(name_of(ns), labels(ns))
    for view in views:
        compiler.set_pod(view)
    compiler.set_policies(policies)
    seen = {id(pod): view for pod, view in zip(pods, views, strict=True)}  # a target is a peer too
    for pod in targets:
        compiler.set_target(seen.get(id(pod)) or compiler.view(pod))
    compiler.compile_changed()
    return {pod_key(pod): compiler.rules(pod_key(pod)) for pod in targets}
