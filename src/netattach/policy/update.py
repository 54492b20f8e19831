"""From the table a pod's netns holds to the one it should hold: one nft transaction, or none.

Pure. `render_update(applied, wanted)` gives the script that changes only what differs (POL-UPDATE,
each change atomic):

    nothing differs              None: no write at all
    only set elements differ     `delete element` / `add element` on those sets (a peer left,
                                 a peer joined), nothing else; an interval set that loses more
                                 than `DELETE_MAX` elements is flushed and refilled instead
    rules or sets differ too     only the chains that differ: one whose rules changed flushed
                                 and written again, one gone flushed and deleted, a new one
                                 added; sets no rule names any more deleted, new sets defined,
                                 the element changes of the sets kept — in the same transaction.
                                 A chain left as it was is not in the script (nft parses and
                                 checks only what is written), unless it names a set made again
                                 under the same name (its comment changed): nft deletes no set a
                                 rule names, so that chain is flushed and written again too

A set is kept (and changed in place) while its name, type and comment stay; set names come from
what a set selects, so peers coming and going never rename one. `nft -f` runs a script as one
transaction: a failing script leaves the table as it was.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from netattach.policy.render import TABLE, NftSet, Table, chain_lines, set_lines
from netattach.policy.selection import Elements, HostSet

_T = f"inet {TABLE}"
_SET_REF = re.compile(r"@(\w+)")  # a set a rule names (set names are word characters)
DELETE_MAX = 8  # more elements gone from one interval set than this: it is refilled instead


def _elements(verb: str, name: str, elements: list[str]) -> str:
    return f"{verb} element {_T} {name} {{ {', '.join(elements)} }}"


# (old elements, new elements) by their ids -> the two, and (gone, added). Many pods' tables
# hold the same set (one selection) at the same version, so the caller of several updates
# (a pass) can have each pair diffed once; an entry keeps both alive, so an id is never
# reused while it stands.
Diffs = dict[tuple[int, int], tuple[Elements, Elements, list[str], list[str]]]


def _diff(old: Elements, new: Elements, diffs: Diffs) -> tuple[list[str], list[str]]:
    """(gone, added), each sorted (nft takes elements in any order): from the hosts a host set
    gained and lost since the old one when it knows them, else by comparing the two whole
    (set operations in C, not a loop over every element of both)."""
    found = diffs.get((id(old), id(new)))
    if found is not None and found[0] is old and found[1] is new:
        return found[2], found[3]
    changes = None
    if isinstance(new, HostSet) and isinstance(old, HostSet):
        changes = new.changes_from(old)
    if changes is None:
        before, after = frozenset(old.texts()), frozenset(new.texts())
        changes = sorted(before - after), sorted(after - before)
    diffs[(id(old), id(new))] = (old, new, *changes)
    return changes


def _deltas(old: NftSet, new: NftSet, diffs: Diffs) -> tuple[list[str], list[str]]:
    """(delete lines, add lines) taking `old`'s elements to `new`'s."""
    if old.elements == new.elements:
        return [], []
    gone, added = _diff(old.elements, new.elements, diffs)
    if len(gone) > DELETE_MAX and new.interval:
        # nft deletes interval elements one by one against the whole set (~5 ms each in a set
        # of 12,000): emptying the set and adding it back is one cheap step instead.
        return [f"flush set {_T} {new.name}"], [
            _elements("add", new.name, list(new.elements.texts()))
        ]
    return (
        [_elements("delete", new.name, gone)] if gone else [],
        [_elements("add", new.name, added)] if added else [],
    )


@dataclass(frozen=True, slots=True)
class SetChange:
    """Elements gone from and added to one hash set of addresses, in place."""

    name: str
    kind: str  # ipv4_addr, ipv6_addr
    gone: list[str]
    added: list[str]


def set_changes(
    applied: Table, wanted: Table, diffs: Diffs | None = None
) -> list[SetChange] | None:
    """What changes when the tables differ in elements of their hash sets alone (empty when in
    nothing); None when anything else differs (`render_update` writes that).

    These are what most updates under churn are: a peer joined, a peer left. The nft helper
    writes them as netlink messages (`policy.nft_helper`), without nft's parse and reads."""
    diffs = {} if diffs is None else diffs
    if applied.chains != wanted.chains or applied.comment != wanted.comment:
        return None
    if len(applied.sets) != len(wanted.sets):
        return None
    out = []
    for old, new in zip(applied.sets, wanted.sets, strict=True):
        if old is new:
            continue
        if old.name != new.name or old.header != new.header:
            return None
        if old.elements is new.elements:
            continue
        if new.interval:
            if old.elements == new.elements:
                continue
            return None
        # (two host sets are compared by what changed between them, not element by element)
        gone, added = _diff(old.elements, new.elements, diffs)
        if gone or added:
            out.append(SetChange(new.name, new.kind, gone, added))
    return out


