"""The incremental compiler: after any sequence of changes, exactly a from-scratch compile.

A change touches only what it can (POL-UPDATE): the targets recompiled are those whose rules a
change can alter, and a change that touches no selection or selected pod recompiles nothing.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netattach.cluster.model import KubeObject
from netattach.policy import peers, render, update
from netattach.policy.compile import Compiler, compile_pods
from netattach.policy.ir import PodRules
from netattach.policy.model import Policy
from netattach.policy.views import pod_key
from tests.unit.policy_fixtures import (
    NAMESPACE_NAMES,
    POD_NAMES,
    SOME_NAMESPACE,
    labels_st,
    make_pod,
    make_policy,
    peer_st,
    pod_st,
    policy_st,
    port_st,
    selector_st,
)

change_st = st.one_of(
    st.tuples(st.just("pod"), pod_st, st.booleans()),  # True: one of the node's pods too
    st.tuples(st.just("pod-gone"), SOME_NAMESPACE, st.sampled_from(POD_NAMES)),
    st.tuples(st.just("policy"), policy_st),
    # the same pods selected, other rules: patched in place (`Compiler._patch_policies`)
    st.tuples(st.just("policy-rules"), st.integers(0, 3), policy_st),
    st.tuples(st.just("policy-gone"), st.integers(0, 3)),
    st.tuples(st.just("namespace"), st.sampled_from(NAMESPACE_NAMES), labels_st),
    st.tuples(st.just("namespace"), st.sampled_from(NAMESPACE_NAMES), labels_st),
    st.tuples(st.just("namespace-gone"), st.sampled_from(NAMESPACE_NAMES)),
    st.tuples(st.just("target-gone"), SOME_NAMESPACE, st.sampled_from(POD_NAMES)),
)


@dataclass
class Cluster:
    """The state both compilers are given, kept as plain objects."""

    pods: dict[str, KubeObject] = field(default_factory=dict)
    policies: dict[str, Policy] = field(default_factory=dict)  # "pol<i>" -> policy
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    targets: set[str] = field(default_factory=set)

    def namespace_objects(self) -> list[KubeObject]:
        return [{"metadata": {"name": n, "labels": lb}} for n, lb in self.namespaces.items()]

    def from_scratch(self) -> dict[str, Any]:
        targets = [self.pods[k] for k in sorted(self.targets) if k in self.pods]
        return compile_pods(
            targets,
            self.namespace_objects(),
            list(self.pods.values()),
            sorted(self.policies.values(), key=lambda p: p.name),
        )


def apply(change: tuple[Any, ...], cluster: Cluster, compiler: Compiler) -> None:
    """One change, to the plain state and to the incremental compiler alike."""
    kind = change[0]
    if kind == "pod":
        pod, local = change[1], change[2]
        key = pod_key(pod)
        cluster.pods[key] = pod
        compiler.set_pod(compiler.view(pod))
        if local:
            cluster.targets.add(key)
        if key in cluster.targets:
            compiler.set_target(compiler.view(pod))
    elif kind == "pod-gone":
        key = f"{change[1]}/{change[2]}"
        cluster.pods.pop(key, None)
        compiler.remove_pod(key)
        cluster.targets.discard(key)
        compiler.remove_target(key)
    elif kind == "policy":
        cluster.policies[change[1].name] = change[1]
        compiler.set_policies(cluster.policies.values())
    elif kind == "policy-rules":
        found = cluster.policies.get(f"pol{change[1]}")
        if found is not None:
            donor = change[2]
            edited = dataclasses.replace(found, ingress=donor.ingress, egress=donor.egress)
            cluster.policies[found.name] = edited
            compiler.set_policies(cluster.policies.values())
    elif kind == "policy-gone":
        cluster.policies.pop(f"pol{change[1]}", None)
        compiler.set_policies(cluster.policies.values())
    elif kind == "namespace":
        cluster.namespaces[change[1]] = change[2]
        compiler.set_namespace(change[1], change[2])
    elif kind == "namespace-gone":
        cluster.namespaces.pop(change[1], None)
        compiler.remove_namespace(change[1])
    elif kind == "target-gone":
        key = f"{change[1]}/{change[2]}"
        cluster.targets.discard(key)
        compiler.remove_target(key)


def check_tables(got: dict[str, Any], built: dict[str, render.Built]) -> None:
    """Each target's table made from its last one (`render.rebuild_table`) is the table built
    whole from its rules."""
    for key, rules in got.items():
        table = render.rebuild_table(key, rules, built.get(key))
        assert table == render.build_table(key, rules), key
        built[key] = (rules, table)


_ELEMENT_LINE = re.compile(r"^(add|delete) element inet netattach (\S+) \{ (.*) \}$")


def elements_of(table: render.Table) -> dict[str, set[str]]:
    return {s.name: set(s.elements.texts()) for s in table.sets}


def check_update(applied: render.Table | None, wanted: render.Table | None) -> None:
    """The in-place update from `applied` to `wanted`, when it changes elements only, deletes
    exactly what `applied` holds and `wanted` does not, and adds exactly the reverse, however
    many changes ago `applied` was made (the host sets' changes, followed back, or a whole
    comparison when the chain is gone)."""
    if applied is None or wanted is None:
        return
    script = update.render_update(applied, wanted)
    held = elements_of(applied)
    if script is None:
        assert held == elements_of(wanted)
        return
    lines = script.splitlines()
    parsed = [_ELEMENT_LINE.match(line) for line in lines]
    if not all(parsed) or any(line.startswith("flush") for line in lines):
        return  # rules rewritten: what nft makes of it is tests/netns/test_policy_update's
    for match in parsed:
        assert match is not None
        verb, name, elements = match.groups()
        for element in elements.split(", "):
            if verb == "delete":
                assert element in held[name], (name, element)
                held[name].discard(element)
            else:
                assert element not in held[name], (name, element)
                held[name].add(element)
    assert held == elements_of(wanted)


def replayed(
    pods: list[tuple[Any, ...]],
    policies: list[tuple[Any, ...]],
    changes: list[list[tuple[Any, ...]]],
) -> Iterator[tuple[Cluster, list[str], dict[str, PodRules]]]:
    """Build the cluster, then apply each batch of changes; after each, the incremental rules
    must equal a from-scratch compile and the tables patched in place those built whole.
    Yields the cluster, the pods the batch recompiled and every target's rules."""
    cluster, compiler = Cluster(), Compiler()
    for change in [*pods, *policies]:
        apply(change, cluster, compiler)
    compiler.compile_changed()
    built: dict[str, render.Built] = {}
    lagging: dict[str, render.Table | None] = {}  # as applied every other batch only
    for index, batch in enumerate(changes):
        for change in batch:
            apply(change, cluster, compiler)
        recompiled = list(compiler.compile_changed())
        got = {key: compiler.rules(key) for key in sorted(cluster.targets)}
        assert got == cluster.from_scratch(), batch
        before = {key: last for key, (_, last) in built.items()}
        check_tables(got, built)
        for key, (_, table) in built.items():
            check_update(before.get(key), table)
            check_update(lagging.get(key), table)
            if index % 2:
                lagging[key] = table
        yield cluster, recompiled, got


