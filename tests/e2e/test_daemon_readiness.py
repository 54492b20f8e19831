"""DEF-READY through the daemon: standard §6.1's two ways of waiting for the default network."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.daemon_harness import (
    DaemonNode,
    FileWatcher,
    HttpReply,
    daemon,
    native_shim,
    wait_for,
)
from tests.e2e.harness import DEFAULT_NETWORK, NOTHING, Pod

pytestmark = pytest.mark.netns

__all__ = ["daemon", "native_shim"]  # the fixtures this module uses

DEFAULT_FILE = "00-default.conflist"
NOT_READY = HttpReply(503, "not ready: waiting for the default network\n")
# The daemon looks for the default network every second (service.READINESS_POLL).
NOTICE = 5.0


def hold_default(daemon: DaemonNode) -> Path:
    """Take the default network's conflist out of networksDir; returns where it waits."""
    held = daemon.cluster.root / f"{DEFAULT_FILE}.held"
    (daemon.cluster.networks / DEFAULT_FILE).rename(held)
    return held


def release_default(daemon: DaemonNode, held: Path) -> None:
    held.rename(daemon.cluster.networks / DEFAULT_FILE)  # appears whole, as an operator's would


def assert_try_again(
    daemon: DaemonNode,
    command: str,
    pod: Pod,
    *,
    program: Path | None = None,
    config: Mapping[str, Any] | None = None,
) -> None:
    reply = daemon.shim(command, pod, program=program, config=config)
    assert reply.rc == 1, reply
    assert reply.out == {
        "cniVersion": "1.0.0",
        "code": 11,
        "msg": "netattach is not ready yet",
        "details": f"waiting for the cluster default network {DEFAULT_NETWORK}",
    }


def attach_and_detach(daemon: DaemonNode, pod: Pod) -> None:
    added = daemon.shim("ADD", pod)
    assert added.rc == 0, (added, daemon.log_text())
    assert [e["name"] for e in daemon.cluster.status(pod.ns, pod.name) or []] == [DEFAULT_NETWORK]
    deleted = daemon.shim("DEL", pod)
    assert (deleted.rc, deleted.out) == (0, None), deleted
    assert daemon.cluster.leftovers() == NOTHING


@pytest.mark.req("DEF-READY")
def test_wait_installs_the_conflist_only_once_the_default_network_exists(
    daemon: DaemonNode,
) -> None:
    cluster = daemon.cluster
    pod = cluster.pod("blue", "web", None)
    held = hold_default(daemon)

    with FileWatcher(daemon.conflist) as watcher:
        daemon.start(ready=False)
        assert daemon.http("/readyz") == NOT_READY
        assert daemon.http("/healthz") == HttpReply(200, "ok\n")
        # No conflist, so no runtime would call us; the shim the daemon is to install (run from
        # where it was built) still reaches the daemon, which holds the call back with "try again
        # later".
        assert_try_again(
            daemon, "ADD", pod, program=daemon.shim_source, config=daemon.fallback_config()
        )
        time.sleep(1.5)  # more than one readiness poll: still nothing installed
        assert not daemon.conflist.exists()
        assert daemon.http("/readyz") == NOT_READY
        cluster.nothing_ran()

        release_default(daemon, held)
        released = time.monotonic()
        wait_for("the conflist", daemon.conflist.exists, NOTICE, every=0.01)
        noticed = time.monotonic() - released
        wait_for("/readyz 200", lambda: daemon.http("/readyz").status == 200, NOTICE)
        final = daemon.conflist.read_bytes()

    assert noticed < NOTICE
    # Every read of the conflist, from the moment it existed, found the complete file.
    assert watcher.seen[daemon.conflist] == {final}
    assert json.loads(final)["plugins"] == [
        {"type": "netattach", "daemonSocket": str(daemon.socket)}
    ]
    assert daemon.http("/readyz") == HttpReply(200, "ready\n")
    attach_and_detach(daemon, pod)
    assert daemon.requests("ADD", "11") == 1.0
    assert daemon.stop() == 0


def block_until_ready(daemon: DaemonNode, pod: Pod, release: Callable[[], None]) -> None:
    """Block mode: the conflist is there at once, ADD and DEL answer 11 until `release()`."""
    daemon.start(ready=False)
    wait_for("the conflist", daemon.conflist.exists, NOTICE)
    assert json.loads(daemon.conflist.read_text())["plugins"] == [
        {"type": "netattach", "daemonSocket": str(daemon.socket)}
    ]
    assert daemon.installed_shim.exists()
    assert daemon.http("/readyz") == NOT_READY
    # The runtime now calls the installed shim; ADD and DEL alike are held back.
    assert_try_again(daemon, "ADD", pod)
    assert_try_again(daemon, "DEL", pod)
    daemon.cluster.nothing_ran()

    release()
    wait_for("/readyz 200", lambda: daemon.http("/readyz").status == 200, NOTICE)
    attach_and_detach(daemon, pod)
    assert daemon.requests("ADD", "11") == 1.0
    assert daemon.requests("DEL", "11") == 1.0


@pytest.mark.req("DEF-READY")
def test_block_installs_at_once_and_answers_11_until_the_default_network_exists(
    daemon: DaemonNode,
) -> None:
    pod = daemon.cluster.pod("blue", "web", None)
    held = hold_default(daemon)
    daemon.settings["readiness"] = {"mode": "block", "timeout": 60}

    block_until_ready(daemon, pod, lambda: release_default(daemon, held))

    attach_and_detach(daemon, pod)
    assert daemon.stop() == 0


@pytest.mark.req("DEF-READY")
def test_block_answers_11_until_the_indicator_file_appears(daemon: DaemonNode) -> None:
    pod = daemon.cluster.pod("blue", "web", None)
    indicator = daemon.cluster.root / "default-network-ready"
    daemon.settings["readiness"] = {
        "mode": "block",
        "indicatorFile": str(indicator),
        "timeout": 60,
    }

    block_until_ready(daemon, pod, indicator.touch)

    attach_and_detach(daemon, pod)
    assert daemon.stop() == 0


@pytest.mark.req("DEF-READY")
def test_readiness_timeout_exits_non_zero_naming_the_network(daemon: DaemonNode) -> None:
    hold_default(daemon)
    daemon.settings["readiness"] = {"mode": "wait", "timeout": 2}

    started = time.monotonic()
    daemon.start(ready=False)
    code = daemon.wait_exit(20)
    elapsed = time.monotonic() - started

    assert code == 1
    assert 2 <= elapsed < 10
    lines = [line for line in daemon.log_text().splitlines() if " ERROR " in line]
    assert len(lines) == 1, daemon.log_text()
    assert lines[0].endswith(
        f"netattach ERROR netattach.daemon: the cluster default network {DEFAULT_NETWORK} is not "
        f"ready after 2s (looked in {daemon.cluster.networks})"
    )
    assert not daemon.conflist.exists()
    assert not daemon.socket.exists()
