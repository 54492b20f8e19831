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
"""

import gc

YOUNG_THRESHOLD = 50_000


def tune() -> None:
    """Set the collector for a long-lived daemon (the older generations' ratios kept)."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
