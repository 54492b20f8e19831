"""Pod records and attachment cache files damaged on disk, under a running daemon.

Each case attaches a pod (the default network and `net-a`, both bridge + host-local), damages
one of its files, attaches a second pod while the damage is there, and DELs the damaged one. The
damage: cut in half, overwritten with random bytes, valid JSON of the wrong types, or something
unreadable in the file's place (a directory or a FIFO: root reads past chmod 000, and a FIFO
would block a plain read forever). The daemon keeps serving throughout, and the DEL frees every
interface and address it can and says what it could not.
"""

from __future__ import annotations

import itertools
import json
import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.daemon_harness import DaemonNode, HttpReply
from tests.e2e.harness import NOTHING, Cluster, Pod, Reply

pytestmark = pytest.mark.netns

NS = "blue"
_names = itertools.count()


@pytest.fixture
def daemon(running: DaemonNode) -> Iterator[DaemonNode]:
    """The module's daemon; after each case it is still up, still healthy, and nothing of any
    pod is left."""
    mark = len(running.log_text())
    yield running
    assert running.alive(), running.log_text()[mark:]
    assert running.http("/healthz") == HttpReply(200, "ok\n")
    assert "Traceback" not in running.log_text()[mark:]
    assert running.cluster.leftovers() == NOTHING


def attached(daemon: DaemonNode) -> Pod:
    pod = daemon.cluster.pod(NS, f"web-{next(_names)}", "net-a")
    reply = daemon.shim("ADD", pod)
    assert reply.rc == 0, (reply, daemon.log_text())
    return pod


def record_of(cluster: Cluster, pod: Pod) -> Path:
    return cluster.state / "pods" / f"{pod.container_id}.json"


def cache_of(cluster: Cluster, pod: Pod) -> Path:
    """The attachment cache file of the pod's `net-a` attachment (its interface `net1`)."""
    return cluster.state / "cache" / "results" / f"net-a:{pod.container_id}:net1"


def ok(reply: Reply, daemon: DaemonNode) -> None:
    assert (reply.rc, reply.out) == (0, None), (reply, daemon.log_text())


# -- the damage ----------------------------------------------------------------------------------


