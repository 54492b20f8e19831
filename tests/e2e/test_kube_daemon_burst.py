"""Many pods at once through the daemon on the Kubernetes feed: the bound on delegates with pods
and NADs served from the API's cache, and a kill -9 in the middle of a burst.

The same two tests as tests/e2e/test_daemon_burst.py, with the pods and NADs in the fake API
(in the node namespace, see tests/e2e/kube_harness.py) instead of the manifest directory.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.e2e.burst_harness import (
    BURST,
    KILL_BURST,
    LIMIT,
    PROBE_SLEEP,
    Gauges,
    kill_mid_burst_then_del_all,
    probe_spans,
    traced_loopback_default,
)
from tests.e2e.daemon_harness import (
    DaemonNode,
    daemon,
    most_at_once,
    native_shim,
    trace_spans,
    wait_for,
)
from tests.e2e.harness import DEFAULT_NETWORK, NOTHING, bridge_list, host_local, probe
from tests.e2e.kube_daemon_harness import (
    NS,
    WATCH_TIMEOUT,
    api_pods,
    kube_api,
    kube_daemon,
    pod_reads,
    statuses,
    watches_past,
)
from tests.e2e.kube_harness import RemoteKubeApi
from tests.kube import objects

pytestmark = pytest.mark.netns

__all__ = ["daemon", "kube_api", "kube_daemon", "native_shim"]  # the fixtures this module uses


@pytest.mark.req("RT-LIMIT", "KUBE-CACHE")
def test_a_burst_of_100_adds_from_the_api_runs_at_most_max_concurrent_delegates(
    kube_daemon: DaemonNode, kube_api: RemoteKubeApi, tmp_path: Path
) -> None:
    """100 pods of the API at once with `maxConcurrentDelegates: 4` (see the directory feed's
    test for why the overlap of the logged plugin executions proves the bound)."""
    daemon, cluster = kube_daemon, kube_daemon.cluster
    trace_log, probe_log = traced_loopback_default(daemon, tmp_path)
    kube_api.create(
        objects.nad(
            "net-p",
            NS,
            config={"cniVersion": "1.0.0", "plugins": [probe(probe_log, sleep=PROBE_SLEEP)]},
        )
    )
    pods = api_pods(kube_api, cluster, BURST, "net-p")
    written = int(kube_api.resource_version)
    daemon.start()
    # KUBE-CACHE: every pod and the NAD are in the daemon's cache before the burst comes.
    wait_for("watches past the pods", lambda: watches_past(kube_api, written), WATCH_TIMEOUT)
    kube_api.clear_requests()

    with Gauges(daemon) as gauges, ThreadPoolExecutor(max_workers=BURST) as pool:
        added = list(pool.map(lambda pod: daemon.shim("ADD", pod), pods))

    assert [r.rc for r in added] == [0] * BURST, ([r for r in added if r.rc][:3], daemon.log_text())
    assert statuses(kube_api) == {
        pod.name: [(DEFAULT_NETWORK, True), (f"{NS}/net-p", False)] for pod in pods
    }
    assert pod_reads(kube_api) == []  # every pod served from the cache
    adds = probe_spans(cluster.probe_log(probe_log), "ADD")
    assert sorted(adds) == sorted(pod.container_id for pod in pods)
    traced = trace_spans(trace_log)
    assert len(traced) >= BURST
    assert most_at_once(list(adds.values())) <= LIMIT
    assert most_at_once([*adds.values(), *traced]) == LIMIT
    assert max(gauges.running) <= LIMIT
    assert daemon.requests("ADD", "0") == float(BURST)

    trace_log.unlink()
    with ThreadPoolExecutor(max_workers=BURST) as pool:
        deleted = list(pool.map(lambda pod: daemon.shim("DEL", pod), pods))
    assert [(r.rc, r.out) for r in deleted] == [(0, None)] * BURST, daemon.log_text()
    dels = probe_spans(cluster.probe_log(probe_log), "DEL")
    assert len(dels) == BURST
    assert most_at_once([*dels.values(), *trace_spans(trace_log)]) == LIMIT
    assert statuses(kube_api) == {}
    assert cluster.leftovers() == NOTHING
    assert daemon.stop() == 0


@pytest.mark.req("RT-ATOMIC")
def test_kill_9_mid_burst_of_api_pods_then_del_through_the_restarted_daemon_frees_everything(
    kube_daemon: DaemonNode, kube_api: RemoteKubeApi, tmp_path: Path
) -> None:
    daemon, cluster = kube_daemon, kube_daemon.cluster
    log = tmp_path / "probe.log"
    config = bridge_list(None, host_local(cluster.ipam, "10.81.0.0/24"), probe(log, sleep=0.3))
    kube_api.create(objects.nad("net-a", NS, config=config))
    pods = api_pods(kube_api, cluster, KILL_BURST, "net-a")
    daemon.start()

    kill_mid_burst_then_del_all(daemon, pods, log)  # the fake API stays up throughout
    assert statuses(kube_api) == {}
    assert daemon.stop() == 0
