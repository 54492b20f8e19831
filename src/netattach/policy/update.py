"""From the table a pod's netns holds to the one it should hold: one nft transaction, or none.

Pure. `render_update(applied, wanted)` gives the script that changes only what differs (POL-UPDATE,
each change atomic):

    nothing differs              None: no write at all
    only set elements differ     `delete element` / `add element` on those sets (a peer left,
                                 a peer joined), nothing else; an interval set that loses more
                                 than `DELETE_MAX` elements is flushed and refilled instead
    rules or sets differ too     every chain flushed and written again, sets no rule names any
                                 more deleted, new sets defined, the element changes of the
                                 sets kept — in the same transaction

A set is kept (and changed in place) while its name, type and comment stay; set names come from
what a set selects, so peers coming and going never rename one. `nft -f` runs a script as one
transaction: a failing script leaves the table as it was.
"""

from __future__ import annotations

from netattach.policy.render import TABLE, NftSet, Table, chain_lines, set_lines

_T = f"inet {TABLE}"
DELETE_MAX = 8  # more elements gone from one interval set than this: it is refilled instead


def _elements(verb: str, name: str, elements: list[str]) -> str:
    return f"{verb} element {_T} {name} {{ {', '.join(elements)} }}"


def _deltas(old: NftSet, new: NftSet) -> tuple[list[str], list[str]]:
    """(delete lines, add lines) taking `old`'s elements to `new`'s."""
    if old.elements is new.elements or old.elements == new.elements:
        return [], []
    before, after = set(old.elements), set(new.elements)
    gone = [e for e in old.elements if e not in after]
    added = [e for e in new.elements if e not in before]
    if len(gone) > DELETE_MAX and new.interval:
        # nft deletes interval elements one by one against the whole set (~5 ms each in a set
        # of 12,000): emptying the set and adding it back is one cheap step instead.
        return [f"flush set {_T} {new.name}"], [_elements("add", new.name, list(new.elements))]
    return (
        [_elements("delete", new.name, gone)] if gone else [],
        [_elements("add", new.name, added)] if added else [],
    )


def render_update(applied: Table, wanted: Table) -> str | None:
    """The script taking the table from `applied` to `wanted`; None when they are equal."""
    if applied == wanted:
        return None
    old_sets = {s.name: s for s in applied.sets}
    new_sets = {s.name: s for s in wanted.sets}
    kept = {
        name
        for name, s in new_sets.items()
        if name in old_sets and old_sets[name].header == s.header
    }
    deletes: list[str] = []
    adds: list[str] = []
    for name in sorted(kept):
        gone, added = _deltas(old_sets[name], new_sets[name])
        deletes += gone
        adds += added
    if (
        applied.chains == wanted.chains
        and applied.comment == wanted.comment
        and kept == set(old_sets) == set(new_sets)
    ):
        return "\n".join([*deletes, *adds]) + "\n"
    # The rules change: flush every chain first, so no rule names a set about to go.
    lines = [f"flush chain {_T} {name}" for name, _ in applied.chains]
    wanted_chains = {name for name, _ in wanted.chains}
    lines += [
        f"delete chain {_T} {name}" for name, _ in applied.chains if name not in wanted_chains
    ]
    lines += [f"delete set {_T} {name}" for name in sorted(set(old_sets) - kept)]
    lines += deletes + adds
    lines += [f"table {_T} {{", f"\t{wanted.comment}"]
    for name in sorted(set(new_sets) - kept):
        lines += set_lines(new_sets[name])
    for name, body in wanted.chains:
        lines += chain_lines(name, body)
    lines.append("}")
    return "\n".join(lines) + "\n"


__all__ = ["render_update"]
