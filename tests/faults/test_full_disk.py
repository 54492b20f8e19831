"""The daemon's state directory on a tiny tmpfs that fills up.

A full disk must not leave a half-attached pod: an ADD that cannot write its records fails
cleanly (5, I/O failure, saying "No space left on device"), with no interface and no address
left, whether the disk was full before it began or filled up while its delegates ran. A DEL
needs no space (it only removes files), so it still frees a pod attached earlier.
"""

from __future__ import annotations

import contextlib
import errno
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest

from tests.e2e.daemon_harness import DaemonNode
from tests.e2e.harness import NOTHING, Cluster, Reply, bridge_list, host_local

pytestmark = pytest.mark.netns

NS = "blue"
TMPFS_SIZE = "1m"
FILLER = "na-filler"

# A chained plugin that fills the file system of `fill` during its ADD (so the disk runs out in
# the middle of the pod's ADD, after the delegates before it made their interfaces and took
# their addresses), then passes prevResult on as if all were well.
FILLER_SOURCE = """\
#!{python} -IS
import json, os, sys
conf = json.loads(sys.stdin.read() or "{{}}")
command = os.environ.get("CNI_COMMAND", "")
version = conf.get("cniVersion", "1.0.0")
if command == "VERSION":
    print(json.dumps({{"cniVersion": version, "supportedVersions": ["1.0.0"]}}))
    sys.exit(0)
if command == "ADD":
    with open(conf["fill"], "ab") as stream:
        try:
            while True:
                stream.write(b"\\0" * 65536)
                stream.flush()
        except OSError:
            pass
    print(json.dumps(conf.get("prevResult") or {{"cniVersion": version}}))
"""


def fill(path: Path) -> None:
    """Write to `path` until its file system has no space left."""
    with path.open("ab") as stream:
        while _wrote_more(stream):
            pass


def _wrote_more(stream: BinaryIO) -> bool:
    try:
        stream.write(b"\0" * 65536)
        stream.flush()
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        return False
    return True


@pytest.fixture
def tiny_state(daemon: DaemonNode) -> Iterator[Path]:
    """A `TMPFS_SIZE` tmpfs mounted on a `na-` temporary directory, made the daemon's (and the
    cluster's) state directory; unmounted and removed at teardown."""
    mount = Path(tempfile.mkdtemp(prefix="na-full-"))
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0700", "tmpfs", str(mount)],
        check=True,
        timeout=10,
    )
    try:
        daemon.cluster.state = mount
        daemon.settings["stateDir"] = str(mount)
        yield mount
    finally:
        daemon.stop()  # nothing may hold the file system when it goes
        done = subprocess.run(["umount", str(mount)], capture_output=True, timeout=10, check=False)
        if done.returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], check=False, timeout=10)
        with contextlib.suppress(OSError):
            mount.rmdir()


def install_filler(cluster: Cluster) -> None:
    path = cluster.bin / FILLER
    path.write_text(FILLER_SOURCE.format(python=sys.executable))
    path.chmod(0o755)


def no_space(reply: Reply) -> None:
    assert (reply.rc, reply.code) == (1, 5), reply
    assert "No space left on device" in reply.out["details"], reply


@pytest.mark.req("RT-ADDFAIL", "RT-ATOMIC", "RT-DEL")
def test_a_full_state_directory_fails_add_cleanly_and_del_still_frees(
    daemon: DaemonNode, tiny_state: Path
) -> None:
    cluster = daemon.cluster
    install_filler(cluster)
    cluster.add_nad(NS, "net-a", bridge_list(None, host_local(cluster.ipam, "10.81.0.0/24")))
    filling = host_local(cluster.ipam, "10.82.0.0/24")
    filler = tiny_state / "filler"
    cluster.add_nad(
        NS, "net-fill", bridge_list(None, filling, {"type": FILLER, "fill": str(filler)})
    )
    daemon.start()
    earlier = cluster.pod(NS, "earlier", "net-a")
    assert daemon.shim("ADD", earlier).rc == 0
    held = cluster.leftovers()

    # The disk fills up while the pod's third attachment runs: the default network and net-a
    # are made, net-fill's bridge too, then its result cannot be recorded.
    midway = cluster.pod(NS, "midway", "net-a,net-fill")
    reply = daemon.shim("ADD", midway)

    no_space(reply)
    assert reply.out["msg"] == (
        f"[{NS}/midway/{midway.uid}:{NS}/net-fill] cannot write attachment record for "
        f"'net-fill:{midway.container_id}:net2'"
    )
    assert cluster.interfaces(midway.netns) == {}
    assert cluster.leftovers() == held  # nothing of `midway`: every address given back

    # Full before the ADD begins (the undo above freed a little: fill that too): refused
    # before any delegate runs.
    fill(filler)
    before = cluster.pod(NS, "before", "net-a")
    reply = daemon.shim("ADD", before)

    no_space(reply)
    assert reply.out["msg"] == (
        f"[{NS}/before/{before.uid}] cannot write the record of container {before.container_id}"
    )
    assert cluster.interfaces(before.netns) == {}
    assert cluster.leftovers() == held

    # DEL on the full disk frees the pod attached earlier, and the failed ones' DELs succeed.
    for pod in (earlier, midway, before):
        deleted = daemon.shim("DEL", pod)
        assert (deleted.rc, deleted.out) == (0, None), (deleted, daemon.log_text())
    assert cluster.leftovers() == NOTHING

    # With space again, pods attach again.
    filler.unlink()
    after = cluster.pod(NS, "after", "net-a")
    assert daemon.shim("ADD", after).rc == 0, daemon.log_text()
    assert sorted(cluster.interfaces(after.netns)) == ["eth0", "net1"]
    assert daemon.shim("DEL", after).rc == 0
    assert cluster.leftovers() == NOTHING
    assert sorted(p for p in tiny_state.rglob("*") if p.is_file()) == []  # no temporary either
    assert daemon.alive()
    assert "Traceback" not in daemon.log_text()
