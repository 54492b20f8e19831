"""The thin plugin as `netattach install-cni` installs it, run as a runtime runs it (RT-INSTALLED).

Every e2e call goes through the installed launcher (`harness.installed_thin`); these tests pin
what the launcher itself must get right: a `default-route` ADD succeeds (it failed with 999 when
the launcher blocked `ssl`, which pyroute2 imported for the route work), and no call, with
default-route or without, imports pyroute2 or `ssl` (~120 ms of imports on 2 cores).
"""

from __future__ import annotations

import os
import re

import pytest

from tests.e2e.harness import NOTHING, Cluster, bridge_list, host_local, installed_thin

pytestmark = pytest.mark.req("RT-INSTALLED")

# `-X importtime` lines: "import time: <self us> | <cumulative us> | <indented module name>".
_IMPORT_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \| +(\S+)$")


def imported(stderr: str) -> set[str]:
    return {m.group(1) for line in stderr.splitlines() if (m := _IMPORT_LINE.match(line))}


def test_the_installed_launcher_runs_this_interpreter_isolated() -> None:
    text = installed_thin().read_text()
    interpreter, flags = text.splitlines()[0].removeprefix("#!").split(" ")

    assert os.access(interpreter, os.X_OK)
    assert flags == "-IS"
    assert "sys.modules[" not in text  # blocks nothing a dependency may need


@pytest.mark.req("SEL-DEFROUTE")
def test_default_route_through_the_installed_launcher(cluster: Cluster) -> None:
    ipam = host_local(cluster.ipam, "10.81.0.0/24", gateway="10.81.0.1")
    cluster.add_nad("blue", "net-a", bridge_list(None, ipam))
    pod = cluster.pod("blue", "web", [{"name": "net-a", "default-route": ["10.81.0.1"]}])

    reply = cluster.add(pod, interpreter_flags=["-X", "importtime"])

    assert reply.rc == 0, reply
    modules = imported(reply.stderr)
    assert "netattach.netns.routes" in modules  # the route work ran, in this process
    assert sorted(modules & {"ssl", "_ssl", "pyroute2"}) == []
    defaults = cluster.routes(pod.netns, "default")
    assert [(r["dst"], r["gateway"], r["dev"]) for r in defaults] == [
        ("default", "10.81.0.1", "net1")
    ]
    assert cluster.delete(pod).rc == 0
    assert cluster.leftovers() == NOTHING


def test_a_call_without_default_route_imports_neither_pyroute2_nor_ssl(cluster: Cluster) -> None:
    ipam = host_local(cluster.ipam, "10.81.0.0/24", gateway="10.81.0.1")
    cluster.add_nad("blue", "net-a", bridge_list(None, ipam))
    pod = cluster.pod("blue", "web", "net-a")

    add = cluster.add(pod, interpreter_flags=["-X", "importtime"])
    delete = cluster.delete(pod, interpreter_flags=["-X", "importtime"])

    assert add.rc == 0, add
    assert delete.rc == 0, delete
    for reply in (add, delete):
        modules = imported(reply.stderr)
        assert "netattach.pods.thin" in modules  # the importtime lines were read
        assert sorted(modules & {"ssl", "_ssl", "pyroute2"}) == []
    assert cluster.leftovers() == NOTHING
