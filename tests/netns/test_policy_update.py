"""`policy.update` against the kernel: a table changed in place equals the table written fresh.

One netns gets a pod's table once and then only `render_update` scripts, through a sequence of
cluster changes (peers relabelled, added and deleted; policies edited, added and deleted); a
second netns gets each wanted table whole. After every step both hold the same sets, elements,
chains and rules (`nft -j list table`, handles aside). Peer-only changes must be element
changes, and no change must be no write at all.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from bench import policy_corpus

from netattach.policy import apply, compile, model, render, update
from tests.nft_tables import listing, nft

pytestmark = pytest.mark.netns


@pytest.fixture
def two_netns() -> Iterator[tuple[str, str]]:
    if os.geteuid() != 0 or shutil.which("nft") is None:
        pytest.skip("needs root and nft")
    names = [f"na-upd-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for name in names:
        subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield names[0], names[1]
    finally:
        for name in names:
            subprocess.run(["ip", "netns", "delete", name], check=False)


def _relabelled(rng: random.Random, pod: dict[str, Any]) -> dict[str, Any]:
    labels = {**pod["metadata"]["labels"], "app": rng.choice(policy_corpus.APPS)}
    return {**pod, "metadata": {**pod["metadata"], "labels": labels}}


@pytest.mark.req("POL-UPDATE")
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_table_updated_in_place_equals_the_table_written_whole(
    two_netns: tuple[str, str], seed: int
) -> None:
    in_place, fresh = two_netns
    helper = apply.NftHelper()
    try:
        _updated_in_place(in_place, fresh, seed, helper)
    finally:
        helper.close()


def lines(script: str) -> list[str]:
    return script.splitlines()


def _updated_in_place(in_place: str, fresh: str, seed: int, helper: apply.NftHelper) -> None:
    corpus = policy_corpus.build_corpus(policies=60, pods=60, seed=seed)
    policies, _ = model.parse_policies(corpus.policies)  # type: ignore[arg-type]
    compiler = compile.Compiler()
    for ns in corpus.namespaces:
        compiler.set_namespace(ns["metadata"]["name"], ns["metadata"]["labels"])
    pods = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in corpus.pods}
    for pod in pods.values():
        compiler.set_pod(compiler.view(pod))  # type: ignore[arg-type]
    compiler.set_policies(policies)
    key = sorted(pods)[seed]
    compiler.set_target(compiler.view(pods[key]))  # type: ignore[arg-type]
    applied = render.build_table(key, compiler.rules(key))
    assert applied is not None
    nft(in_place, render.table_text(applied))
    rng = random.Random(seed)
    kinds: set[str] = set()
    for step in range(30):
        change = rng.choice(("relabel", "relabel", "add", "delete", "policies"))
        if change == "relabel":
            name = rng.choice(sorted(pods))
            pods[name] = _relabelled(rng, pods[name])
            compiler.set_pod(compiler.view(pods[name]))  # type: ignore[arg-type]
        elif change == "add":
            pod = _relabelled(rng, pods[rng.choice(sorted(pods))])
            pod["metadata"] = {**pod["metadata"], "name": f"extra-{step}"}
            compiler.set_pod(compiler.view(pod))  # type: ignore[arg-type]
        elif change == "delete":
            compiler.remove_pod(rng.choice([k for k in sorted(pods) if k != key]))
        else:
            compiler.set_policies(rng.sample(policies, rng.randrange(len(policies) // 2, 60)))
        compiler.compile_changed()
        wanted = render.build_table(key, compiler.rules(key))
        if wanted is None:
            continue  # no policy selects the pod any more (the daemon removes the table)
        changes = update.set_changes(applied, wanted)
        script = update.render_update(applied, wanted)
        if changes:
            # written as the daemon writes them: netlink messages, by the nft helper
            kinds.add("netlink")
            assert script is not None
            assert all(line.startswith(("add element", "delete element")) for line in lines(script))
            asyncio.run(apply.update_elements(f"/run/netns/{in_place}", changes, helper=helper))
        elif script is None:
            kinds.add("none")
            assert wanted == applied
        else:
            peers_only = all(
                line.startswith(("add element", "delete element", "flush set"))
                for line in script.splitlines()
            )
            kinds.add("elements" if peers_only else "rules")
            nft(in_place, script)
        nft(fresh, render.table_text(wanted))
        assert listing(in_place) == listing(fresh), (step, change, script)
        applied = wanted
    assert "netlink" in kinds  # peers changed in place (and, with some seeds, rules too)
