"""`policy.update.render_update`: the script taking a pod's table from what it holds to what it
should hold — nothing, element changes only, or the chains that differ written again with the
sets kept in place.

The tests marked netns write the scripts with the real nft in a network namespace of their own:
a table updated in place must equal the wanted table written whole."""

from __future__ import annotations

import copy
import json
import os
import random
import re
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from netattach.cluster.model import KubeObject
from netattach.policy import render, update
from netattach.policy.compile import compile_pod
from netattach.policy.model import parse_policy
from netattach.policy.selection import Texts
from tests.netns_fixtures import unique
from tests.nft_tables import listing, nft
from tests.unit.policy_fixtures import NAMESPACES, TARGET, numbered_pod, policy

FROM_WEB: dict[str, Any] = {"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}
WEB: dict[str, Any] = {"podSelector": {"matchLabels": {"app": "db"}}, "ingress": [FROM_WEB]}


def table(peers: int, spec: dict[str, Any] = WEB) -> render.Table:
    """The target's table with `peers` web pods, at every other address (none adjacent, so
    no two merge into one CIDR element)."""
    pods: list[KubeObject] = [TARGET]
    pods += [numbered_pod(2 * i, "ns-a", {"app": "web"}) for i in range(1, peers + 1)]
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


# -- only the chains that differ are written (against the real nft) ---------------------------

TO_BATCH: dict[str, Any] = {
    "podSelector": {"matchLabels": {"app": "db"}},
    "policyTypes": ["Egress"],
    "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "batch"}}}]}],
}
TO_WEB: dict[str, Any] = {**TO_BATCH, "egress": [{"to": FROM_WEB["from"]}]}
WEB_ON_80: dict[str, Any] = {**WEB, "ingress": [{**FROM_WEB, "ports": [{"port": 80}]}]}
_STATUS = "k8s.v1.cni.cncf.io/network-status"
_CHAIN_LINE = re.compile(r"^(?:(?:flush|delete) chain inet netattach (\w+)|\tchain (\w+) \{)$")


def on_two_networks(obj: KubeObject, i: int) -> KubeObject:
    """`obj`, made by `numbered_pod(i, ...)`, with a second interface: net2, on the network
    ns-a/net2."""
    made = copy.deepcopy(obj)
    annotations = made["metadata"]["annotations"]
    status = json.loads(annotations[_STATUS])
    status.append({"name": "ns-a/net2", "interface": "net2", "ips": [f"10.1.0.{i + 1}/24"]})
    annotations[_STATUS] = json.dumps(status)
    return made


def pod_table(*policies: KubeObject) -> render.Table:
    """The target's table (on net1 and net2) under `policies`; three web pods, one batch pod."""
    peers = [(i, numbered_pod(i, "ns-a", {"app": "web"})) for i in (2, 4, 6)]
    peers.append((8, numbered_pod(8, "ns-a", {"app": "batch"})))
    pods = [on_two_networks(p, i) for i, p in [(0, TARGET), *peers]]
    rules = compile_pod(pods[0], NAMESPACES, pods, [parse_policy(p) for p in policies])
    built = render.build_table("ns-a/pod0", rules)
    assert built is not None
    return built


def chains_written(script: str) -> set[str]:
    """The chains `script` flushes, deletes or defines."""
    found = (_CHAIN_LINE.match(line) for line in script.splitlines())
    return {m[1] or m[2] for m in found if m is not None}


def mentions(script: str, name: str) -> bool:
    return re.search(rf"\b{name}\b", script) is not None


@pytest.fixture
def netns() -> Iterator[str]:
    """A network namespace of the test's own, deleted however the test ends."""
    if os.geteuid() != 0 or shutil.which("nft") is None:
        pytest.skip("needs root and nft")
    name = unique("upd")
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False)


def updated_in_place(netns: str, applied: render.Table, wanted: render.Table) -> str:
    """Write `applied` whole, then the update to `wanted`, and assert the table nft holds then
    is `wanted` written whole (sets, elements, chains and rules). The update's script."""
    script = update.render_update(applied, wanted)
    assert script is not None
    nft(netns, render.table_text(applied))
    nft(netns, script)
    in_place = listing(netns)
    nft(netns, render.table_text(wanted))
    assert in_place == listing(netns), script
    return script


@pytest.mark.netns
@pytest.mark.req("POL-UPDATE")
def test_a_rule_change_writes_only_its_chain(netns: str) -> None:
    applied = pod_table(policy("p", WEB), policy("q", TO_BATCH))
    wanted = pod_table(policy("p", WEB_ON_80), policy("q", TO_BATCH))
    script = updated_in_place(netns, applied, wanted)
    assert chains_written(script) == {"i0_in"}
    assert script.startswith("flush chain inet netattach i0_in\n")
    for unchanged in ("input", "output", "i0_out"):
        assert not mentions(script, unchanged), unchanged
    assert "delete " not in script  # every set is still named: none goes


@pytest.mark.netns
@pytest.mark.req("POL-UPDATE")
def test_a_chain_gone_goes_with_the_sets_only_it_named(netns: str) -> None:
    applied = pod_table(policy("p", WEB), policy("q", TO_BATCH))
    wanted = pod_table(policy("p", WEB))
    gone = {s.name for s in applied.sets} - {s.name for s in wanted.sets}
    assert len(gone) == 2  # the batch pod's addresses, one set per family
    script = updated_in_place(netns, applied, wanted)
    lines = script.splitlines()
    # Rules naming them flushed, then the chains deleted, then the sets: nft deletes nothing
    # a rule names.
    assert lines[:6] == [
        "flush chain inet netattach output",
        "flush chain inet netattach i0_out",
        "delete chain inet netattach output",
        "delete chain inet netattach i0_out",
        *(f"delete set inet netattach {name}" for name in sorted(gone)),
    ]
    assert chains_written(script) == {"output", "i0_out"}
    assert not mentions(script, "input")
    assert not mentions(script, "i0_in")