@pytest.mark.req("POL-UPDATE")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pods=st.lists(st.tuples(st.just("pod"), pod_st, st.booleans()), min_size=2, max_size=10),
    policies=st.lists(st.tuples(st.just("policy"), policy_st), min_size=1, max_size=4),
    changes=st.lists(st.lists(change_st, min_size=1, max_size=3), min_size=1, max_size=8),
)
def test_incremental_result_equals_a_from_scratch_compile(
    pods: list[tuple[Any, ...]],
    policies: list[tuple[Any, ...]],
    changes: list[list[tuple[Any, ...]]],
) -> None:
    for cluster, recompiled, _ in replayed(pods, policies, changes):
        assert set(recompiled) <= cluster.targets


# Egress to named ports: each destination pod resolves the names against the ports it declares,
# so pods changing their ports or addresses (shared ones too) move hosts between the groups.
named_port_st = st.fixed_dictionaries(
    {"port": st.sampled_from(["http", "dns"])},
    optional={"protocol": st.sampled_from(["TCP", "UDP"])},
)
named_egress_st = st.builds(
    make_policy,
    st.integers(0, 3),
    SOME_NAMESPACE,
    st.sampled_from(["net", "ns-a/net"]),
    st.fixed_dictionaries(
        {
            "podSelector": selector_st,
            "policyTypes": st.just(["Egress"]),
            "egress": st.lists(
                st.fixed_dictionaries(
                    {
                        "ports": st.lists(
                            st.one_of(named_port_st, named_port_st, port_st), min_size=1, max_size=3
                        )
                    },
                    optional={"to": st.lists(peer_st, max_size=2)},
                ),
                min_size=1,
                max_size=2,
            ),
        }
    ),
)
named_change_st = st.one_of(
    st.tuples(st.just("pod"), pod_st, st.booleans()),
    st.tuples(st.just("pod"), pod_st, st.booleans()),
    st.tuples(st.just("pod-gone"), SOME_NAMESPACE, st.sampled_from(POD_NAMES)),
    st.tuples(st.just("policy"), named_egress_st),
    st.tuples(st.just("policy-rules"), st.integers(0, 3), named_egress_st),
    st.tuples(st.just("namespace"), st.sampled_from(NAMESPACE_NAMES), labels_st),
    st.tuples(st.just("target-gone"), SOME_NAMESPACE, st.sampled_from(POD_NAMES)),
)