def truncated(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def random_bytes(path: Path) -> None:
    path.write_bytes(random.Random(path.name).randbytes(len(path.read_bytes())))


def retyped(change: Callable[[Any], Any]) -> Callable[[Path], None]:
    """Valid JSON with `change` applied: fields of the wrong type."""

    def damage(path: Path) -> None:
        path.write_text(json.dumps(change(json.loads(path.read_text()))))

    return damage


def put(raw: dict[str, Any], where: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    node: Any = raw
    for step in where[:-1]:
        node = node[step]
    node[where[-1]] = value
    return raw


def a_directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def a_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


RECORD_DAMAGE = [
    pytest.param(truncated, id="truncated"),
    pytest.param(random_bytes, id="random-bytes"),
    pytest.param(retyped(lambda raw: [raw]), id="a-list"),
    pytest.param(retyped(lambda raw: put(raw, ("attachments",), {"0": 1})), id="attachments-map"),
    pytest.param(retyped(lambda raw: put(raw, ("attachments", 1, "ifname"), 7)), id="ifname-int"),
    pytest.param(retyped(lambda raw: put(raw, ("attachments", 1, "result"), "x")), id="result-str"),
    pytest.param(a_fifo, id="fifo"),
]
CACHE_DAMAGE = [
    pytest.param(truncated, id="truncated"),
    pytest.param(random_bytes, id="random-bytes"),
    pytest.param(retyped(lambda raw: [raw]), id="a-list"),
    pytest.param(retyped(lambda raw: put(raw, ("result",), [])), id="result-list"),
    pytest.param(retyped(lambda raw: put(raw, ("cniArgs",), "K=V")), id="cni-args-str"),
    pytest.param(retyped(lambda raw: put(raw, ("config",), "{}")), id="config-str"),
    pytest.param(a_fifo, id="fifo"),
]


def still_serving(daemon: DaemonNode) -> None:
    """ADD and DEL of a new pod work while the damage is there."""
    other = attached(daemon)
    assert sorted(daemon.cluster.interfaces(other.netns)) == ["eth0", "net1"]
    ok(daemon.shim("DEL", other), daemon)


def freed(cluster: Cluster, pod: Pod) -> None:
    """No interface in the pod, no host veth, no address: what a DEL must free."""
    assert cluster.interfaces(pod.netns) == {}
    assert cluster.host_veths() == []
    assert cluster.allocations() == []


# -- the cases -----------------------------------------------------------------------------------


@pytest.mark.req("RT-ATOMIC")
@pytest.mark.parametrize("damage", RECORD_DAMAGE)
def test_damaged_pod_record_is_reported_and_del_frees_everything_from_the_cache(
    daemon: DaemonNode, damage: Callable[[Path], None]
) -> None:
    cluster = daemon.cluster
    pod = attached(daemon)
    record = record_of(cluster, pod)
    damage(record)

    still_serving(daemon)
    mark = len(daemon.log_text())
    ok(daemon.shim("DEL", pod), daemon)

    freed(cluster, pod)
    assert not os.path.lexists(record)
    said = daemon.log_text()[mark:]
    assert f"corrupt pod record {str(record)!r}" in said
    assert "deleting from the attachment cache instead" in said


@pytest.mark.req("RT-ATOMIC")
@pytest.mark.parametrize("damage", CACHE_DAMAGE)
def test_damaged_cache_file_is_reported_and_del_frees_everything_from_the_record(
    daemon: DaemonNode, damage: Callable[[Path], None]
) -> None:
    cluster = daemon.cluster
    pod = attached(daemon)
    entry = cache_of(cluster, pod)
    damage(entry)

    still_serving(daemon)
    mark = len(daemon.log_text())
    ok(daemon.shim("DEL", pod), daemon)

    freed(cluster, pod)
    assert not os.path.lexists(entry)
    said = daemon.log_text()[mark:]
    assert f"corrupt attachment record {str(entry)!r}" in said
    assert "deleting network 'net-a' without prevResult" in said


@pytest.mark.req("RT-ATOMIC", "RT-DELERR")
def test_a_directory_in_place_of_the_pod_record_fails_del_clearly_after_freeing_everything(
    daemon: DaemonNode,
) -> None:
    cluster = daemon.cluster
    pod = attached(daemon)
    record = record_of(cluster, pod)
    a_directory(record)

    still_serving(daemon)
    reply = daemon.shim("DEL", pod)

    # Everything the pod held is free; only the thing in the record's place cannot be removed,
    # and the runtime hears which (5: I/O failure) so its retry finds out when it is gone.
    assert (reply.rc, reply.code) == (1, 5), reply
    assert reply.out["msg"] == f"cannot remove the record of container {pod.container_id}"
    assert "Is a directory" in reply.out["details"]
    assert str(record) in reply.out["details"]
    freed(cluster, pod)
    assert cluster.cache_records() == []
    record.rmdir()
    ok(daemon.shim("DEL", pod), daemon)


@pytest.mark.req("RT-ATOMIC", "RT-DELERR")
def test_a_directory_in_place_of_a_cache_file_fails_del_clearly_after_freeing_everything(
    daemon: DaemonNode,
) -> None:
    cluster = daemon.cluster
    pod = attached(daemon)
    entry = cache_of(cluster, pod)
    a_directory(entry)

    still_serving(daemon)
    reply = daemon.shim("DEL", pod)

    assert (reply.rc, reply.code) == (1, 5), reply
    assert reply.out["msg"] == (
        f"[{NS}/{pod.name}/{pod.uid}:{NS}/net-a] cannot remove attachment record "
        f"'net-a:{pod.container_id}:net1'"
    )
    assert "Is a directory" in reply.out["details"]
    freed(cluster, pod)
    assert cluster.pod_records() == [f"{pod.container_id}.json"]  # kept for the retry
    entry.rmdir()
    ok(daemon.shim("DEL", pod), daemon)


@pytest.mark.req("RT-ATOMIC")
def test_an_unparsable_config_in_the_pod_record_still_frees_that_attachment(
    daemon: DaemonNode,
) -> None:
    cluster = daemon.cluster
    pod = attached(daemon)
    record = record_of(cluster, pod)
    retyped(lambda raw: put(raw, ("attachments", 1, "config", "plugins"), 5))(record)

    reply = daemon.shim("DEL", pod)
    try:
        freed(cluster, pod)
        assert (reply.rc, reply.out) == (0, None), reply
    finally:
        # Undo by hand what the DEL could not, so the module's other cases start clean.
        record.write_text(json.dumps({"kind": "not a record"}))
        ok(daemon.shim("DEL", pod), daemon)
