"""Delegates that misbehave: one hangs, one crashes, one says nonsense, one answers for another
interface.

Every pod selects `net-a` (bridge + host-local, a real attachment) and then the faulty network,
so the fault always comes after something was made: the ADD fails with the documented code,
names the plugin and the attachment, and leaves nothing of the pod behind (RT-ADDFAIL). The
daemon's `delegateTimeout` is 4 s here, so the hung plugin is killed (with its whole process
group: it started a child) after 4 s.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

from tests.e2e.daemon_harness import DaemonNode, HttpReply, plugin_processes
from tests.e2e.harness import NOTHING, Pod, Reply, bridge_list, host_local

pytestmark = pytest.mark.netns

NS = "blue"
DELEGATE_TIMEOUT = 4

# Each plugin answers VERSION, does its fault on ADD, and succeeds at anything else (so the
# rollback's DEL of it works).
PREAMBLE = """\
#!/bin/sh
cat >/dev/null
case "$CNI_COMMAND" in
VERSION) echo '{"cniVersion": "1.0.0", "supportedVersions": ["0.4.0", "1.0.0"]}'; exit 0 ;;
ADD) ;;
*) exit 0 ;;
esac
"""
PLUGINS = {
    # Hangs, with a child in its process group that would outlive a kill of the plugin alone.
    "na-hang": "sleep 600 &\nsleep 600\n",
    # Dies of SIGSEGV, as a plugin with a memory bug does, after half a line of output.
    "na-segv": "printf '{\"cniVersion\": '\nkill -SEGV $$\n",
    # Exits 2 with garbage on stdout and a Go-style panic on stderr.
    "na-garbage": "printf 'garbage\\001 not json'\necho 'panic: runtime error: index out of range'"
    " >&2\nexit 2\n",
    # A valid 1.0.0 result, for interface eth9 instead of CNI_IFNAME.
    "na-other-if": (
        'printf \'{"cniVersion": "1.0.0", "interfaces": [{"name": "eth9", "sandbox": "%s"}], '
        '"ips": [{"address": "10.99.0.5/24", "interface": 0}]}\' "$CNI_NETNS"\n'
    ),
}
_names = itertools.count()


@pytest.fixture(scope="module")
def running(module_daemon: DaemonNode) -> DaemonNode:
    cluster = module_daemon.cluster
    for name, body in PLUGINS.items():
        path = cluster.bin / name
        path.write_text(PREAMBLE + body)
        path.chmod(0o755)
        cluster.add_nad(NS, f"net-{name[3:]}", {"cniVersion": "1.0.0", "type": name})
    cluster.add_nad(NS, "net-a", bridge_list(None, host_local(cluster.ipam, "10.81.0.0/24")))
    module_daemon.settings["delegateTimeout"] = DELEGATE_TIMEOUT
    module_daemon.start()
    return module_daemon


@pytest.fixture
def daemon(running: DaemonNode) -> Iterator[DaemonNode]:
    mark = len(running.log_text())
    yield running
    assert running.alive(), running.log_text()[mark:]
    assert running.http("/healthz") == HttpReply(200, "ok\n")


def failed_add(
    daemon: DaemonNode, networks: str | Sequence[Mapping[str, Any]]
) -> tuple[Pod, Reply]:
    """ADD of a new pod selecting `networks`, which must fail; then nothing of it may be left,
    and the runtime's DEL that follows finds nothing to do."""
    cluster = daemon.cluster
    pod = cluster.pod(NS, f"web-{next(_names)}", networks)
    reply = daemon.shim("ADD", pod)
    assert reply.rc == 1, reply
    assert cluster.interfaces(pod.netns) == {}
    assert cluster.leftovers() == NOTHING
    assert plugin_processes({pod.container_id}) == []
    deleted = daemon.shim("DEL", pod)
    assert (deleted.rc, deleted.out) == (0, None), deleted
    return pod, reply


def prefix(pod: Pod, network: str) -> str:
    return f"[{NS}/{pod.name}/{pod.uid}:{NS}/{network}]"


@pytest.mark.req("CNI-TIMEOUT", "RT-ADDFAIL")
def test_a_hung_delegate_is_killed_with_its_process_group_and_reported(
    daemon: DaemonNode,
) -> None:
    pod, reply = failed_add(daemon, "net-a,net-hang")

    assert reply.code == 103
    assert reply.out["msg"] == (
        f"{prefix(pod, 'net-hang')} plugin na-hang failed (add): "
        f"hung, killed after {DELEGATE_TIMEOUT}s"
    )
    assert reply.out["details"] == (
        f"container {pod.container_id} ifname net2; {daemon.cluster.bin / 'na-hang'}"
    )


@pytest.mark.req("RT-ADDFAIL", "CNI-ERR")
@pytest.mark.parametrize(
    ("plugin", "ending", "stderr"),
    [
        pytest.param("segv", "killed by SIGSEGV", "(no output on stderr)", id="sigsegv"),
        pytest.param(
            "garbage",
            "exit status 2",
            "panic: runtime error: index out of range",
            id="exit-2-with-garbage",
        ),
    ],
)
def test_a_delegate_dying_without_a_cni_error_is_reported_as_103_with_its_stderr(
    daemon: DaemonNode, plugin: str, ending: str, stderr: str
) -> None:
    pod, reply = failed_add(daemon, f"net-a,net-{plugin}")

    assert reply.code == 103
    assert reply.out["msg"] == (
        f"{prefix(pod, f'net-{plugin}')} plugin na-{plugin} failed (add): {ending} "
        "without a CNI error on stdout"
    )
    assert reply.out["details"] == stderr


@pytest.mark.req("RT-ADDFAIL", "SEL-IPS")
def test_a_result_for_another_interface_fails_a_requested_ip_with_7(daemon: DaemonNode) -> None:
    networks: list[dict[str, Any]] = [
        {"name": "net-a"},
        {"name": "net-other-if", "ips": ["10.99.0.5/24"]},
    ]
    pod, reply = failed_add(daemon, networks)

    assert reply.code == 7
    assert reply.out["msg"] == (
        f"{prefix(pod, 'net-other-if')} network '{NS}/net-other-if': the result gives the "
        "sandbox no interface 'net2' (CNI_IFNAME); the result's sandbox interfaces are 'eth9'"
    )


@pytest.mark.req("RT-ADDFAIL")
def test_a_result_for_another_interface_fails_the_add_with_7(daemon: DaemonNode) -> None:
    """Nothing requested but the interface name (CNI_IFNAME). (Checking only the name would be
    wrong: the reference `loopback` plugin always answers for `lo`, which the pod does have.)"""
    cluster = daemon.cluster
    pod = cluster.pod(NS, f"web-{next(_names)}", "net-a,net-other-if")
    reply = daemon.shim("ADD", pod)
    try:
        assert (reply.rc, reply.code) == (1, 7), (reply, cluster.status(NS, pod.name))
        assert "'eth9'" in reply.out["msg"]
        assert cluster.leftovers() == NOTHING
    finally:
        deleted = daemon.shim("DEL", pod)
        assert (deleted.rc, deleted.out) == (0, None), deleted
