"""The policy controller's peer groups (POL-CTRL): per group the policies name, its member pods,
kept up to date as pods, namespaces and policies change, and written as sharded objects.

    policies ──> the groups they name (`span.group_keys`), counted: a group lives while one
                 policy names it
    a pod    ──> the groups it enters, leaves or changes in ──> one shard of each, dirty
    a namespace's labels ──> the groups with a namespaceSelector, read again for its pods

A group is written as `shards` objects (`PolicyPeerGroup`, policy.netattach.io/v1alpha1) named
`<group id>-<shards>-<index>` and labelled `policy.netattach.io/group: <group id>`: a member
lives in the shard its key hashes to, so one pod change rewrites one object per group it is in,
and a shard holds at most MEMBERS_PER_SHARD members (about 20 KiB, far below etcd's 1.5 MiB).
A group that outgrows its shards (or shrinks to a quarter of them) is written again in the new
number, then the old objects are deleted: a reader unions the objects of a group it sees, so it
never misses a member. An empty group is one object with no member: a reader tells "no pod" from
"not published yet".
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from netattach.cluster import model
from netattach.policy.cluster_index import PolicyKey, policy_key
from netattach.policy.model import NAMESPACE_NAME_LABEL, Policy
from netattach.policy.span import GroupKey, group_keys, member_entry, port_names

API_VERSION: Final = model.PEER_GROUP_API
KIND: Final = model.PEER_GROUP
GROUP_LABEL: Final = model.PEER_GROUP_LABEL
MEMBERS_PER_SHARD: Final = 100  # as an EndpointSlice: one pod change rewrites a small object


@dataclass(frozen=True, slots=True)
class Write:
    """One object to write (`body`) or to delete (`body` None)."""

    name: str
    body: dict[str, Any] | None


Labels = tuple[tuple[str, str], ...]  # sorted (key, value) pairs


@dataclass(slots=True)
class _Member:
    namespace: str
    labels: Mapping[str, str]
    label_key: Labels
    ports: tuple[str, ...]
    entry: dict[str, Any]


def shards_for(members: int, current: int = 0) -> int:
    """How many objects hold `members`: a power of two, each at most MEMBERS_PER_SHARD full;
    `current` kept until it overflows or a quarter of it would do."""
    need = 1
    while need * MEMBERS_PER_SHARD < members:
        need *= 2
    if current and need <= current and current <= max(1, need * 4):
        return current
    return need


def shard_of(key: str, shards: int) -> int:
    return zlib.crc32(key.encode()) % shards


def object_name(group_id: str, shards: int, index: int) -> str:
    return f"{group_id}-{shards}-{index}"


class PeerGroups:
    """The cluster's pods, namespaces and policies, and the groups' members over them."""

    def __init__(self) -> None:
        self._namespaces: dict[str, dict[str, str]] = {}
        self._pods: dict[str, _Member] = {}
        # namespace -> labels -> the pods labelled so: a selector is matched once per bucket
        self._buckets: dict[str, dict[Labels, set[str]]] = {}
        self._declaring: dict[str, set[str]] = {}  # port name -> the pods declaring it
        self._policy_keys: dict[PolicyKey, set[GroupKey]] = {}
        self._named_by: dict[GroupKey, int] = {}  # how many policies name the group
        self._members: dict[GroupKey, set[str]] = {}
        self._ids: dict[GroupKey, str] = {}
        self._scoped: dict[str, set[GroupKey]] = {}  # namespace -> groups without nsSelector
        self._wide: set[GroupKey] = set()  # groups with a namespaceSelector
        self._by_port: dict[str, GroupKey] = {}
        self._published: dict[GroupKey, int] = {}  # shards written
        self._dirty: dict[GroupKey, set[int] | None] = {}  # None: every shard
        self._gone: dict[str, int] = {}  # group id -> shards written, to delete

    # -- inputs -----------------------------------------------------------------------------------

    def set_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        fresh = {NAMESPACE_NAME_LABEL: name, **labels}
        if self._namespaces.get(name) == fresh:
            return
        self._namespaces[name] = fresh
        self._namespace_moved(name)

    def remove_namespace(self, name: str) -> None:
        if self._namespaces.pop(name, None) is not None:
            self._namespace_moved(name)

    def set_pod(self, pod: model.KubeObject) -> None:
        entry = member_entry(pod)
        key = entry["pod"]
        before = self._pods.get(key)
        if before is not None and before.entry == entry:
            return
        labels = model.labels(pod)
        after = _Member(
            model.namespace_of(pod),
            labels,
            tuple(sorted(labels.items())),
            tuple(sorted(set(port_names(pod)))),
            entry,
        )
        if before is not None:
            self._unindex(key, before)
        self._pods[key] = after
        self._buckets.setdefault(after.namespace, {}).setdefault(after.label_key, set()).add(key)
        for name in after.ports:
            self._declaring.setdefault(name, set()).add(key)
        self._pod_moved(key, before, after)

    def remove_pod(self, key: str) -> None:
        before = self._pods.pop(key, None)
        if before is None:
            return
        self._unindex(key, before)
        self._pod_moved(key, before, None)

    def _unindex(self, key: str, member: _Member) -> None:
        buckets = self._buckets[member.namespace]
        bucket = buckets[member.label_key]
        bucket.discard(key)
        if not bucket:
            del buckets[member.label_key]
            if not buckets:
                del self._buckets[member.namespace]
        for name in member.ports:
            declaring = self._declaring[name]
            declaring.discard(key)
            if not declaring:
                del self._declaring[name]

    def set_policies(self, policies: Iterable[Policy]) -> None:
        """The cluster's valid policies now."""
        fresh = {policy_key(p): group_keys(p) for p in policies}
        for key in [k for k in self._policy_keys if k not in fresh]:
            for group in self._policy_keys.pop(key):
                self._unname(group)
        for key, groups in fresh.items():
            before = self._policy_keys.get(key, set())
            if before == groups:
                continue
            self._policy_keys[key] = groups
            for group in groups - before:
                self._name(group)
            for group in before - groups:
                self._unname(group)

    # -- outputs ----------------------------------------------------------------------------------

    def pod_keys(self) -> set[str]:
        return set(self._pods)

    def namespace_names(self) -> set[str]:
        return set(self._namespaces)

    def groups(self) -> dict[GroupKey, set[str]]:
        """Every group named now, with its members' keys."""
        return {key: set(members) for key, members in self._members.items()}

    def take_writes(self) -> list[Write]:
        """The objects to write and delete since this was last asked: new shards before the
        old ones are deleted."""
        writes: list[Write] = []
        deletes: list[Write] = []
        for group_id, shards in self._gone.items():
            deletes += [Write(object_name(group_id, shards, i), None) for i in range(shards)]
        self._gone.clear()
        for key, marked in self._dirty.items():
            members = self._members[key]
            group_id = self._ids[key]
            before = self._published.get(key, 0)
            shards = shards_for(len(members), before)
            dirty = marked
            if shards != before:
                dirty = None
                deletes += [Write(object_name(group_id, before, i), None) for i in range(before)]
                self._published[key] = shards
            indexes = range(shards) if dirty is None else sorted(dirty)
            writes += [Write(object_name(group_id, shards, i), self._body(key, shards, i))
                       for i in indexes]  # fmt: skip
        self._dirty.clear()
        return writes + deletes

    def _body(self, key: GroupKey, shards: int, index: int) -> dict[str, Any]:
        members = sorted(k for k in self._members[key] if shard_of(k, shards) == index)
        group_id = self._ids[key]
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {
                "name": object_name(group_id, shards, index),
                "labels": {GROUP_LABEL: group_id},
            },
            "spec": {
                "key": key.wire(),
                "shard": index,
                "shards": shards,
                "members": [self._pods[k].entry for k in members],
            },
        }

    # -- membership -------------------------------------------------------------------------------

    def _picks(self, group: GroupKey, member: _Member) -> bool:
        namespace = member.namespace
        return group.picks(
            namespace, self._namespace_labels(namespace), member.labels, member.ports
        )

    def _candidates(self, namespace: str, ports: Iterable[str]) -> set[GroupKey]:
        found = set(self._scoped.get(namespace, ())) | self._wide
        found.update(self._by_port[p] for p in ports if p in self._by_port)
        return found

    def _pod_moved(self, key: str, before: _Member | None, after: _Member | None) -> None:
        groups: set[GroupKey] = set()
        for member in (before, after):
            if member is not None:
                groups |= self._candidates(member.namespace, member.ports)
        for group in groups:
            members = self._members[group]
            if after is not None and self._picks(group, after):
                members.add(key)
            elif key in members:
                members.discard(key)
            else:
                continue
            self._mark(group, key)

    def _namespace_labels(self, namespace: str) -> Mapping[str, str]:
        return self._namespaces.get(namespace) or {NAMESPACE_NAME_LABEL: namespace}

    def _picked(self, group: GroupKey, namespace: str) -> set[str]:
        """The pods of `namespace` the pod-selecting `group` picks (by bucket)."""
        selector = group.pod_selector
        out: set[str] = set()
        for labels, keys in self._buckets.get(namespace, {}).items():
            if selector is None or selector.matches(dict(labels)):
                out |= keys
        return out

    def _namespace_moved(self, name: str) -> None:
        labels = self._namespace_labels(name)
        for group in self._wide:
            members = self._members[group]
            assert group.namespace_selector is not None
            picked = (
                self._picked(group, name) if group.namespace_selector.matches(labels) else set()
            )
            for key in self._buckets_keys(name):
                if (key in picked) != (key in members):
                    if key in picked:
                        members.add(key)
                    else:
                        members.discard(key)
                    self._mark(group, key)

    def _buckets_keys(self, namespace: str) -> set[str]:
        out: set[str] = set()
        for keys in self._buckets.get(namespace, {}).values():
            out |= keys
        return out

    def _mark(self, group: GroupKey, key: str) -> None:
        dirty = self._dirty.get(group, set())
        if dirty is None:
            return
        shards = self._published.get(group, 0)
        if shards == 0:
            self._dirty[group] = None
        else:
            dirty.add(shard_of(key, shards))
            self._dirty[group] = dirty

    def _name(self, group: GroupKey) -> None:
        count = self._named_by.get(group, 0)
        self._named_by[group] = count + 1
        if count:
            return
        self._ids[group] = group.id()
        if group.port_name:
            self._by_port[group.port_name] = group
            members = set(self._declaring.get(group.port_name, ()))
        elif group.namespace_selector is None:
            self._scoped.setdefault(group.scope, set()).add(group)
            members = self._picked(group, group.scope)
        else:
            self._wide.add(group)
            selector = group.namespace_selector
            members = set()
            for namespace in self._buckets:
                if selector.matches(self._namespace_labels(namespace)):
                    members |= self._picked(group, namespace)
        self._members[group] = members
        self._dirty[group] = None
        written = self._gone.pop(self._ids[group], 0)  # named again before its deletion
        if written:
            self._published[group] = written

    def _unname(self, group: GroupKey) -> None:
        count = self._named_by[group] - 1
        if count:
            self._named_by[group] = count
            return
        del self._named_by[group]
        del self._members[group]
        self._dirty.pop(group, None)
        group_id = self._ids.pop(group)
        shards = self._published.pop(group, 0)
        if shards:
            self._gone[group_id] = shards
        if group.port_name:
            del self._by_port[group.port_name]
        elif group.namespace_selector is None:
            scoped = self._scoped[group.scope]
            scoped.discard(group)
            if not scoped:
                del self._scoped[group.scope]
        else:
            self._wide.discard(group)
