"""Thick mode end to end: the runtime runs the installed shim, the shim asks the daemon, the
daemon runs the real reference plugins in the node namespace."""

from __future__ import annotations

import ipaddress
import json
import stat
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from netattach.daemon import shim_install
from tests.e2e.daemon_harness import (
    CONFLIST_NAME,
    SHIM_NAME,
    DaemonNode,
    FileWatcher,
    daemon,
    native_shim,
    shim_zipapp,
)
from tests.e2e.harness import (
    DEFAULT_NETWORK,
    DEFAULT_SUBNET,
    NOTHING,
    Cluster,
    bridge_list,
    host_local,
)

pytestmark = pytest.mark.netns

__all__ = ["daemon", "native_shim", "shim_zipapp"]  # the fixtures this module uses


@pytest.mark.req("RT-DEL")
def test_shim_to_daemon_attaches_checks_and_deletes_with_real_plugins(
    daemon: DaemonNode,
) -> None:
    cluster = daemon.cluster
    net_a = bridge_list(None, host_local(cluster.ipam, "10.81.0.0/24"))
    cluster.premade_bridge(net_a["plugins"][0]["bridge"], "02:00:0a:51:00:01")
    cluster.add_nad("blue", "net-a", net_a)
    pod = cluster.pod("blue", "web", "net-a,net-a")
    daemon.start()

    reply = daemon.shim("ADD", pod)
    assert reply.rc == 0, (reply, daemon.log_text())

    status = cluster.written_status("blue", "web")
    assert [(e["name"], e["interface"], e["default"]) for e in status] == [
        (DEFAULT_NETWORK, "eth0", True),
        ("blue/net-a", "net1", False),
        ("blue/net-a", "net2", False),
    ]
    kernel = cluster.interfaces(pod.netns)
    assert sorted(kernel) == ["eth0", "net1", "net2"]
    for entry in status:
        state = kernel[entry["interface"]]
        assert state.up
        assert entry["mac"] == state.mac
        assert len(entry["ips"]) == 1
        assert entry["ips"][0] in state.addresses
    subnets = [DEFAULT_SUBNET, "10.81.0.0/24", "10.81.0.0/24"]
    for entry, subnet in zip(status, subnets, strict=True):
        assert ipaddress.ip_interface(entry["ips"][0]).ip in ipaddress.ip_network(subnet)
    assert status[1]["ips"] != status[2]["ips"]
    # The runtime reads the default network's result in the shim config's version.
    assert reply.out["cniVersion"] == "1.0.0"
    sandboxed = [i for i in reply.out["interfaces"] if i.get("sandbox")]
    assert sandboxed == [{"name": "eth0", "mac": kernel["eth0"].mac, "sandbox": pod.netns}]
    assert [ip["address"] for ip in reply.out["ips"]] == status[0]["ips"]
    assert len(cluster.allocations()) == 3
    assert cluster.pod_records() == [f"{pod.container_id}.json"]

    check = daemon.shim("CHECK", pod)
    assert (check.rc, check.out) == (0, None), check

    first = daemon.shim("DEL", pod)
    assert (first.rc, first.out) == (0, None), first
    assert cluster.leftovers() == NOTHING
    again = daemon.shim("DEL", pod)  # RT-DEL: idempotent
    assert (again.rc, again.out) == (0, None), again
    assert cluster.leftovers() == NOTHING
    assert daemon.requests("ADD", "0") == 1.0
    assert daemon.requests("CHECK", "0") == 1.0
    assert daemon.requests("DEL", "0") == 2.0

    assert daemon.stop() == 0


@pytest.mark.req("KUBE-INSTALL")
@pytest.mark.parametrize("cleanup", [True, False], ids=["cleanupOnExit", "keep"])
def test_install_copies_the_shim_and_writes_the_conflist_atomically(
    daemon: DaemonNode, cleanup: bool
) -> None:
    daemon.settings["cleanupOnExit"] = cleanup
    shim_bytes = daemon.shim_source.read_bytes()
    expected = {
        "cniVersion": "1.0.0",
        "name": "netattach",
        "plugins": [{"type": "netattach", "daemonSocket": str(daemon.socket)}],
    }

    with FileWatcher(daemon.conflist, daemon.installed_shim) as watcher:
        daemon.start()
        conflist_bytes = daemon.conflist.read_bytes()
        time.sleep(0.05)  # a few more reads of the finished files

    assert daemon.installed_shim.read_bytes() == shim_bytes
    assert stat.S_IMODE(daemon.installed_shim.stat().st_mode) == 0o755
    assert json.loads(conflist_bytes) == expected
    assert stat.S_IMODE(daemon.conflist.stat().st_mode) == 0o644
    # Written beside and renamed: every read found the whole file, no temporary stayed behind.
    assert watcher.seen == {daemon.conflist: {conflist_bytes}, daemon.installed_shim: {shim_bytes}}
    assert sorted(p.name for p in daemon.conf_dir.iterdir()) == [CONFLIST_NAME]
    assert sorted(p.name for p in daemon.bin_dir.iterdir()) == [SHIM_NAME]
    # The installed copy answers VERSION without the daemon.
    version = daemon.shim("VERSION")
    assert version.rc == 0, version
    assert version.out["cniVersion"] == "1.0.0"
    assert "1.0.0" in version.out["supportedVersions"]

    assert daemon.stop() == 0
    assert daemon.conflist.exists() is not cleanup
    if not cleanup:
        assert daemon.conflist.read_bytes() == conflist_bytes
    assert daemon.installed_shim.read_bytes() == shim_bytes  # a runtime may still exec it
    assert not daemon.socket.exists()


