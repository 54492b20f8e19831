"""Failed ADDs undone, and DEL in every state a pod's records can be in."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from netattach.netns import namespace
from tests.e2e.harness import NOTHING, Cluster, Pod, bridge_list, host_local, net_a, probe

pytestmark = pytest.mark.netns


def probe_nad(cluster: Cluster, name: str, subnet: str, log: Path, **probe_kw: object) -> None:
    """A NAD `blue/<name>`: bridge + host-local, then the probe plugin logging to `log`."""
    fail = probe_kw.get("fail_del_while")
    assert fail is None or isinstance(fail, Path)
    cluster.add_nad(
        "blue",
        name,
        bridge_list(None, host_local(cluster.ipam, subnet), probe(log, fail_del_while=fail)),
    )


def calls(cluster: Cluster, log: Path) -> list[tuple[str, str]]:
    """(command, ifname) of every probe call that started."""
    return [(p.command, p.ifname) for p in cluster.probe_log(log) if p.what == "start"]


@pytest.mark.req("RT-ADDFAIL")
def test_failing_attachment_undoes_the_earlier_ones_in_reverse(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = tmp_path / "probe.log"
    probe_nad(cluster, "net-a", "10.81.0.0/24", log)
    bad_tuning = {
        "type": "tuning",
        "dataDir": str(tmp_path / "tuning"),
        "sysctl": {"net.nonexistent.key": "1"},
    }
    cluster.add_nad(
        "blue", "net-b", bridge_list(None, host_local(cluster.ipam, "10.82.0.0/24"), bad_tuning)
    )
    later = tmp_path / "later.log"
    probe_nad(cluster, "net-c", "10.83.0.0/24", later)
    pod = cluster.pod("blue", "web", "net-a,net-a,net-b,net-c")

    reply = cluster.add(pod)

    assert reply.rc == 1
    assert reply.code == 999  # tuning's own code, passed through
    assert reply.out["msg"] == (
        "[blue/web/uid-web:blue/net-b] plugin tuning failed (add): "
        "open /proc/sys/net/nonexistent/key: no such file or directory"
    )
    # net1 and net2 were made, then deleted newest first; the fourth was never tried.
    assert calls(cluster, log) == [
        ("ADD", "net1"),
        ("ADD", "net2"),
        ("DEL", "net2"),
        ("DEL", "net1"),
    ]
    assert calls(cluster, later) == []
    assert cluster.leftovers() == NOTHING
    # The runtime's DEL afterwards finds nothing to do.
    assert cluster.delete(pod).rc == 0
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("RT-ADDFAIL", "CNI-FIND")
def test_plugin_not_installed_leaks_nothing(cluster: Cluster) -> None:
    net_a(cluster)
    missing = {"type": "na-not-installed"}
    cluster.add_nad(
        "blue", "net-x", bridge_list(None, host_local(cluster.ipam, "10.86.0.0/24"), missing)
    )
    pod = cluster.pod("blue", "web", "net-a,net-a,net-x")

    reply = cluster.add(pod)

    assert reply.rc == 1
    assert reply.code == 7
    assert "failed to find plugin 'na-not-installed'" in reply.out["msg"]
    # What leaks lives in the test's namespaces and tmp dirs, which teardown removes.
    assert cluster.leftovers() == NOTHING


def without_status(left: dict[str, list[str]]) -> dict[str, list[str]]:
    return {key: value for key, value in left.items() if key != "status files"}


def attached(cluster: Cluster, pod: Pod) -> None:
    reply = cluster.add(pod)
    assert reply.rc == 0, reply
    assert cluster.leftovers()["pod records"] == [f"{pod.container_id}.json"]


def attached_on_net_a(cluster: Cluster, networks: str = "net-a") -> Pod:
    """Pod blue/web selecting `networks` of NAD `net-a` (a bridge, host-local on 10.81.0.0/24),
    attached."""
    net_a(cluster)
    pod = cluster.pod("blue", "web", networks)
    attached(cluster, pod)
    return pod


@pytest.mark.req("RT-DEL")
def test_del_twice_succeeds(cluster: Cluster, tmp_path: Path) -> None:
    probe_nad(cluster, "net-a", "10.81.0.0/24", tmp_path / "probe.log")
    pod = cluster.pod("blue", "web", "net-a,net-a")
    attached(cluster, pod)

    first = cluster.delete(pod)
    assert (first.rc, first.out) == (0, None)
    assert cluster.leftovers() == NOTHING
    second = cluster.delete(pod)
    assert (second.rc, second.out) == (0, None)
    assert cluster.leftovers() == NOTHING
    # Only the first DEL found anything to run.
    assert calls(cluster, tmp_path / "probe.log") == [
        ("ADD", "net1"),
        ("ADD", "net2"),
        ("DEL", "net2"),
        ("DEL", "net1"),
    ]


@pytest.mark.req("RT-DELERR")
def test_del_without_pod_record_frees_everything_from_the_cache(cluster: Cluster) -> None:
    pod = attached_on_net_a(cluster)
    (cluster.state / "pods" / f"{pod.container_id}.json").unlink()

    reply = cluster.delete(pod)

    assert (reply.rc, reply.out) == (0, None)
    # (the status file is found through the pod record, which is gone: not asserted here)
    assert without_status(cluster.leftovers()) == without_status(NOTHING)


@pytest.mark.req("RT-ATOMIC")
def test_del_with_truncated_pod_record_frees_everything(cluster: Cluster) -> None:
    pod = attached_on_net_a(cluster, "net-a,net-a")
    record = cluster.state / "pods" / f"{pod.container_id}.json"
    data = record.read_bytes()
    record.write_bytes(data[: len(data) // 2])

    reply = cluster.delete(pod)

    assert (reply.rc, reply.out) == (0, None)
    assert f"corrupt pod record {str(record)!r}" in reply.stderr  # reported
    assert "deleting from the attachment cache instead" in reply.stderr
    assert without_status(cluster.leftovers()) == without_status(NOTHING)


@pytest.mark.req("RT-DEL")
def test_del_when_the_manifest_directory_is_gone(cluster: Cluster) -> None:
    pod = attached_on_net_a(cluster)
    shutil.rmtree(cluster.manifests)

    reply = cluster.delete(pod)

    assert (reply.rc, reply.out) == (0, None)
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("RT-DEL")
def test_del_after_the_sandbox_is_gone_frees_the_addresses(cluster: Cluster) -> None:
    pod = attached_on_net_a(cluster)
    namespace.remove(Path(pod.netns).name)  # the runtime removed the sandbox first

    reply = cluster.delete(pod)

    assert (reply.rc, reply.out) == (0, None)
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("RT-DELERR")
def test_del_of_a_container_never_seen_succeeds(cluster: Cluster) -> None:
    pod = cluster.pod("blue", "web", None)

    assert cluster.delete(pod).rc == 0
    # nor with a pod the cluster does not know, nor without any pod at all
    unknown = cluster.cni("DEL", pod.netns, "na-ctr-never", "blue", "nobody", uid="x")
    assert (unknown.rc, unknown.out) == (0, None)
    bare = cluster.cni("DEL", "", "na-ctr-never2")
    assert (bare.rc, bare.out) == (0, None)
    cluster.nothing_ran()


@pytest.mark.req("RT-DEL", "RT-DELERR")
def test_failing_delegate_del_is_reported_and_the_rest_still_deleted(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = tmp_path / "probe.log"
    refuse = tmp_path / "refuse-del"
    net_a(cluster)
    probe_nad(cluster, "net-p", "10.82.0.0/24", log, fail_del_while=refuse)
    pod = cluster.pod("blue", "web", "net-p,net-a")
    attached(cluster, pod)
    refuse.touch()

    reply = cluster.delete(pod)

    assert reply.rc == 1
    assert reply.code == 140
    assert reply.out["msg"] == (
        "[blue/web/uid-web:blue/net-p] plugin na-probe failed (del): probe refuses DEL"
    )
    assert reply.out["details"] == f"while {refuse} exists"
    # Every other DEL ran past the failure, net-p's own bridge + host-local included (netattach
    # goes on past a failing plugin within a list): no interface and no address is held.
    assert sorted(cluster.interfaces(pod.netns)) == []
    assert cluster.allocations() == []
    cid = pod.container_id
    assert cluster.cache_records() == [f"net-p:{cid}:net1"]
    assert cluster.pod_records() == [f"{cid}.json"]  # kept for the retry
    # The status was cleared alongside the delegates' DEL, as Multus clears it before them: a
    # pod being torn down is attached to nothing it can use, whatever a plugin still holds.
    assert cluster.status("blue", "web") is None

    refuse.unlink()
    retry = cluster.delete(pod)

    assert (retry.rc, retry.out) == (0, None)
    assert cluster.leftovers() == NOTHING
    assert calls(cluster, log) == [("ADD", "net1"), ("DEL", "net1"), ("DEL", "net1")]


@pytest.mark.req("RT-DEL")
def test_del_after_the_pod_and_nads_are_gone(cluster: Cluster) -> None:
    pod = attached_on_net_a(cluster)
    for manifest in cluster.manifests.glob("*.yaml"):
        manifest.unlink()
    (cluster.networks / "00-default.conflist").unlink()

    reply = cluster.delete(pod)

    assert (reply.rc, reply.out) == (0, None)
    # the default network's config, like the NAD's, came from the pod record
    assert cluster.leftovers() == NOTHING


@pytest.mark.parametrize("level", ["info", "debug"])
def test_the_thin_plugin_writes_its_call_lines_to_the_runtimes_journal_only_at_debug(
    cluster: Cluster, level: str
) -> None:
    """The thin plugin's stderr is the container runtime's journal: a working pod writes nothing
    there unless `logLevel: debug` asks for a line per call."""
    cluster.add_nad("blue", "net-a", bridge_list(None, host_local(cluster.ipam, "10.83.0.0/24")))
    cluster.settings["logLevel"] = level
    pod = cluster.pod("blue", "web", "net-a")

    added, deleted = cluster.add(pod), cluster.delete(pod)

    assert (added.rc, deleted.rc) == (0, 0)
    if level == "info":
        assert (added.stderr, deleted.stderr) == ("", "")
    else:
        assert "ADD container " in added.stderr
        assert "eth0 " in added.stderr
        assert "net1 blue/net-a" in added.stderr
        assert "; code 0" in added.stderr
        assert "DEL container " in deleted.stderr
    assert cluster.leftovers() == NOTHING
