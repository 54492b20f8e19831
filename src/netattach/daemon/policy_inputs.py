"""The compiler's inputs: the cluster view and the node's pods, told to the compiler as they change.

The compiler (`policy.compile.Compiler`) exists while some valid policy does (the book's,
`policy_book`); without one nothing is governed and not even pods are read. It is told:

    policies     the book's, in force, whenever one was observed changing
    namespaces   those observed changing since the last pass (every one after a relist)
    pods         as peers: those observed changing, each with its network-status (the pod
                 record's for a pod attached here, else its annotation, else, on the directory
                 feed, its status file); with `span`, the view holds this node's pods only and
                 the others come from the policy controller's peer groups in the view
                 (`SpanMembers`, POL-SPAN)
    targets      the local pods (those of this node's records the view holds), with the
                 secondary interfaces this node attached: their rules are wanted

A resync (start, relist, the first policy) tells it every object again. What it compiled anew
since the last pass is kept until applied (`take_unapplied`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence

from netattach.cluster import model, store
from netattach.cni import errors
from netattach.daemon.policy_book import PolicyBook
from netattach.pods import records as records_mod
from netattach.policy import compile, span, views

StatusEntries = Callable[[records_mod.PodRecord], list[dict[str, object]]]


class CompilerInputs:
    """The compiler, and the changes observed that it has not been told yet."""

    def __init__(
        self,
        *,
        view: store.ClusterStore,
        book: PolicyBook,
        status_entries: StatusEntries,
        status_file: Callable[[str, str], list[dict[str, object]] | None] | None,
        forget_rendered: Callable[[str | None], None],  # a target gone (None: every one)
        span: bool = False,
    ) -> None:
        self._view = view
        self._span = SpanMembers(view) if span else None
        self._pending_groups = False
        self._book = book
        self._status_entries = status_entries
        self._status_file = status_file
        self._forget_rendered = forget_rendered
        # The incremental compiler, while some valid policy exists (None: nothing is governed,
        # and pods are not even read).
        self._compiler: compile.Compiler | None = None
        self._pending_pods: set[tuple[str, str]] = set()
        self._pending_namespaces: set[str] = set()
        self._pending_policies = True
        self._resync = True  # every object to be read again (start, relist)
        self._targets: dict[str, tuple[object, object]] = {}  # pod key -> (pod, record) seen
        self._unapplied: set[str] = set()  # pod keys compiled anew, not applied yet

    def observe(self, kind: str, namespace: str, name: str) -> bool:
        """One object of the view changed: whether policy reads it (a pass should follow)."""
        # One change at a time matters only to a compiler that is up to date: without one, or
        # with a resync due, every object is read anyway and `update` drops the pending ones
        # unread (a list of thousands of pods would make a set of them all).
        pending = self._compiler is not None and not self._resync
        if kind == model.POD:
            if pending:
                self._pending_pods.add((namespace, name))
        elif kind == model.NAMESPACE:
            if pending:
                self._pending_namespaces.add(name)
        elif kind == model.POLICY:
            self._pending_policies = True
            self._book.changed(namespace, name)
        elif kind == model.PEER_GROUP:
            if self._span is None:
                return False
            self._pending_groups = self._pending_groups or pending
        elif not kind:
            self.resync()
        else:
            return False  # a NAD: policy does not read it
        return True

    def resync(self) -> None:
        """Every object is told again next time (start, relist)."""
        self._resync = self._pending_policies = True
        self._book.read_all()

    def is_target(self, key: str) -> bool:
        return key in self._targets

    def nothing_governed(self) -> bool:
        """True when the last look at the policies found no valid one and none changed since
        (a pass or an ADD with a policy to enforce looks again)."""
        return self._compiler is None and not self._pending_policies

    def take_unapplied(self) -> set[str]:
        """The pods compiled anew since this was last asked."""
        unapplied, self._unapplied = self._unapplied, set()
        return unapplied

    def applied(self, key: str) -> None:
        """The pod's rules, compiled anew, were applied."""
        self._unapplied.discard(key)

    def update(
        self, local: Sequence[tuple[records_mod.PodRecord, model.KubeObject]]
    ) -> compile.Compiler | None:
        """Bring the compiler up to date with every change observed, and compile what they
        touched; None when no valid policy exists (nothing is governed)."""
        if self._pending_policies or self._compiler is None:
            self._pending_policies = False
            policies = self._book.policies()
            if not policies:
                # Nothing to compile, so nothing to catch up on: a first policy makes a new
                # compiler, which reads every object again (_resync).
                self._compiler = None
                self._targets.clear()
                self._forget_rendered(None)
                self._unapplied.clear()
                self._pending_pods.clear()
                self._pending_namespaces.clear()
                self._resync = False
                return None
            if self._compiler is None:
                self._compiler = compile.Compiler()
                self._resync = True
            self._compiler.set_policies(policies)
        compiler = self._compiler
        by_pod = {(r.namespace, r.pod): r for r, _ in reversed(local)}
        if self._resync:
            self._resync = False
            self._pending_pods.clear()
            self._pending_namespaces.clear()
            self._pending_groups = False
            self._full_sync(compiler, by_pod)
        else:
            for name in self._pending_namespaces:
                ns = self._view.lookup_namespace(name)
                if ns is None:
                    compiler.remove_namespace(name)
                else:
                    compiler.set_namespace(name, model.labels(ns))
            self._pending_namespaces.clear()
            if self._pending_groups and self._span is not None:
                self._pending_pods |= self._span.refresh()
            self._pending_groups = False
            for ns_name, name in self._pending_pods:
                self._set_peer(compiler, ns_name, name, by_pod)
            self._pending_pods.clear()
        self._set_targets(compiler, local, by_pod)
        self._compile(compiler)
        return compiler

    def _compile(self, compiler: compile.Compiler) -> None:
        self._unapplied |= set(compiler.compile_changed())

    def _full_sync(
        self,
        compiler: compile.Compiler,
        by_pod: Mapping[tuple[str, str], records_mod.PodRecord],
    ) -> None:
        names = set()
        for ns in self._view.objects(model.NAMESPACE):
            names.add(model.name_of(ns))
            compiler.set_namespace(model.name_of(ns), model.labels(ns))
        for gone in compiler.namespaces() - names:
            compiler.remove_namespace(gone)
        keys = set()
        if self._span is not None:
            self._span.refresh()
        for pod in self.peer_objects():
            keys.add(views.pod_key(pod))
            compiler.set_pod(compiler.view(self.peer(pod, by_pod)))
        for gone in compiler.pods() - keys:
            compiler.remove_pod(gone)

    def peer_objects(self) -> list[model.KubeObject]:
        """Every pod a peer may be: the view's, and with `span` the groups' members (the
        view's own pods first)."""
        pods = self._view.objects(model.POD)
        if self._span is None:
            return pods
        held = {views.pod_key(pod) for pod in pods}
        return pods + [p for k, p in self._span.members().items() if k not in held]

    def _lookup_peer(self, namespace: str, name: str) -> model.KubeObject | None:
        pod = self._view.lookup_pod(namespace, name)
        if pod is None and self._span is not None:
            pod = self._span.member(f"{namespace}/{name}")
        return pod

    def _set_peer(
        self,
        compiler: compile.Compiler,
        namespace: str,
        name: str,
        by_pod: Mapping[tuple[str, str], records_mod.PodRecord],
    ) -> None:
        pod = self._lookup_peer(namespace, name)
        if pod is None:
            compiler.remove_pod(f"{namespace}/{name}")
        else:
            compiler.set_pod(compiler.view(self.peer(pod, by_pod)))

    def _set_targets(
        self,
        compiler: compile.Compiler,
        local: Sequence[tuple[records_mod.PodRecord, model.KubeObject]],
        by_pod: Mapping[tuple[str, str], records_mod.PodRecord],
    ) -> None:
        """The local pods as targets (and as peers, with the addresses their records hold);
        a pod and record seen before, the same objects, are not read again."""
        seen: set[str] = set()
        for first, pod in local:
            key = views.pod_key(pod)
            if key in seen:
                continue
            seen.add(key)
            record = by_pod.get((first.namespace, first.pod), first)
            if self._targets.get(key) == (pod, record):
                continue
            self._targets[key] = (pod, record)
            compiler.set_pod(compiler.view(self._with_status(pod, self._entries(record))))
            compiler.set_target(compiler.view(self.target(pod, record)))
        for gone in set(self._targets) - seen:
            del self._targets[gone]
            self._forget_rendered(gone)
            compiler.remove_target(gone)
            namespace, name = gone.split("/", 1)
            self._set_peer(compiler, namespace, name, by_pod)

    def _entries(self, record: records_mod.PodRecord) -> list[dict[str, object]]:
        return self._status_entries(record)

    def _with_status(
        self, pod: model.KubeObject, entries: Sequence[Mapping[str, object]]
    ) -> model.KubeObject:
        meta = model.ObjectMeta(**model.meta(pod))
        meta["annotations"] = {
            **(meta.get("annotations") or {}),
            model.STATUS_ANNOTATION: json.dumps(list(entries)),
        }
        out = model.KubeObject(**pod)
        out["metadata"] = meta
        return out

    def target(self, pod: model.KubeObject, record: records_mod.PodRecord) -> model.KubeObject:
        """The pod as compile sees it: its secondary interfaces as this node attached them.
        The default network's interface is never governed."""
        entries = [e for e in self._entries(record) if not e.get("default")]
        return self._with_status(pod, entries)

    def peer(
        self,
        pod: model.KubeObject,
        by_pod: Mapping[tuple[str, str], records_mod.PodRecord],
    ) -> model.KubeObject:
        """A pod of the view with its network-status: the record's for a pod attached here,
        else the annotation, else (directory feed) the pod's status file."""
        key = (model.namespace_of(pod), model.name_of(pod))
        found = by_pod.get(key)
        uid = model.uid_of(pod)
        if found is not None and (not found.uid or not uid or found.uid == uid):
            return self._with_status(pod, self._entries(found))
        if model.annotation(pod, model.STATUS_ANNOTATION) is None and self._status_file:
            entries = self._read_status_file(*key)
            return pod if entries is None else self._with_status(pod, entries)
        return pod

    def _read_status_file(self, namespace: str, name: str) -> list[dict[str, object]] | None:
        assert self._status_file is not None
        try:
            return self._status_file(namespace, name)
        except errors.CNIError:
            return None


