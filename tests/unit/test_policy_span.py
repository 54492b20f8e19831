"""POL-SPAN, POL-CTRL: a node compiling from its own pods and the peer groups its pods' policies
name writes the tables it would compile from every pod of the cluster; the controller's groups,
kept up to date change by change, are the groups computed from scratch.

Random clusters: pods of three namespaces on three nodes, sharing addresses, declaring named
ports; policies with every selector kind, ipBlock/except, ports, endPort and named ports, IPv6.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netattach.cluster import model, store
from netattach.cluster.model import KubeObject, labels, namespace_of
from netattach.daemon.policy_inputs import SpanMembers
from netattach.policy import groups, span
from netattach.policy.compile import compile_pods
from netattach.policy.model import Policy
from netattach.policy.views import pod_key
from tests.unit.policy_fixtures import (
    NAMESPACE_NAMES,
    POD_NAMES,
    SOME_NAMESPACE,
    labels_st,
    make_pod,
    make_policy,
    pod_st,
    policy_st,
)

NODES = 3
placed_pod_st = st.tuples(pod_st, st.integers(0, NODES - 1))
namespaces_st = st.fixed_dictionaries({name: labels_st for name in NAMESPACE_NAMES})


class Published:
    """The API's PolicyPeerGroup objects, as the controller's writes leave them."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}

    def apply(self, writes: Iterable[groups.Write]) -> None:
        for write in writes:
            if write.body is None:
                assert write.name in self.objects, f"deleting {write.name}, never written"
                del self.objects[write.name]
            else:
                self.objects[write.name] = write.body

    def members(self, wanted: set[str]) -> dict[str, KubeObject]:
        """The member pods of the groups `wanted` (ids), as a node reads them."""
        found: dict[str, KubeObject] = {}
        for body in self.objects.values():
            if body["metadata"]["labels"][groups.GROUP_LABEL] in wanted:
                for entry in body["spec"]["members"]:
                    found[entry["pod"]] = span.member_pod(entry)
        return found

    def by_group(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for body in self.objects.values():
            group_id = body["metadata"]["labels"][groups.GROUP_LABEL]
            out.setdefault(group_id, set()).update(e["pod"] for e in body["spec"]["members"])
        return out


def controller(
    pods: Iterable[KubeObject], namespaces: Mapping[str, Mapping[str, str]],
    policies: Iterable[Policy],
) -> groups.PeerGroups:  # fmt: skip
    made = groups.PeerGroups()
    for name, labels_ in namespaces.items():
        made.set_namespace(name, labels_)
    for pod in pods:
        made.set_pod(pod)
    made.set_policies(policies)
    return made


def namespace_objects(namespaces: Mapping[str, Mapping[str, str]]) -> list[KubeObject]:
    return [{"metadata": {"name": n, "labels": dict(lb)}} for n, lb in namespaces.items()]


def node_compile(
    node: int,
    placed: Mapping[str, tuple[KubeObject, int]],
    namespaces: Mapping[str, Mapping[str, str]],
    policies: list[Policy],
    published: Published,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The node's rules compiled from every pod of the cluster, and from its span alone."""
    local = [pod for pod, at in placed.values() if at == node]
    everyone = [pod for pod, _ in placed.values()]
    ns_objects = namespace_objects(namespaces)
    full = compile_pods(local, ns_objects, everyone, policies)
    needed = span.needed(policies, [(namespace_of(p), labels(p)) for p in local])
    members = published.members({key.id() for key in needed})
    for pod in local:
        members.pop(pod_key(pod), None)  # a node's own pods are its own, with their records
    spanned = compile_pods(local, ns_objects, [*local, *members.values()], policies)
    return full, spanned


def dedupe(placed: list[tuple[KubeObject, int]]) -> dict[str, tuple[KubeObject, int]]:
    return {pod_key(pod): (pod, at) for pod, at in placed}


@pytest.mark.req("POL-SPAN")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    placed=st.lists(placed_pod_st, min_size=1, max_size=12),
    namespaces=namespaces_st,
    policies=st.lists(policy_st, min_size=1, max_size=4),
)
def test_each_nodes_rules_from_its_span_equal_those_from_every_pod(
    placed: list[tuple[KubeObject, int]],
    namespaces: dict[str, dict[str, str]],
    policies: list[Policy],
) -> None:
    pods = dedupe(placed)
    unique = list({p.name: p for p in policies}.values())
    published = Published()
    published.apply(controller([p for p, _ in pods.values()], namespaces, unique).take_writes())
    for node in range(NODES):
        full, spanned = node_compile(node, pods, namespaces, unique, published)
        assert spanned == full, node


change_st = st.one_of(
    st.tuples(st.just("pod"), placed_pod_st),
    st.tuples(st.just("pod-gone"), SOME_NAMESPACE, st.sampled_from(POD_NAMES)),
    st.tuples(st.just("policy"), policy_st),
    st.tuples(st.just("policy-gone"), st.integers(0, 3)),
    st.tuples(st.just("namespace"), st.sampled_from(NAMESPACE_NAMES), labels_st),
    st.tuples(st.just("namespace-gone"), st.sampled_from(NAMESPACE_NAMES)),
)


@pytest.mark.req("POL-CTRL")
@pytest.mark.req("POL-SPAN")
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    placed=st.lists(placed_pod_st, min_size=1, max_size=10),
    namespaces=namespaces_st,
    policies=st.lists(policy_st, min_size=1, max_size=4),
    changes=st.lists(st.lists(change_st, min_size=1, max_size=4), min_size=1, max_size=6),
)
def test_the_controllers_groups_kept_up_to_date_are_those_computed_afresh(
    placed: list[tuple[KubeObject, int]],
    namespaces: dict[str, dict[str, str]],
    policies: list[Policy],
    changes: list[list[tuple[Any, ...]]],
) -> None:
    pods = dedupe(placed)
    named = {p.name: p for p in policies}
    kept = controller([p for p, _ in pods.values()], namespaces, named.values())
    published = Published()
    published.apply(kept.take_writes())
    for batch in changes:
        for change in batch:
            apply(change, kept, pods, named, namespaces)
        published.apply(kept.take_writes())
        afresh = controller([p for p, _ in pods.values()], namespaces, named.values())
        assert published.by_group() == {
            key.id(): members for key, members in afresh.groups().items()
        }, batch
        for node in range(NODES):
            full, spanned = node_compile(node, pods, namespaces, list(named.values()), published)
            assert spanned == full, (batch, node)


