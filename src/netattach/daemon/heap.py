"""The cyclic garbage collector, set for the node daemon: a big cache, rebuilt a little at a time.

The daemon holds every pod, namespace, NAD and policy of the cluster (~100,000 objects that
live as long as it does), and each policy pass builds tens of thousands more that live until
the next pass (the compiled rules, their address sets). Python's collector, left at its default
(a young collection every 700 net allocations), traversed those survivors again and again as it
promoted them, and every tenth promotion into the old generation ran a full collection over the
whole heap: in `make bench-policy-churn` that was ~4,000 young collections, ~370 middle ones and
~17 full ones of ~140 ms each in 30 s, about a quarter of the daemon's CPU, each full one a
pause of every pass and every CNI call then running.

A young collection every `YOUNG_THRESHOLD` net allocations instead lets a pass's temporaries
die first (reference counting frees what holds no cycle, and almost nothing here does): ~30
young collections and ~3 middle ones in the same 30 s, no full one, churn p99 0.76 s -> 0.42 s.
What waits longer to be found is cyclic garbage only, which the daemon makes little of.

A young collection still traverses every container made since the last one that is alive, and
a pass's survivors hold big tuples (a changed selection's addresses, thousands of references
each): under churn one came every ~50 passes and took 20-180 ms, inside whichever pass made the
allocation that crossed the threshold, delaying every change that pass carried. So a pass loop
runs the coming collection itself once it is more than half due (`collect_between_passes`),
after a pass, while nothing waits: as many collections, none inside a pass.
"""

import gc

YOUNG_THRESHOLD = 50_000


def tune() -> None:
    """Set the collector for a long-lived daemon (the older generations' ratios kept)."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)


EARLY = 0.5  # a young collection this close to its threshold is run between passes


def collect_between_passes() -> None:
    """Run the collection the next allocations would run, now (after a pass, before the next),
    once the young generation is more than `EARLY` of its threshold; the middle one with it
    when that one is due, as the collector would."""
    young, middle, _ = gc.get_count()
    young_limit, middle_limit, _ = gc.get_threshold()
    if not gc.isenabled() or young < young_limit * EARLY:
        return
    gc.collect(1 if middle + 1 > middle_limit else 0)
