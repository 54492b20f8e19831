"""The fault tier runs the shim a node runs (RT-INSTALLED).

Every call of this tier execs cniBinDir/netattach as the daemon installed it: with no `--shim`,
the static C program built with the package, never a build of the test's own or the Python
form. A fault only the shim can word, the daemon gone in the middle of a pod's life, is answered
by that program as the Python form answers it, so an operator cannot tell which one ran.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from netattach.daemon import shim_install
from tests.e2e.daemon_harness import DaemonNode
from tests.e2e.harness import NOTHING

pytestmark = pytest.mark.netns

# ECONNREFUSED's text: a socket file nobody listens on (glibc's strerror is Python's).
DAEMON_GONE = "Connection refused"


@pytest.mark.req("RT-INSTALLED", "RT-DELERR")
def test_with_the_daemon_killed_the_installed_static_shim_answers_as_the_python_one(
    daemon: DaemonNode, shim_zipapp: Path
) -> None:
    cluster = daemon.cluster
    pod = cluster.pod("blue", "web", None)
    daemon.start()
    installed = daemon.installed_shim.read_bytes()
    assert daemon.shim("ADD", pod).rc == 0

    daemon.kill()  # SIGKILL: the socket file stays, nobody listens on it
    native = daemon.shim("DEL", pod)
    python = daemon.shim("DEL", pod, program=shim_zipapp)
    daemon.start()
    deleted = daemon.shim("DEL", pod)

    assert daemon.named_shim is None
    assert installed == shim_install.NATIVE_SHIM.read_bytes()
    assert installed.startswith(b"\x7fELF")
    assert (native.rc, native.code) == (1, 11), native
    assert DAEMON_GONE in native.out["msg"], native
    assert (native.rc, native.out) == (python.rc, python.out)
    assert (deleted.rc, deleted.out) == (0, None), deleted
    assert cluster.leftovers() == NOTHING