@pytest.mark.netns
@pytest.mark.req("POL-UPDATE")
def test_a_base_chain_changed_jumps_to_a_new_chain(netns: str) -> None:
    applied = pod_table(policy("p", WEB))
    wanted = pod_table(policy("p", WEB), policy("r", WEB, pf="net2"))
    script = updated_in_place(netns, applied, wanted)
    assert chains_written(script) == {"input", "i1_in"}
    lines = script.splitlines()
    assert lines[0] == "flush chain inet netattach input"
    assert lines.index("\tchain i1_in {") < lines.index("\tchain input {")
    assert '\t\tiifname "net2" jump i1_in comment "network ns-a/net2"' in lines
    # i0_in, unchanged, is named only by input's jump to it
    assert [line for line in lines if mentions(line, "i0_in")] == [
        '\t\tiifname "net1" jump i0_in comment "network ns-a/net"'
    ]


@pytest.mark.netns
@pytest.mark.req("POL-UPDATE")
def test_an_unchanged_chain_naming_a_set_made_again_is_written_again(netns: str) -> None:
    # q selects the same pods as p: their sets are p's and q's now, a new comment that nft
    # cannot change in place, so they are made again, and i0_in, unchanged, names them.
    applied = pod_table(policy("p", WEB))
    wanted = pod_table(policy("p", WEB), policy("q", TO_WEB))
    assert dict(applied.chains)["i0_in"] == dict(wanted.chains)["i0_in"]
    script = updated_in_place(netns, applied, wanted)
    assert chains_written(script) == {"i0_in", "output", "i0_out"}
    assert not mentions(script, "input")


# A random walk over tables of the renderer's shape: address sets (hash or interval), chains
# allowing from some of them, base chains jumping to the chains. Each step changes a few of
# these; the update must write exactly the chains that differ (or name a set made again).
_ADDRESSES = [f"10.9.0.{2 * n}" for n in range(1, 9)]
_CHAINS = [f"c{n}" for n in range(6)]


def _address_set(rng: random.Random, name: str) -> render.NftSet:
    elements = Texts(tuple(sorted(rng.sample(_ADDRESSES, rng.randint(1, 4)))))
    comment = f'comment "policy {rng.choice("ab")}"'
    return render.NftSet(name, "ipv4_addr", comment, elements, rng.random() < 0.5)


def _walk_table(sets: dict[str, render.NftSet], chains: dict[str, list[str]]) -> render.Table:
    """The table of `chains` (name -> the sets it allows from) and the sets they name."""
    bodies = [
        (name, (*(f'ip saddr @{s} accept comment "{name}"' for s in used), "drop"))
        for name, used in sorted(chains.items())
    ]
    hooks = []
    for hook, key, parity in (("input", "iifname", 0), ("output", "oifname", 1)):
        jumps = [
            f'{key} "eth{name[1:]}" jump {name}'
            for name in sorted(chains)
            if int(name[1:]) % 2 == parity
        ]
        if jumps:
            head = f"type filter hook {hook} priority filter; policy accept;"
            hooks.append((hook, (head, "ct state established,related accept", *jumps)))
    named = sorted({s for used in chains.values() for s in used})
    return render.Table('comment "walk"', tuple(sets[s] for s in named), (*hooks, *bodies))


def _to_write(applied: render.Table, wanted: render.Table) -> set[str]:
    """The chains an update must write: those that differ, and those naming a set whose
    header changed (deleted and made again)."""
    old, new = dict(applied.chains), dict(wanted.chains)
    headers = {s.name: s.header for s in wanted.sets}
    remade = {s.name for s in applied.sets if headers.get(s.name, s.header) != s.header}
    return {
        name
        for name in old.keys() | new.keys()
        if old.get(name) != new.get(name) or any(f"@{s} " in r for r in new[name] for s in remade)
    }


@pytest.mark.netns
@pytest.mark.req("POL-UPDATE")
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_random_walk_updated_in_place_equals_the_tables_written_whole(
    netns: str, seed: int
) -> None:
    rng = random.Random(seed)
    sets = {f"s{n}": _address_set(rng, f"s{n}") for n in range(5)}
    chains = {name: rng.sample(sorted(sets), 2) for name in rng.sample(_CHAINS, 3)}
    applied = _walk_table(sets, chains)
    seen: set[str] = set()
    for step in range(30):
        for _ in range(rng.randint(1, 2)):
            change = rng.choice(("elements", "set", "rules", "add", "remove"))
            seen.add(change)
            if change in ("elements", "set"):
                name = rng.choice(sorted(sets))
                new = _address_set(rng, name)
                old = sets[name]
                if change == "elements":  # the same header: changed in place
                    new = render.NftSet(name, old.kind, old.comment, new.elements, old.interval)
                sets[name] = new
            elif change == "rules" or (change == "remove" and len(chains) == 1):
                chains[rng.choice(sorted(chains))] = rng.sample(sorted(sets), rng.randint(1, 3))
            elif change == "add":
                chains[rng.choice(_CHAINS)] = rng.sample(sorted(sets), rng.randint(1, 3))
            else:
                del chains[rng.choice(sorted(chains))]
        wanted = _walk_table(sets, chains)
        script = update.render_update(applied, wanted)
        if script is not None:
            assert chains_written(script) == _to_write(applied, wanted), (step, script)
            updated_in_place(netns, applied, wanted)
        applied = wanted
    assert seen == {"elements", "set", "rules", "add", "remove"}
