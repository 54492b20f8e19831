"""CNI 1.1 networks through the thin plugin with reference plugins that speak 1.1.0.

Debian's plugins (1.1.1, /usr/lib/cni) stop at 1.0.0, so these tests need the current release
that scripts/build-cni-plugins.sh builds: `make pytest-cni-current` runs them with
NETATTACH_TEST_CNI_PATH naming it (issue 28). Networks at 1.1.0 get the 1.1 verbs: STATUS of the
cluster default network asks its plugins (the bridge asks its IPAM in turn), and a pod's
attachments are taken by GC through DEL at 1.1.0 while the valid pod keeps everything.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.harness import (
    DEFAULT_GATEWAY,
    DEFAULT_NETWORK,
    DEFAULT_SUBNET,
    NOTHING,
    Cluster,
    bridge_list,
    host_local,
)
from tests.netns_fixtures import PLUGIN_DIR, plugin_versions

# With Debian's plugins these do not apply (a plain skip, not a netns test the machine failed to
# run, which NETATTACH_REQUIRE_NETNS refuses): `make pytest-cni-current`, part of `make test`,
# runs them with the current release, as netns tests.
pytestmark = (
    [pytest.mark.netns]
    if "1.1.0" in plugin_versions()
    else [
        pytest.mark.skip(
            reason=f"the reference plugins in {PLUGIN_DIR} do not speak CNI 1.1.0 (Debian's "
            "1.1.1); `make pytest-cni-current` runs these with the current release"
        )
    ]
)


def default_network(cluster: Cluster, ipam: dict[str, Any]) -> None:
    """The cluster default network at 1.1.0: the harness's bridge, with `ipam`."""
    cluster.write_network_file(
        "00-default.conflist",
        {
            "cniVersion": "1.1.0",
            "name": DEFAULT_NETWORK,
            "plugins": [{"type": "bridge", "bridge": cluster.default_bridge, "ipam": ipam}],
        },
    )


def default_ipam(cluster: Cluster) -> dict[str, Any]:
    return host_local(
        cluster.ipam, DEFAULT_SUBNET, gateway=DEFAULT_GATEWAY, routes=[{"dst": "0.0.0.0/0"}]
    )


@pytest.mark.req("CNI-11")
def test_status_reaches_the_default_networks_plugins(cluster: Cluster) -> None:
    default_network(cluster, default_ipam(cluster))

    ready = cluster.cni("STATUS", config=cluster.config("1.1.0"))

    assert (ready.rc, ready.out) == (0, None), ready
    # The bridge's STATUS asks its IPAM plugin: one that is not installed makes the network
    # unavailable, and the bridge's own error comes back with the network named.
    default_network(cluster, {"type": "na-no-such-ipam"})
    broken = cluster.cni("STATUS", config=cluster.config("1.1.0"))

    assert broken.rc == 1, broken
    assert broken.out["cniVersion"] == "1.1.0"
    assert "plugin bridge failed (status)" in broken.out["msg"], broken
    assert "na-no-such-ipam" in broken.out["msg"], broken
    cluster.nothing_ran()


@pytest.mark.req("CNI-11", "RT-GC")
def test_gc_takes_the_stale_pods_1_1_attachments_and_keeps_the_valid_ones(
    cluster: Cluster,
) -> None:
    default_network(cluster, default_ipam(cluster))
    net_a = bridge_list(None, host_local(cluster.ipam, "10.81.0.0/24"))
    cluster.add_nad("blue", "net-a", {**net_a, "cniVersion": "1.1.0"})
    kept = cluster.pod("blue", "kept", "net-a")
    stale = cluster.pod("blue", "stale", "net-a,net-a")
    for pod in (kept, stale):
        reply = cluster.add(pod)
        assert reply.rc == 0, reply
        assert reply.out["cniVersion"] == "1.0.0"  # the thin plugin's own config's version
    kept_before = cluster.interfaces(kept.netns)
    assert len(cluster.allocations()) == 5

    reply = cluster.gc([kept.container_id])

    assert (reply.rc, reply.out) == (0, None), reply
    assert cluster.interfaces(stale.netns) == {}
    assert cluster.interfaces(kept.netns) == kept_before
    assert cluster.pod_records() == [f"{kept.container_id}.json"]
    assert len(cluster.allocations()) == 2
    # CHECK at 1.1.0 still passes for the valid pod after the sweep.
    check = cluster.check(kept, config=cluster.config("1.1.0"))
    assert (check.rc, check.out) == (0, None), check

    assert cluster.gc([]).rc == 0
    assert cluster.leftovers() == NOTHING