def changes_text(changes: list[SetChange]) -> str | None:
    """`changes` as an nft script (where the nft helper cannot write them); None for none."""
    deletes = [_elements("delete", c.name, c.gone) for c in changes if c.gone]
    adds = [_elements("add", c.name, c.added) for c in changes if c.added]
    return "\n".join([*deletes, *adds]) + "\n" if deletes or adds else None


def render_update(applied: Table, wanted: Table, diffs: Diffs | None = None) -> str | None:
    """The script taking the table from `applied` to `wanted`; None when they are equal.

    `diffs`: element diffs already made, shared by the updates of one pass (it fills it)."""
    diffs = {} if diffs is None else diffs
    if applied == wanted:
        return None
    old_sets = {s.name: s for s in applied.sets}
    new_sets = {s.name: s for s in wanted.sets}
    # (a set the new table took over as it was is the same object: no need to compare it)
    kept = {
        name
        for name, s in new_sets.items()
        if (old := old_sets.get(name)) is not None and (old is s or old.header == s.header)
    }
    deletes: list[str] = []
    adds: list[str] = []
    for name in sorted(kept):
        gone, added = _deltas(old_sets[name], new_sets[name], diffs)
        deletes += gone
        adds += added
    if (
        applied.chains == wanted.chains
        and applied.comment == wanted.comment
        and kept == set(old_sets) == set(new_sets)
    ):
        if not deletes and not adds:
            return None  # the same elements, held by sets made apart
        return "\n".join([*deletes, *adds]) + "\n"
    old_chains = dict(applied.chains)
    new_chains = dict(wanted.chains)
    sets_gone = set(old_sets) - kept  # deleted: no longer wanted, or made again with a new header
    # Written again: the chains whose rules changed, and those naming a set deleted here (an
    # unchanged chain names only sets `wanted` holds, so such a set is made again).
    changed = [
        name
        for name, body in wanted.chains
        if name in old_chains and (old_chains[name] != body or _names_any(body, sets_gone))
    ]
    fresh = [name for name, _ in wanted.chains if name not in old_chains]
    removed = [name for name, _ in applied.chains if name not in new_chains]
    # Only a chain rewritten or removed can name a set or chain about to go: each is flushed
    # before any of those is deleted (nft deletes nothing a rule names).
    lines = [f"flush chain {_T} {name}" for name in (*changed, *removed)]
    lines += [f"delete chain {_T} {name}" for name in removed]
    lines += [f"delete set {_T} {name}" for name in sorted(sets_gone)]
    lines += deletes + adds
    lines += [f"table {_T} {{", f"\t{wanted.comment}"]
    for name in sorted(set(new_sets) - kept):
        lines += set_lines(new_sets[name])
    # New chains first: a rewritten chain may jump to one. A base chain written again
    # declares its hook again, the same one, which nft takes for the chain it has.
    for name in (*fresh, *changed):
        lines += chain_lines(name, new_chains[name])
    lines.append("}")
    return "\n".join(lines) + "\n"


def _names_any(body: tuple[str, ...], sets: set[str]) -> bool:
    """Whether a rule of `body` names one of `sets`."""
    return bool(sets) and any(name in sets for line in body for name in _SET_REF.findall(line))


__all__ = ["Diffs", "SetChange", "changes_text", "render_update", "set_changes"]
