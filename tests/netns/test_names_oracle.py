"""Host interface names as the kernel resolves them, against a Go oracle (SEC-VALUES).

macvlan's `master`, bridge's `bridge` and host-device's `device` reach the kernel through
github.com/vishvananda/netlink's `LinkByName`, which sends the name NUL-terminated (the kernel
reads it up to the first NUL), as IFLA_ALT_IFNAME when it is over 15 bytes, and which the
kernel answers with the link whose primary name or alternative name (`ip link property add
... altname`) it is. tests/go/cnidecode's `-links` mode is the oracle: that very call, made
inside a network namespace of the test's own with a veth pair (one end standing for the node's
uplink) and bridges, each with alternative names, short and long.

Over generated spellings of those names (exact; with a NUL and more; over 15 bytes with a
protected name as the first 15; alternative names; cut; case variants; spaces; lone
surrogates, which Go's JSON decoder reads as U+FFFD; look-alike, full-width and zero-width
characters), each judged as a macvlan master, a bridge and a host-device device under a policy
that excludes the uplink and one bridge by their primary names:

    the guard's view is the kernel's: whenever the guard accepts a name (`ifnames.problem` finds
        nothing, `check.check_config` and `node_guard.judge_config` with the facts of
        that namespace refuse nothing), the oracle finds no link or the link of that very name
    what the kernel resolves to a protected link is refused: whenever the oracle resolves a
        spelling to a link the policy excludes for that key, the guard refuses the config

The node's facts are read inside the namespace (`node_guard.read_node_facts()` in a process
run there by nsenter); deleting the namespace at teardown deletes every link the test made.
"""

from __future__ import annotations

import base64
import json
import pickle
import secrets
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from netattach.guard import check, delegate_policy, globs, ifnames, node_state, refusal
from netattach.pods import node_guard
from tests import go_decoder
from tests.netns_fixtures import Node

pytestmark = [pytest.mark.netns, pytest.mark.req("SEC-VALUES")]

SRC = Path(__file__).resolve().parents[2] / "src"
# The plugin and the key of each config the names are judged in.
KEYS = {"macvlan": "master", "bridge": "bridge", "host-device": "device"}


class Names(NamedTuple):
    """The links of the test namespace: `uplink` (a veth end standing for the node's uplink)
    and `bridge` the protected ones; `peer` (the uplink's veth peer) and `other_bridge` (up)
    links a NAD may use; `altnames` each link's alternative names."""

    uplink: str
    peer: str
    bridge: str
    other_bridge: str
    altnames: dict[str, tuple[str, ...]]

    @property
    def links(self) -> tuple[str, ...]:
        return (self.uplink, self.peer, self.bridge, self.other_bridge)

    def protected(self, key: str) -> frozenset[str]:
        """The primary names the policy excludes for `key`."""
        if key == "master":
            return frozenset((self.uplink,))
        if key == "bridge":
            return frozenset((self.bridge,))
        return frozenset((self.uplink, self.bridge))


def _ip(node: Node, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["nsenter", f"--net={node.path}", "--", "ip", *args],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )


