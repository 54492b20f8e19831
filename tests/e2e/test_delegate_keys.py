"""Issue 27's key-spelling and path attacks with the real reference plugins (SEC-KEYS, SEC-NODE):
each passed the exact-name policy and took part of the node; each is refused at ADD now, with
nothing run and nothing changed on the node, while the same config spelled plainly still
attaches where it is allowed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from netattach.guard import delegate_policy
from tests.e2e.guard_harness import NS, grant, nic, nothing_attached, pod_selecting
from tests.e2e.harness import Cluster, Reply, bridge_list, host_local
from tests.netns_fixtures import unique

pytestmark = pytest.mark.netns


def refused_spelling(reply: Reply, nad: str, key: str, canonical: str) -> None:
    assert reply.rc == 1, reply
    assert reply.code == 7
    msg = reply.out["msg"]
    assert f"NetworkAttachmentDefinition {NS}/{nad} refused by the delegate policy: " in msg
    assert f"{key} " in msg
    assert f"{canonical!r}" in msg
    assert "a Go plugin" in msg


@pytest.mark.req("SEC-KEYS")
def test_a_second_spelling_of_device_cannot_move_the_uplink(cluster: Cluster) -> None:
    """`{"device": <granted>, "DEVICE": <uplink>}`: host-device would take the last, the uplink."""
    uplink, granted = nic(cluster, "up"), nic(cluster, "ok")
    grant(cluster, types=[*delegate_policy.DEFAULT_TYPES, "host-device"], device=["na-ok-*"])
    attack = {"cniVersion": "1.0.0", "type": "host-device", "device": granted, "DEVICE": uplink}
    cluster.add_nad(NS, "net-hd", attack)
    cluster.add_nad(NS, "net-ok", {"cniVersion": "1.0.0", "type": "host-device", "device": granted})
    before = cluster.node_links()
    pod = cluster.pod(NS, "web", "net-hd")

    refused_spelling(cluster.add(pod), "net-hd", "plugins[0].DEVICE", "device")

    nothing_attached(cluster, pod, before)
    assert uplink in cluster.node_links()
    assert granted in cluster.node_links()
    allowed = cluster.pod(NS, "ok", "net-ok")
    assert cluster.add(allowed).rc == 0
    assert granted not in cluster.node_links()  # the granted device, and only it, moved
    assert uplink in cluster.node_links()
    assert cluster.delete(allowed).rc == 0


@pytest.mark.req("SEC-KEYS")
@pytest.mark.parametrize("spelling", ["MASTER", "ma\u017fter"])
def test_a_master_spelt_otherwise_is_refused(cluster: Cluster, spelling: str) -> None:
    uplink, granted = nic(cluster, "up"), nic(cluster, "ok")
    grant(cluster, master=["na-ok-*"])
    ipam = host_local(cluster.ipam, "10.81.0.0/24")
    attack = {"cniVersion": "1.0.0", "type": "macvlan", "master": granted, spelling: uplink}
    before, pod = pod_selecting(cluster, NS, "net-mv", {**attack, "ipam": ipam})

    refused_spelling(cluster.add(pod), "net-mv", f"plugins[0].{spelling}", "master")

    nothing_attached(cluster, pod, before)


@pytest.mark.req("SEC-KEYS")
def test_an_ipam_type_spelt_otherwise_runs_nothing(cluster: Cluster, tmp_path: Path) -> None:
    """`ipam: {"type": "host-local", "TYPE": <unlisted>}` ran the unlisted plugin, on ADD and
    DEL. The unlisted plugin here is a script that would leave a mark."""
    mark = tmp_path / "ran"
    plugin = cluster.bin / "na-unlisted"
    plugin.write_text(f"#!/bin/sh\ntouch {mark}\necho '{{}}'\n")
    plugin.chmod(0o755)
    ipam = {**host_local(cluster.ipam, "10.82.0.0/24"), "TYPE": "na-unlisted"}
    before, pod = pod_selecting(cluster, NS, "net-t", bridge_list(None, ipam, bridge=unique("br")))

    refused_spelling(cluster.add(pod), "net-t", "plugins[0].ipam.TYPE", "type")

    nothing_attached(cluster, pod, before)
    assert cluster.delete(pod).rc == 0
    assert not mark.exists()


@pytest.mark.req("SEC-KEYS", "SEC-NODE")
@pytest.mark.parametrize("how", ["DataDir", "//", "/./", "symlink"])
def test_a_data_dir_outside_the_list_however_written_gets_no_file(
    cluster: Cluster, tmp_path: Path, how: str
) -> None:
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    (allowed / "na-link").symlink_to(outside)
    grant(cluster, dataDir=[str(allowed)])
    ipam: dict[str, Any] = {"type": "host-local", "subnet": "10.83.0.0/24"}
    if how == "DataDir":
        ipam |= {"dataDir": str(allowed / "ok"), "DataDir": str(outside)}
    elif how == "symlink":
        ipam["dataDir"] = str(allowed / "na-link" / "ipam")
    else:
        ipam["dataDir"] = how + str(outside).lstrip("/")
    before, pod = pod_selecting(cluster, NS, "net-d", bridge_list(None, ipam, bridge=unique("br")))

    reply = cluster.add(pod)

    assert (reply.rc, reply.code) == (1, 7), reply
    assert "plugins[0].ipam." in reply.out["msg"]
    nothing_attached(cluster, pod, before)
    assert list(outside.iterdir()) == []
    assert not (allowed / "ok").exists()


@pytest.mark.req("SEC-KEYS")
def test_a_pod_authors_sysctl_in_cni_args_spelt_otherwise_is_refused(cluster: Cluster) -> None:
    core_pattern = Path("/proc/sys/kernel/core_pattern").read_text()
    ipam = host_local(cluster.ipam, "10.84.0.0/24")
    tuning = {"type": "tuning", "sysctl": {"net.ipv4.conf.all.log_martians": "1"}}
    cluster.add_nad(NS, "net-tu", bridge_list(None, ipam, tuning, bridge=unique("br")))
    before = cluster.node_links()
    selection = [
        {"name": "net-tu", "cni-args": {"Sysctl": {"kernel.core_pattern": "|/tmp/na-evil %p"}}}
    ]
    pod = cluster.pod(NS, "web", selection)

    refused_spelling(cluster.add(pod), "net-tu", "plugins[0].args.cni.Sysctl", "sysctl")

    nothing_attached(cluster, pod, before)
    assert Path("/proc/sys/kernel/core_pattern").read_text() == core_pattern


@pytest.mark.req("SEC-NODE")
def test_an_ipam_type_that_is_a_path_runs_nothing_even_when_every_type_is_allowed(
    cluster: Cluster,
) -> None:
    """With `types: ["*"]`, `ipam.type: "../x"` ran the bridge plugin (which left its bridge)."""
    grant(cluster, types=["*"])
    bridge = unique("br")
    before, pod = pod_selecting(
        cluster, NS, "net-p", bridge_list(None, {"type": "../na-x"}, bridge=bridge)
    )

    reply = cluster.add(pod)

    assert (reply.rc, reply.code) == (1, 7), reply
    assert 'plugins[0].ipam.type "../na-x" is not a plain file name' in reply.out["msg"]
    nothing_attached(cluster, pod, before)
    assert bridge not in cluster.node_links()


@pytest.mark.req("SEC-KEYS")
def test_a_config_nested_900_deep_is_code_7_naming_the_limit(cluster: Cluster) -> None:
    text = json.dumps({"cniVersion": "1.0.0", "type": "bridge"})[:-1] + ', "a": '
    text += "[" * 900 + "]" * 900 + "}"
    cluster.add_nad(NS, "net-deep", text)
    pod = cluster.pod(NS, "web", "net-deep")

    reply = cluster.add(pod)

    assert (reply.rc, reply.code) == (1, 7), reply
    assert "nest more than 32 deep" in reply.text
    nothing_attached(cluster, pod, cluster.node_links())
