"""`policy.update.render_update`: the script taking a pod's table from what it holds to what it
should hold — nothing, element changes only, or rules rewritten with the sets kept in place."""

from __future__ import annotations

from typing import Any

import pytest

from netattach.cluster.model import KubeObject
from netattach.policy import render, update
from netattach.policy.compile import compile_pod
from netattach.policy.model import parse_policy
from netattach.policy.selection import Texts
from tests.unit.test_policy_render import NAMESPACES, TARGET, pod, policy

FROM_WEB: dict[str, Any] = {"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}
WEB: dict[str, Any] = {"podSelector": {"matchLabels": {"app": "db"}}, "ingress": [FROM_WEB]}


def table(peers: int, spec: dict[str, Any] = WEB) -> render.Table:
    """The target's table with `peers` web pods, at every other address (none adjacent, so
    no two merge into one CIDR element)."""
    pods: list[KubeObject] = [TARGET]
    pods += [pod(2 * i, "ns-a", {"app": "web"}) for i in range(1, peers + 1)]
    rules = compile_pod(TARGET, NAMESPACES, pods, [parse_policy(policy("p", spec))])
    built = render.build_table("ns-a/pod0", rules)
    assert built is not None
    return built


@pytest.mark.req("POL-UPDATE")
def test_an_unchanged_table_is_no_write() -> None:
    assert update.render_update(table(3), table(3)) is None


@pytest.mark.req("POL-UPDATE")
def test_a_peer_joining_or_leaving_is_an_element_change_only() -> None:
    joined = update.render_update(table(3), table(4))
    assert joined is not None
    assert joined.splitlines() == [
        line for line in joined.splitlines() if line.startswith("add element inet netattach ")
    ]
    assert "10.0.0.9 " in joined
    left = update.render_update(table(4), table(2))
    assert left is not None
    assert all(line.startswith("delete element inet netattach ") for line in left.splitlines())


def test_many_peers_leaving_a_hash_set_are_deleted_one_by_one() -> None:
    script = update.render_update(table(40), table(2))
    assert script is not None
    lines = script.splitlines()
    assert len(lines) == 2  # one line per family's set, every address gone in it
    for line in lines:
        assert line.startswith("delete element inet netattach ")
        assert line.count(",") == 37


def test_many_elements_leaving_an_interval_set_refill_it_instead() -> None:
    def with_elements(count: int) -> render.Table:
        base = table(1)
        elements = tuple(f"10.9.{i}.0/24" for i in range(count))
        ranges = render.NftSet("sblocks_b4", "ipv4_addr", 'comment "x"', Texts(elements))
        return render.Table(base.comment, (*base.sets, ranges), base.chains)

    script = update.render_update(with_elements(40), with_elements(2))
    assert script is not None
    lines = script.splitlines()
    assert lines[0] == "flush set inet netattach sblocks_b4"
    assert not any(line.startswith("delete element") for line in lines)
    assert not any("chain" in line for line in lines)  # the rules stay as they are


@pytest.mark.req("POL-UPDATE")
def test_a_rule_change_rewrites_the_chains_and_keeps_shared_sets() -> None:
    ports = {**WEB, "ingress": [{**FROM_WEB, "ports": [{"port": 80}]}]}
    script = update.render_update(table(3), table(3, ports))
    assert script is not None
    assert "flush chain inet netattach i0_in" in script
    assert "delete table" not in script
    assert "delete set" not in script  # the peers' sets are kept
    assert "type inet_service" in script  # the new port set, defined in the same transaction


@pytest.mark.req("POL-UPDATE")
def test_set_changes_are_the_element_changes_of_hash_sets_alone() -> None:
    assert update.set_changes(table(3), table(3)) == []
    joined = update.set_changes(table(3), table(5))
    assert joined is not None
    assert {c.kind for c in joined} == {"ipv4_addr", "ipv6_addr"}
    assert all(not c.gone and len(c.added) == 2 for c in joined)
    script = update.render_update(table(3), table(5))
    assert update.changes_text(joined) == script  # the same change, as nft text
    left = update.set_changes(table(5), table(1))
    assert left is not None
    assert all(len(c.gone) == 4 and not c.added for c in left)
    # A rule changing, or an interval set's elements, is not theirs: nft writes those.
    ports = {**WEB, "ingress": [{**FROM_WEB, "ports": [{"port": 80}]}]}
    assert update.set_changes(table(3), table(3, ports)) is None
    base = table(1)
    blocks = [
        render.NftSet("sblocks_b4", "ipv4_addr", 'comment "x"', Texts(elements))
        for elements in (("10.9.0.0/24",), ("10.9.1.0/24",))
    ]
    old, new = (render.Table(base.comment, (*base.sets, b), base.chains) for b in blocks)
    assert update.set_changes(old, new) is None
    assert update.changes_text([]) is None
