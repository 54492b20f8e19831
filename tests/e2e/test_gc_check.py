"""CNI 1.1 GC and CHECK through the thin plugin."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from netattach.netns import namespace
from tests.e2e.harness import DEFAULT_NETWORK, NOTHING, Cluster, net_a

pytestmark = pytest.mark.netns


@pytest.mark.req("RT-GC", "CNI-11")
def test_gc_frees_every_container_not_named_valid(cluster: Cluster) -> None:
    net_a(cluster)
    kept = cluster.pod("blue", "kept", "net-a")
    stale = cluster.pod("blue", "stale", "net-a,net-a")
    for pod in (kept, stale):
        reply = cluster.add(pod)
        assert reply.rc == 0, reply
    kept_before = cluster.interfaces(kept.netns)
    assert len(cluster.allocations()) == 5  # kept: eth0 + net1, stale: eth0 + net1 + net2

    reply = cluster.gc([kept.container_id])

    assert (reply.rc, reply.out) == (0, None), reply
    assert cluster.interfaces(stale.netns) == {}
    cid = kept.container_id
    assert cluster.pod_records() == [f"{cid}.json"]
    assert cluster.cache_records() == [f"{DEFAULT_NETWORK}:{cid}:eth0", f"net-a:{cid}:net1"]
    assert cluster.status_files() == ["blue/kept.json"]
    # The valid one is untouched: same interfaces, addresses and MACs, its two allocations.
    assert cluster.interfaces(kept.netns) == kept_before
    status = cluster.status("blue", "kept")
    assert status is not None
    kept_ips = sorted(f"{e['name'].split('/')[-1]}/{e['ips'][0].split('/')[0]}" for e in status)
    assert cluster.allocations() == kept_ips

    # With nothing valid, GC takes the last one too.
    assert cluster.gc([]).rc == 0
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("RT-GC", "RT-ATOMIC")
def test_gc_frees_a_container_whose_pod_record_is_corrupt(cluster: Cluster) -> None:
    net_a(cluster)
    pod = cluster.pod("blue", "web", "net-a")
    assert cluster.add(pod).rc == 0
    (cluster.state / "pods" / f"{pod.container_id}.json").write_bytes(b'{"kind": "netat')

    reply = cluster.gc([])

    assert (reply.rc, reply.out) == (0, None), reply
    left = cluster.leftovers()
    del left["status files"]  # found through the pod record, which is unreadable: not asserted
    assert left == {key: value for key, value in NOTHING.items() if key != "status files"}


@pytest.mark.req("RT-GC")
def test_state_dir_holds_nothing_per_container_once_every_pod_is_gone(cluster: Cluster) -> None:
    net_a(cluster)
    pods = [cluster.pod("blue", f"web-{n}", "net-a") for n in range(3)]
    for pod in pods:
        assert cluster.add(pod).rc == 0
    assert cluster.delete(pods[0]).rc == 0
    assert cluster.delete(pods[0]).rc == 0
    assert cluster.gc([]).rc == 0  # takes pods 1 and 2
    assert cluster.leftovers() == NOTHING

    per_container = sorted(
        str(path.relative_to(cluster.state))
        for path in cluster.state.rglob("*")
        if path.is_file() and any(pod.container_id in path.name for pod in pods)
    )
    assert per_container == []


def addresses_of(cluster: Cluster, netns: str, ifname: str) -> list[str]:
    return [a for a in cluster.interfaces(netns)[ifname].addresses if ":" not in a]


@pytest.mark.req("CNI-CHECK")
def test_check_passes_after_add_and_fails_once_an_address_is_gone(cluster: Cluster) -> None:
    net_a(cluster)
    pod = cluster.pod("blue", "web", "net-a")
    assert cluster.add(pod).rc == 0

    ok = cluster.check(pod)
    assert (ok.rc, ok.out) == (0, None), ok

    [address] = addresses_of(cluster, pod.netns, "net1")
    subprocess.run(
        ["nsenter", f"--net={pod.netns}", "--", "ip", "addr", "del", address, "dev", "net1"],
        check=True,
        timeout=10,
    )
    broken = cluster.check(pod)

    assert broken.rc == 1
    assert broken.code == 999  # the bridge plugin's own code, passed through
    assert broken.out["msg"].startswith(
        "[blue/web/uid-web:blue/net-a] plugin bridge failed (check): "
    )
    assert address.split("/")[0] in broken.out["msg"]
    assert cluster.delete(pod).rc == 0
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("CNI-CHECK")
def test_check_without_add_is_unknown_container(cluster: Cluster) -> None:
    pod = cluster.pod("blue", "web", None)

    reply = cluster.check(pod)

    assert reply.rc == 1
    assert reply.code == 3
    assert reply.out["msg"] == f"container {pod.container_id} has no completed ADD to check"


@pytest.mark.req("RT-GC")
@pytest.mark.parametrize("feed", ["directory", "kubernetes"])
def test_the_periodic_sweep_frees_pods_whose_sandbox_vanished_without_a_del(
    cluster: Cluster, feed: str
) -> None:
    """`netattach gc` reads the pod records only: on a Kubernetes-feed node (a kubeconfig that
    does not even exist here) it sweeps all the same, without contacting any API."""
    net_a(cluster)
    gone = cluster.pod("blue", "gone", "net-a")
    kept = cluster.pod("blue", "kept", "net-a")
    assert cluster.add(gone).rc == 0
    assert cluster.add(kept).rc == 0
    namespace.remove(Path(gone.netns).name)  # the runtime tore the sandbox down, no DEL came
    settings = dict(cluster.settings)
    if feed == "kubernetes":
        settings["feed"] = {"kubernetes": {"kubeconfig": str(cluster.root / "no-kubeconfig")}}
        settings["nodeName"] = "node-a"
    settings_file = cluster.root / "settings.yaml"
    settings_file.write_text(json.dumps(settings))

    done = subprocess.run(
        [
            "nsenter",
            f"--net={cluster.node.path}",
            "--",
            str(Path(sys.executable).parent / "netattach"),
            "gc",
            "--config",
            str(settings_file),
        ],
        capture_output=True,
        text=True,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"deleted the attachments of container {gone.container_id} (its netns is gone)",
        "1 stale containers deleted",
    ]
    assert cluster.pod_records() == [f"{kept.container_id}.json"]
    assert sorted(r.split(":")[1] for r in cluster.cache_records()) == [kept.container_id] * 2
    assert len(cluster.allocations()) == 2  # the kept pod's two addresses only
    assert cluster.delete(kept).rc == 0
    # A Kubernetes-feed sweep touches no status (the API pod is gone with its annotation):
    # the status file the directory-fed ADD wrote for the vanished pod stays.
    kept_status = [] if feed == "directory" else ["blue/gone.json"]
    assert cluster.leftovers() == {**NOTHING, "status files": kept_status}
