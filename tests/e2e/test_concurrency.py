"""RT-SERIAL: different containers in parallel, one container's operations one at a time."""

from __future__ import annotations

import ipaddress
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.e2e.daemon_harness import most_at_once
from tests.e2e.harness import NOTHING, Cluster, Pod, PodProbe, Reply, bridge_list, host_local, probe

pytestmark = pytest.mark.netns

PODS = 20
PROBE_SLEEP = 0.5  # long enough that 20 of them one after another would take 10 s


def probe_nad(cluster: Cluster, log: Path, sleep: float = 0.2) -> None:
    ipam = host_local(cluster.ipam, "10.81.0.0/22")
    cluster.add_nad("blue", "net-a", bridge_list(None, ipam, probe(log, sleep=sleep)))


def intervals(entries: list[PodProbe], command: str) -> dict[str, tuple[int, int]]:
    """container ID -> (start, end) of its probe call for `command`."""
    found: dict[str, tuple[int, int]] = {}
    starts = {p.container_id: p.ns for p in entries if p.command == command and p.what == "start"}
    for p in entries:
        if p.command == command and p.what == "end":
            found[p.container_id] = (starts[p.container_id], p.ns)
    return found


@pytest.mark.req("RT-SERIAL")
def test_twenty_pods_attach_in_parallel_with_distinct_addresses(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = tmp_path / "probe.log"
    probe_nad(cluster, log, PROBE_SLEEP)
    pods = [cluster.pod("blue", f"web-{n}", "net-a") for n in range(PODS)]

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=PODS) as pool:
        replies = list(pool.map(cluster.add, pods))
    elapsed = time.monotonic() - started

    assert [r.rc for r in replies] == [0] * PODS, [r for r in replies if r.rc]
    addresses: list[str] = []
    for pod in pods:
        status = cluster.status("blue", pod.name)
        assert status is not None
        assert [e["interface"] for e in status] == ["eth0", "net1"]
        addresses += [e["ips"][0] for e in status]
        kernel = cluster.interfaces(pod.netns)
        assert sorted(kernel) == ["eth0", "net1"]
    assert len(set(addresses)) == 2 * PODS
    assert len(cluster.allocations()) == 2 * PODS
    assert sorted(str(ipaddress.ip_interface(a).ip) for a in addresses) == sorted(
        a.split("/")[1] for a in cluster.allocations()
    )
    # Different containers really ran side by side: their probe calls overlapped, and the whole
    # burst took far less than one probe sleep per pod.
    adds = intervals(cluster.probe_log(log), "ADD")
    assert len(adds) == PODS
    assert most_at_once(list(adds.values())) >= 2
    assert elapsed < PODS * PROBE_SLEEP

    with ThreadPoolExecutor(max_workers=PODS) as pool:
        deleted = list(pool.map(cluster.delete, pods))
    assert [r.rc for r in deleted] == [0] * PODS, [r for r in deleted if r.rc]
    assert cluster.leftovers() == NOTHING


def wait_for_probe(cluster: Cluster, log: Path, command: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(p.command == command for p in cluster.probe_log(log)):
            return
        time.sleep(0.01)
    raise AssertionError(f"the probe never saw {command}")


@pytest.mark.req("RT-SERIAL")
def test_del_waits_for_the_add_of_the_same_container(cluster: Cluster, tmp_path: Path) -> None:
    log = tmp_path / "probe.log"
    probe_nad(cluster, log)
    pod = cluster.pod("blue", "web", "net-a,net-a")

    with ThreadPoolExecutor(max_workers=2) as pool:
        adding = pool.submit(cluster.add, pod)
        wait_for_probe(cluster, log, "ADD")  # the ADD is half-way: net1 made, net2 not yet
        deleting = pool.submit(cluster.delete, pod)
        add_reply, del_reply = adding.result(), deleting.result()

    assert add_reply.rc == 0, add_reply
    assert del_reply.rc == 0, del_reply
    # The DEL ran after the whole ADD: it deleted both attachments, newest first.
    entries = [(p.what, p.command, p.ifname) for p in cluster.probe_log(log)]
    assert entries == [
        ("start", "ADD", "net1"),
        ("end", "ADD", "net1"),
        ("start", "ADD", "net2"),
        ("end", "ADD", "net2"),
        ("start", "DEL", "net2"),
        ("end", "DEL", "net2"),
        ("start", "DEL", "net1"),
        ("end", "DEL", "net1"),
    ]
    assert cluster.leftovers() == NOTHING


def end_state(cluster: Cluster, pod: Pod) -> str:
    """ "attached" or "gone"; anything in between fails the test."""
    left = cluster.leftovers()
    if left == NOTHING:
        return "gone"
    cid = pod.container_id
    assert left["pod records"] == [f"{cid}.json"], left
    assert len(left["cache records"]) == 2, left
    assert len(left["allocations"]) == 2, left
    assert sorted(cluster.interfaces(pod.netns)) == ["eth0", "net1"], left
    assert left["status files"] == [f"blue/{pod.name}.json"], left
    return "attached"


@pytest.mark.req("RT-SERIAL")
def test_racing_add_and_del_of_one_container_never_leave_half_a_pod(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = tmp_path / "probe.log"
    probe_nad(cluster, log)
    seen: set[str] = set()
    for round_ in range(4):
        pod = cluster.pod("blue", f"web-{round_}", "net-a")
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures: list[Future[Reply]] = [
                pool.submit(cluster.add, pod),
                pool.submit(cluster.delete, pod),
            ]
            replies = [f.result() for f in futures]
        assert [r.rc for r in replies] == [0, 0], replies
        seen.add(end_state(cluster, pod))
        # No two probe calls of this container overlapped.
        mine = [p for p in cluster.probe_log(log) if p.container_id == pod.container_id]
        spans = list(intervals(mine, "ADD").values()) + list(intervals(mine, "DEL").values())
        assert most_at_once(spans) <= 1
        assert cluster.delete(pod).rc == 0
        assert cluster.leftovers() == NOTHING
    assert seen <= {"attached", "gone"}