def _must(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, f"{done.args}: {done.stderr}"


def _add_altname(node: Node, link: str, altname: str) -> None:
    done = _ip(node, "link", "property", "add", "dev", link, "altname", altname)
    if done.returncode != 0:
        pytest.skip(f"the kernel or iproute2 refuses alternative names: {done.stderr.strip()}")


@pytest.fixture
def names(node: Node) -> Names:
    """The links, made in the test's node namespace (deleted with it at teardown). Each
    protected name is 15 bytes, the most the kernel takes, so that a longer spelling can have it
    as its first 15; each link has alternative names, one its name and more (over 15 bytes)."""
    token = secrets.token_hex(4)
    made = Names(
        uplink=f"na-upl-{token}",
        peer=f"na-pee-{token}",
        bridge=f"na-brg-{token}",
        other_bridge=f"na-brk-{token}",
        altnames={},
    )
    for name in made.links:
        assert len(name.encode()) == ifnames.IFNAMSIZ - 1, name
    _must(_ip(node, "link", "add", made.uplink, "type", "veth", "peer", "name", made.peer))
    _must(_ip(node, "link", "add", made.bridge, "type", "bridge"))
    _must(_ip(node, "link", "add", made.other_bridge, "type", "bridge"))
    _must(_ip(node, "link", "set", made.other_bridge, "up"))
    short = secrets.token_hex(3)
    altnames = {
        made.uplink: (f"{made.uplink}-alt", f"na-ua-{short}", f"na-uplink-alternative-{token}"),
        made.peer: (f"na-pa-{short}",),
        made.bridge: (f"{made.bridge}x", f"na-ba-{short}", f"na-bridge-alternative-{token}"),
        made.other_bridge: (f"na-ka-{short}",),
    }
    for link, alternatives in altnames.items():
        for altname in alternatives:
            _add_altname(node, link, altname)
    made.altnames.update(altnames)
    return made


@pytest.fixture(scope="module")
def oracle() -> go_decoder.Decoder:
    """tests/go/cnidecode, built once per source (skips without Go)."""
    return go_decoder.build_decoder()


def read_facts_in(node: Node) -> node_state.NodeFacts:
    """`node_guard.read_node_facts()` as a process inside the namespace reads it."""
    code = (
        f"import sys; sys.path.insert(0, {str(SRC)!r}); import base64, pickle; "
        "from netattach.pods import node_guard; "
        "print(base64.b64encode(pickle.dumps(node_guard.read_node_facts())).decode())"
    )
    done = subprocess.run(
        ["nsenter", f"--net={node.path}", "--", sys.executable, "-I", "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    facts = pickle.loads(base64.b64decode(done.stdout))
    assert isinstance(facts, node_state.NodeFacts)
    return facts


@pytest.fixture
def facts(node: Node, names: Names) -> node_state.NodeFacts:
    """The facts of the namespace with its links made (once for all examples of a property)."""
    return read_facts_in(node)


def rules_for(made: Names) -> delegate_policy.DelegateRules:
    """Any link but the protected ones, by primary name; every node change granted (this is
    about which link a name is, not what a plugin does to it)."""
    return delegate_policy.DelegateRules(
        types=globs.Patterns((*delegate_policy.DEFAULT_TYPES, "host-device")),
        master=globs.Patterns(("*", f"!{made.uplink}")),
        bridge=globs.Patterns(("*", f"!{made.bridge}")),
        device=globs.Patterns(("*", f"!{made.uplink}", f"!{made.bridge}")),
        node_changes=globs.Patterns(("*",)),
    )


def config(plugin: str, name: str) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "net", "type": plugin, KEYS[plugin]: name}


def refusals(
    raw: dict[str, Any], rules: delegate_policy.DelegateRules, facts: node_state.NodeFacts
) -> list[refusal.Refusal]:
    """What the guard refuses of `raw`: the config alone, then with the node's facts."""
    found = check.check_config(raw, rules)
    return found or node_guard.judge_config(raw, rules, facts, live=node_state.LiveAttachments())


def violations(
    spellings: Sequence[str],
    answers: Sequence[go_decoder.Reading],
    made: Names,
    rules: delegate_policy.DelegateRules,
    facts: node_state.NodeFacts,
    mix: Counter[str],
) -> list[str]:
    """Each spelling and config where the guard and the kernel part ways, said precisely."""
    found = []
    for spelling, answer in zip(spellings, answers, strict=True):
        resolved = answer["name"] if answer["found"] else None
        mix["found" if resolved else "not found"] += 1
        if "error" in answer:  # a name netlink or the kernel refuses (over 127 bytes): no link
            mix["lookup refused"] += 1
        if resolved is not None and resolved != spelling:
            mix["found as another name"] += 1
        for plugin, key in KEYS.items():
            refused = refusals(config(plugin, spelling), rules, facts)
            accepted = not refused and not ifnames.problem(spelling)
            mix["accepted" if accepted else "refused"] += 1
            if accepted and resolved is not None and resolved != spelling:
                found.append(
                    f"{plugin} {key} {spelling!r}: accepted, but the kernel resolves it to the "
                    f"link {resolved!r}"
                )
            if resolved in made.protected(key):
                mix["resolves to a protected link"] += 1
                if accepted:
                    found.append(
                        f"{plugin} {key} {spelling!r}: accepted, but the kernel resolves it to "
                        f"the protected link {resolved!r}"
                    )
    return found


# --- spellings -------------------------------------------------------------------------------

LOOKALIKES = {
    "a": "\u0430",  # Cyrillic a
    "e": "\u0435",
    "p": "\u0440",
    "c": "\u0441",
    "x": "\u0445",
    "k": "\u03ba",  # Greek kappa
    "l": "\u04cf",
    "-": "\u2010",  # hyphen
    "1": "\U0001d7cf",  # mathematical bold 1
}
INVISIBLE = ("\u200b", "\u200d", "\ufeff", "\u00ad", "\u0301")
SURROGATES = ("\ud800", "\udbff", "\udc00", "\udfff")
JUNK = st.text(alphabet="abcxyz019-_.%\u00e9\u00e0", min_size=1, max_size=6)


@st.composite
def spelling(draw: st.DrawFn, target: str) -> str:
    """One spelling of `target`: see the module's docstring."""
    form = draw(
        st.sampled_from(
            (
                "exact",
                "exact",
                "nul",
                "nul at the end",
                "long",
                "cut",
                "cut to 15 bytes",
                "upper",
                "swapcase",
                "title",
                "space",
                "surrogate",
                "U+FFFD",
                "look-alike",
                "full-width",
                "invisible",
                "junk",
            )
        )
    )
    if form == "nul":
        return f"{target}\0{draw(JUNK)}"
    if form == "nul at the end":
        return f"{target}\0"
    if form == "long":  # over 15 bytes, its first 15 the target's
        head = target.encode()[: ifnames.IFNAMSIZ - 1].decode("utf-8", "ignore")
        tail = draw(JUNK)
        while len((head + tail).encode()) < ifnames.IFNAMSIZ:
            tail += draw(JUNK)
        return head + tail
    if form == "cut":
        return target[: draw(st.integers(1, max(1, len(target) - 1)))]
    if form == "cut to 15 bytes":
        return target.encode()[: ifnames.IFNAMSIZ - 1].decode("utf-8", "ignore")
    if form == "upper":
        return target.upper()
    if form == "swapcase":
        index = draw(st.integers(0, len(target) - 1))
        return target[:index] + target[index].swapcase() + target[index + 1 :]
    if form == "title":
        return target.title()
    if form == "space":
        pad = draw(st.sampled_from((" ", "\t", "\n", "\u00a0")))
        return draw(st.sampled_from((target + pad, pad + target)))
    index = draw(st.integers(0, len(target)))
    if form == "surrogate":
        return target[:index] + draw(st.sampled_from(SURROGATES)) + target[index:]
    if form == "U+FFFD":  # what Go reads a lone surrogate escape as
        return target[:index] + "\ufffd" + target[index:]
    if form == "invisible":
        return target[:index] + draw(st.sampled_from(INVISIBLE)) + target[index:]
    if form in ("look-alike", "full-width"):
        spots = [i for i, c in enumerate(target) if c in LOOKALIKES or "!" <= c <= "~"]
        i = draw(st.sampled_from(spots))
        char = target[i]
        swapped = LOOKALIKES.get(char, char) if form == "look-alike" else chr(ord(char) + 0xFEE0)
        return target[:i] + swapped + target[i + 1 :]
    if form == "junk":
        return draw(JUNK)
    return target


def targets(made: Names) -> tuple[str, ...]:
    return (*made.links, *(a for alts in made.altnames.values() for a in alts), "lo")


# --- the tests -------------------------------------------------------------------------------


def test_the_oracle_resolves_names_as_the_kernel_does(
    node: Node, names: Names, facts: node_state.NodeFacts, oracle: go_decoder.Decoder
) -> None:
    """What the property relies on, once: the kernel resolves a name up to a NUL and by its
    alternative names, exactly otherwise (case, a long name's first 15 bytes); and the facts
    read in the namespace show the links with their alternative names."""
    up = names.uplink
    alt_long, alt_short, _ = names.altnames[up]
    expected = {
        up: up,
        f"{up}\0junk": up,
        alt_short: up,
        alt_long: up,  # over 15 bytes: its first 15 are the uplink's name, and it is an altname
        f"{up}y": None,  # over 15 bytes, first 15 the uplink's: no such altname
        up.upper(): None,
        f"{up} ": None,
        names.bridge: names.bridge,
        f"{names.bridge}\0": names.bridge,
    }
    answers = oracle.links(list(expected), node.path)
    got = {s: (a["name"] if a["found"] else None) for s, a in zip(expected, answers, strict=True)}
    assert got == expected
    links = {link.name: link for link in facts.links}
    for link, alternatives in names.altnames.items():
        assert set(alternatives) <= set(links[link].altnames), links[link]


def test_each_name_of_a_protected_link_is_refused(
    node: Node, names: Names, facts: node_state.NodeFacts, oracle: go_decoder.Decoder
) -> None:
    """Every spelling the kernel resolves to the uplink or the protected bridge, named: the
    exact names and the alternative ones, with a NUL and without."""
    spellings = []
    for link in (names.uplink, names.bridge):
        for name in (link, *names.altnames[link]):
            spellings += [name, f"{name}\0", f"{name}\0{names.peer}"]
    mix: Counter[str] = Counter()
    found = violations(
        spellings, oracle.links(spellings, node.path), names, rules_for(names), facts, mix
    )
    assert not found, "\n".join(found)
    assert mix["resolves to a protected link"] >= len(spellings), mix


NAME_BATCH = 60
NAME_BATCHES = 50  # 3,000 spellings, 9,000 configs a run


@pytest.fixture
def mix() -> Iterator[Counter[str]]:
    """How the spellings fared: after the property, checked to be a healthy mix."""

    def healthy(seen: Counter[str], total: int) -> None:
        for kind in ("found", "not found", "found as another name", "accepted", "refused"):
            assert seen[kind] >= total // 20, seen
        assert seen["resolves to a protected link"] >= total // 20, seen

    yield from go_decoder.checked_mix(("found", "not found"), NAME_BATCH * NAME_BATCHES, healthy)


@settings(
    max_examples=NAME_BATCHES,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # a failure names every spelling
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_the_guard_accepts_a_name_only_as_the_kernel_resolves_it(
    node: Node,
    names: Names,
    facts: node_state.NodeFacts,
    oracle: go_decoder.Decoder,
    mix: Counter[str],
    data: st.DataObject,
) -> None:
    every = st.sampled_from(targets(names))
    spellings = data.draw(
        st.lists(every.flatmap(spelling), min_size=NAME_BATCH, max_size=NAME_BATCH)
    )
    answers = oracle.links(spellings, node.path)
    found = violations(spellings, answers, names, rules_for(names), facts, mix)
    mix["failed"] += bool(found)
    assert not found, "\n".join(found) + "\n" + json.dumps(spellings)