class SpanMembers:
    """The pods of the peer groups the view holds (POL-SPAN): each group's shards read once
    per version, a pod held by several shards or groups counted once."""

    def __init__(self, view: store.ClusterStore) -> None:
        self._view = view
        self._read: dict[str, tuple[model.KubeObject, dict[str, model.KubeObject]]] = {}
        self._holders: dict[str, set[str]] = {}  # pod key -> the objects holding it
        self._pods: dict[str, model.KubeObject] = {}

    def members(self) -> dict[str, model.KubeObject]:
        return self._pods

    def member(self, key: str) -> model.KubeObject | None:
        return self._pods.get(key)

    def refresh(self) -> set[tuple[str, str]]:
        """Read the group objects changed since the last call: the pods whose member entry
        changed, came or went (a shard rewritten for one pod's change, or a group written
        again in more shards, tells of the pods whose entry is not what it was only)."""
        current = {model.name_of(obj): obj for obj in self._view.objects(model.PEER_GROUP)}
        candidates: set[str] = set()
        for name in [n for n, (obj, _) in self._read.items() if current.get(n) is not obj]:
            _, entries = self._read.pop(name)
            candidates.update(entries)
            for key in entries:
                self._holders[key].discard(name)
        for name, obj in current.items():
            if name in self._read:
                continue
            entries = _entries(obj)
            self._read[name] = (obj, entries)
            candidates.update(entries)
            for key in entries:
                self._holders.setdefault(key, set()).add(name)
        touched: set[str] = set()
        for key in candidates:
            holders = self._holders.get(key)
            if not holders:
                self._holders.pop(key, None)
                if self._pods.pop(key, None) is not None:
                    touched.add(key)
                continue
            entry = self._read[min(holders)][1][key]
            if self._pods.get(key) != entry:
                self._pods[key] = entry
                touched.add(key)
        return {(k.split("/", 1)[0], k.split("/", 1)[1]) for k in touched}


def _entries(obj: model.KubeObject) -> dict[str, model.KubeObject]:
    """A group object's member pods by key; an entry that is none is skipped (only the
    controller writes these)."""
    spec = obj.get("spec")
    members = spec.get("members") if isinstance(spec, Mapping) else None
    out: dict[str, model.KubeObject] = {}
    for entry in members if isinstance(members, list) else ():
        if not isinstance(entry, Mapping):
            continue
        try:
            out[str(entry["pod"])] = span.member_pod(entry)
        except ValueError:
            continue
    return out