def apply(
    change: tuple[Any, ...],
    kept: groups.PeerGroups,
    pods: dict[str, tuple[KubeObject, int]],
    named: dict[str, Policy],
    namespaces: dict[str, dict[str, str]],
) -> None:
    kind = change[0]
    if kind == "pod":
        pod, at = change[1]
        pods[pod_key(pod)] = (pod, at)
        kept.set_pod(pod)
    elif kind == "pod-gone":
        key = f"{change[1]}/{change[2]}"
        pods.pop(key, None)
        kept.remove_pod(key)
    elif kind == "policy":
        named[change[1].name] = change[1]
        kept.set_policies(named.values())
    elif kind == "policy-gone":
        named.pop(f"pol{change[1]}", None)
        kept.set_policies(named.values())
    elif kind == "namespace":
        namespaces[change[1]] = change[2]
        kept.set_namespace(change[1], change[2])
    elif kind == "namespace-gone":
        namespaces.pop(change[1], None)
        kept.remove_namespace(change[1])


@pytest.mark.req("POL-CTRL")
def test_a_group_outgrowing_its_shard_is_written_again_in_more_then_the_old_deleted() -> None:
    made = groups.PeerGroups()
    made.set_namespace("ns-a", {})
    spec: dict[str, Any] = {"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}
    made.set_policies([make_policy(0, "ns-a", "net", spec)])
    for index in range(groups.MEMBERS_PER_SHARD):
        made.set_pod(make_pod("ns-a", f"pod{index}", {}, index % 250 + 1, False, []))
    first = made.take_writes()
    assert [w.name.split("-")[1:] for w in first] == [["1", "0"]]
    published = Published()
    published.apply(first)
    made.set_pod(make_pod("ns-a", "one-more", {}, 1, False, []))
    second = made.take_writes()
    assert [w.body is None for w in second] == [False, False, True]  # two written, then one gone
    published.apply(second)
    (members,) = published.by_group().values()
    assert len(members) == groups.MEMBERS_PER_SHARD + 1
    sizes = sorted(len(o["spec"]["members"]) for o in published.objects.values())
    assert sum(sizes) == groups.MEMBERS_PER_SHARD + 1
    assert max(sizes) < groups.MEMBERS_PER_SHARD
    made.set_pod(make_pod("ns-a", "pod7", {"app": "moved"}, 8, False, []))
    assert len(made.take_writes()) == 1  # one pod changed: one shard rewritten


@pytest.mark.req("POL-SPAN")
def test_a_node_reading_rewritten_shards_is_told_only_the_pods_that_changed() -> None:
    # SpanMembers (the node's reader of the groups it watches): a shard rewritten for one pod's
    # change, a pod gone, a group resharded: it names the pods whose entry changed, and holds
    # exactly the members the objects carry
    made = groups.PeerGroups()
    made.set_namespace("ns-a", {})
    spec: dict[str, Any] = {"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}
    made.set_policies([make_policy(0, "ns-a", "net", spec)])
    view = store.ClusterStore()
    members = SpanMembers(view)
    published = Published()

    def publish() -> set[str]:
        writes = made.take_writes()
        published.apply(writes)
        for write in writes:
            if write.body is None:
                view.remove(model.PEER_GROUP, "", write.name)
            else:
                view.upsert(cast(KubeObject, copy.deepcopy(write.body)))
        told = {f"{ns}/{name}" for ns, name in members.refresh()}
        assert members.members() == published.members(set(published.by_group()))
        return told

    for index in range(150):  # two shards
        made.set_pod(make_pod("ns-a", f"pod{index}", {}, index + 1, False, []))
    assert len(publish()) == 150
    made.set_pod(make_pod("ns-a", "pod7", {"app": "relabelled"}, 8, False, []))
    assert publish() == {"ns-a/pod7"}  # its shard's other pods are as they were
    made.remove_pod("ns-a/pod9")
    assert publish() == {"ns-a/pod9"}
    for index in range(150, 250):  # resharded: four objects, the two old ones deleted
        made.set_pod(make_pod("ns-a", f"pod{index}", {}, index % 250 + 1, False, []))
    assert publish() == {f"ns-a/pod{index}" for index in range(150, 250)}
    assert len(published.objects) == 4