@pytest.mark.req("RT-DELERR")
def test_with_the_daemon_down_the_shim_answers_11_and_a_later_del_frees_everything(
    daemon: DaemonNode,
) -> None:
    cluster = daemon.cluster
    first = cluster.pod("blue", "first", None)
    second = cluster.pod("blue", "second", None)
    daemon.start()
    assert daemon.shim("ADD", first).rc == 0
    attached = cluster.leftovers()
    assert attached["allocations"] != []
    assert attached["sandbox interfaces"] == [f"{first.netns}:eth0"]

    # Stopped cleanly: the socket file is gone. Killed: it stays, and nobody listens on it.
    for how, why in (("SIGTERM", "No such file or directory"), ("SIGKILL", "refused")):
        if how == "SIGTERM":
            assert daemon.stop() == 0
            assert not daemon.socket.exists()
        else:
            daemon.start()
            daemon.kill()
            assert daemon.socket.is_socket()
        for command, pod in (("ADD", second), ("DEL", first)):
            reply = daemon.shim(command, pod)
            assert reply.rc == 1, reply
            assert reply.code == 11, reply
            assert reply.out["msg"].startswith(f"netattach daemon at {daemon.socket}: "), reply
            assert why in reply.out["msg"], reply
        # "a DEL is never reported as done when nothing was deleted": all of it is still there.
        assert cluster.leftovers() == attached

    daemon.start()
    for pod in (first, second):
        reply = daemon.shim("DEL", pod)
        assert (reply.rc, reply.out) == (0, None), reply
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("CLU-NODES", "RT-DELERR")
def test_a_call_while_the_daemon_restarts_waits_for_the_new_one(daemon: DaemonNode) -> None:
    """A rolling update of the DaemonSet: the old daemon has exited (its socket removed) and the
    new one is starting. The installed shim, with its default wait, is answered by the new one:
    the ADD does not fail, and its DEL frees everything."""
    cluster = daemon.cluster
    pod = cluster.pod("blue", "web", None)
    daemon.start()
    assert daemon.stop() == 0
    assert not daemon.socket.exists()

    with ThreadPoolExecutor(max_workers=1) as pool:
        adding = pool.submit(daemon.shim, "ADD", pod, daemon_wait=None)
        time.sleep(1.0)  # the shim is waiting for a socket
        assert not adding.done()
        daemon.start()
        reply = adding.result()

    assert reply.rc == 0, reply
    assert cluster.leftovers()["sandbox interfaces"] == [f"{pod.netns}:eth0"]
    assert daemon.shim("DEL", pod).rc == 0
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("KUBE-INSTALL", "RT-INSTALLED")
def test_without_shim_the_daemon_installs_the_static_shim_and_pods_attach_through_it(
    daemon: DaemonNode,
) -> None:
    """The default form, and the one every test of this tier runs: no `--shim`, and the runtime
    runs the static C program the daemon put in cniBinDir, not a build of the test's own."""
    cluster = daemon.cluster
    cluster.add_nad("blue", "net-a", bridge_list(None, host_local(cluster.ipam, "10.82.0.0/24")))
    pod = cluster.pod("blue", "web", "net-a")
    assert daemon.named_shim is None
    daemon.start()
    installed = daemon.installed_shim.read_bytes()

    added = daemon.shim("ADD", pod)
    attached = sorted(cluster.interfaces(pod.netns))
    deleted = daemon.shim("DEL", pod)

    assert installed == shim_install.NATIVE_SHIM.read_bytes()
    assert installed.startswith(b"\x7fELF")
    assert "no native shim" not in daemon.log_text()  # the zipapp fallback was not taken
    assert sorted(p.name for p in daemon.bin_dir.iterdir()) == [SHIM_NAME]
    assert added.rc == 0, (added, daemon.log_text())
    assert attached == ["eth0", "net1"]
    assert deleted.rc == 0, deleted
    assert cluster.leftovers() == NOTHING
    assert daemon.requests("ADD", "0") == 1.0


@pytest.mark.req("KUBE-INSTALL")
def test_the_zipapp_named_by_shim_is_installed_and_pods_attach_through_it(
    cluster: Cluster, shim_zipapp: Path
) -> None:
    """`--shim` names another form, here the Python zipapp (for a host whose operator wants it):
    the daemon installs that file instead, and the runtime's python3 runs it."""
    cluster.add_nad("blue", "net-a", bridge_list(None, host_local(cluster.ipam, "10.82.0.0/24")))
    pod = cluster.pod("blue", "web", "net-a")
    daemon = DaemonNode(cluster, shim_zipapp)
    try:
        daemon.start()
        installed = daemon.installed_shim.read_bytes()
        added = daemon.shim("ADD", pod)
        attached = sorted(cluster.interfaces(pod.netns))
        deleted = daemon.shim("DEL", pod)
    finally:
        daemon.close()

    assert installed == shim_zipapp.read_bytes()
    assert installed.startswith(b"#!/usr/bin/env python3\n")
    assert added.rc == 0, (added, daemon.log_text())
    assert attached == ["eth0", "net1"]
    assert deleted.rc == 0, deleted
    assert cluster.leftovers() == NOTHING