# a cluster of pods and named-port egress policies, and batches of changes to it
named_clusters = given(
    pods=st.lists(st.tuples(st.just("pod"), pod_st, st.booleans()), min_size=2, max_size=10),
    policies=st.lists(st.tuples(st.just("policy"), named_egress_st), min_size=1, max_size=3),
    changes=st.lists(st.lists(named_change_st, min_size=1, max_size=3), min_size=1, max_size=8),
)


@pytest.mark.req("POL-UPDATE", "POL-PORTS")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@named_clusters
def test_named_port_destinations_kept_in_place_equal_a_from_scratch_compile(
    pods: list[tuple[Any, ...]],
    policies: list[tuple[Any, ...]],
    changes: list[list[tuple[Any, ...]]],
) -> None:
    for _, _, got in replayed(pods, policies, changes):
        for rules in got.values():
            # one set per name: rules sharing a set name share its content
            named: dict[str, object] = {}
            for ir in rules.values():
                for d in (ir.ingress, ir.egress):
                    for r in () if d is None else d.rules:
                        if r.selection:
                            assert named.setdefault(r.selection, r.peers) == r.peers, r


@pytest.mark.req("POL-UPDATE", "POL-PORTS")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@named_clusters
def test_named_port_groups_counted_again_after_a_long_log_equal_a_from_scratch_compile(
    pods: list[tuple[Any, ...]],
    policies: list[tuple[Any, ...]],
    changes: list[list[tuple[Any, ...]]],
) -> None:
    """With a log of one change, every second change overflows it: the groups are counted
    again from the destinations, and still equal what a compile from scratch makes."""
    saved = peers.DEST_LOG_MAX
    peers.DEST_LOG_MAX = 1
    try:
        batches = sum(1 for _ in replayed(pods, policies, changes))
    finally:
        peers.DEST_LOG_MAX = saved
    assert batches == len(changes)


def _cluster_of_three() -> tuple[Cluster, Compiler]:
    cluster, compiler = Cluster(), Compiler()
    changes: list[tuple[Any, ...]] = [
        ("pod", make_pod("ns-a", "db", {"app": "db"}, 1, False, []), True),
        ("pod", make_pod("ns-a", "web", {"app": "web"}, 2, False, []), True),
        ("pod", make_pod("ns-b", "batch", {"app": "batch"}, 3, False, []), False),
        ("pod", make_pod("ns-a", "api", {"app": "web"}, 5, False, []), False),
        (
            "policy",
            make_policy(
                0,
                "ns-a",
                "net",
                {
                    "podSelector": {"matchLabels": {"app": "db"}},
                    "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}],
                },
            ),
        ),
    ]
    for change in changes:
        apply(change, cluster, compiler)
    compiler.compile_changed()
    return cluster, compiler


@pytest.mark.req("POL-UPDATE")
def test_a_change_no_selection_reads_recompiles_nothing() -> None:
    cluster, compiler = _cluster_of_three()
    relabelled = make_pod("ns-b", "batch", {"app": "other"}, 3, False, [])
    apply(("pod", relabelled, False), cluster, compiler)
    apply(("pod", make_pod("ns-b", "new", {"app": "web"}, 4, False, []), False), cluster, compiler)
    assert compiler.compile_changed() == {}


@pytest.mark.req("POL-UPDATE")
def test_a_peer_relabelled_recompiles_only_the_pods_that_select_it() -> None:
    cluster, compiler = _cluster_of_three()
    before = compiler.rules("ns-a/db")["net1"].ingress
    assert before is not None
    assert len(before.rules[0].peers or ()) == 2  # web and api
    relabelled = make_pod("ns-a", "api", {"app": "cache"}, 5, False, [])
    apply(("pod", relabelled, False), cluster, compiler)
    recompiled = compiler.compile_changed()
    assert set(recompiled) == {"ns-a/db"}  # web selects nothing: it is not recompiled
    after = recompiled["ns-a/db"]["net1"].ingress
    assert after is not None
    assert [str(n) for n in after.rules[0].peers or ()] == ["10.0.0.2/32"]
    assert {k: compiler.rules(k) for k in sorted(cluster.targets)} == cluster.from_scratch()


@pytest.mark.req("POL-UPDATE")
def test_a_policy_edit_recompiles_only_the_pods_it_selects_before_or_after() -> None:
    cluster, compiler = _cluster_of_three()
    spec = {"podSelector": {"matchLabels": {"app": "db"}}, "ingress": [{}]}
    apply(("policy", make_policy(0, "ns-a", "net", spec)), cluster, compiler)
    assert set(compiler.compile_changed()) == {"ns-a/db"}
    spec = {"podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{}]}
    apply(("policy", make_policy(0, "ns-a", "net", spec)), cluster, compiler)
    assert set(compiler.compile_changed()) == {"ns-a/db", "ns-a/web"}
    assert {k: compiler.rules(k) for k in sorted(cluster.targets)} == cluster.from_scratch()
