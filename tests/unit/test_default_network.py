"""DEV-DEFAULT: `v1.multus-cni.io/default-network` on a pod replaces the cluster default network
for that pod, under namespace isolation and the delegate policy.

The plan is pure (a real `ClusterStore` filled by hand); the orchestrator runs through the exec
seam (`FakePlugins`), so no root is needed.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from netattach.cluster import model, store
from netattach.cni import conf, errors
from netattach.guard import delegate_policy
from netattach.pods import delegate_guard, node_guard, plan, records
from netattach.settings import network as network_settings
from tests import builders
from tests.builders import FetchingStore, call, nad, orchestrated, pod, view_of
from tests.unit.orchestrator_harness import refused_add

POD_NS = "blue"
POD_NAME = "web"
NO_DISK = Path("/nonexistent-na-default-network")


def cfg(
    *,
    isolation: bool = True,
    cluster_network: network_settings.ClusterNetworkRef | None = None,
) -> network_settings.NetworkSettings:
    # No on-disk default network: a plan that reads it fails, so these prove it is not read.
    return builders.networks(cluster_network or "absent", networks_dir=NO_DISK, isolation=isolation)


RUNTIME_CONFIG: dict[str, Any] = {
    "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]
}
MACVLAN: dict[str, Any] = {"type": "macvlan", "master": "eth1"}


def build(
    view: store.ClusterStore, settings_: network_settings.NetworkSettings | None = None
) -> list[plan.PlannedAttachment]:
    found = view.lookup_pod(POD_NS, POD_NAME)
    assert found is not None
    return plan.build_plan(
        pod=found,
        default_ifname="eth0",
        runtime_config=RUNTIME_CONFIG,
        view=view,
        cfg=settings_ or cfg(),
    )


# --- the annotation's forms ---------------------------------------------------------------------


@pytest.mark.req("DEV-DEFAULT")
@pytest.mark.parametrize(
    ("text", "reference"),
    [
        ("ovn", "blue/ovn"),
        ("  blue/ovn ", "blue/ovn"),
        ("default/ovn", "default/ovn"),
        ('[{"name": "ovn"}]', "blue/ovn"),
        ('[{"name": "ovn", "namespace": "default"}]', "default/ovn"),
        ('[{"name": "ovn", "interface": "eth0"}]', "blue/ovn"),
        ("ovn@eth0", "blue/ovn"),
    ],
)
def test_the_annotation_names_one_nad_unqualified_in_the_pods_namespace(
    text: str, reference: str
) -> None:
    chosen = plan.parse_default_network(
        text, pod_namespace=POD_NS, pod=POD_NAME, default_ifname="eth0"
    )
    assert chosen is not None
    assert chosen.reference() == reference


@pytest.mark.req("DEV-DEFAULT")
@pytest.mark.parametrize("text", ["", "   "])
def test_an_empty_annotation_is_no_override(text: str) -> None:
    assert (
        plan.parse_default_network(text, pod_namespace=POD_NS, pod=POD_NAME, default_ifname="eth0")
        is None
    )


@pytest.mark.req("DEV-DEFAULT")
@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("a/b/c", "more than one '/'"),
        ('[{"name": "ovn"', "not valid JSON"),
        ("a,b", "names 2 networks, the default network is exactly one"),
        ('[{"name": "a"}, {"name": "b"}]', "names 2 networks"),
        ("[]", "names 0 networks"),
        ('[{"name": "ovn", "interface": "net1"}]', "always the runtime's interface 'eth0'"),
        ("ovn@eth5", "interface 'eth5'"),
        ('[{"name": "ovn", "portMappings": [{"hostPort": 1, "containerPort": 2}]}]', "runtime"),
        ('[{"name": "ovn", "bandwidth": {"ingressRate": 1, "ingressBurst": 1}}]', "bandwidth"),
        ('[{"name": "ovn", "mac": "zz"}]', "'zz'"),
    ],
)
def test_bad_annotation_text_is_102_naming_the_pod_and_quoting_the_value(
    text: str, says: str
) -> None:
    with pytest.raises(errors.InvalidSelectionError) as caught:
        plan.parse_default_network(text, pod_namespace=POD_NS, pod=POD_NAME, default_ifname="eth0")
    assert caught.value.code == 102
    assert caught.value.msg.startswith(
        f"invalid {model.DEFAULT_NETWORK_ANNOTATION} annotation of pod {POD_NS}/{POD_NAME}: "
    )
    assert repr(text) in caught.value.msg
    assert says in str(caught.value)


# --- the plan ------------------------------------------------------------------------------------


@pytest.mark.req("DEV-DEFAULT", "SEL-CAPS")
def test_the_nad_replaces_the_cluster_default_on_the_runtimes_ifname() -> None:
    view = view_of(
        pod("net-a", default_network="ovn"),
        nad("ovn", MACVLAN, annotations={model.RESOURCE_ANNOTATION: "example.com/vf"}),
        nad("net-a", {"type": "macvlan", "master": "eth2"}),
    )
    planned = build(view)  # the on-disk cluster default does not exist: it is never read

    default, second = planned
    assert (default.status_name, default.ifname, default.is_default) == ("blue/ovn", "eth0", True)
    assert default.pod_default
    assert default.network.name == "ovn"
    assert [p.type for p in default.network.plugins] == ["macvlan"]
    # SEL-CAPS: the runtime's capability args go to the default network, whichever it is.
    assert dict(default.capability_args) == RUNTIME_CONFIG
    assert default.resource == "example.com/vf"
    assert (second.status_name, second.ifname, second.is_default) == ("blue/net-a", "net1", False)
    assert not second.pod_default
    assert dict(second.capability_args) == {}


@pytest.mark.req("DEV-DEFAULT")
def test_without_the_annotation_the_cluster_default_is_not_a_pod_default(tmp_path: Path) -> None:
    (tmp_path / "cluster.conf").write_text(
        json.dumps({"cniVersion": "1.0.0", "name": "cluster", "type": "bridge"})
    )
    settings_ = network_settings.NetworkSettings(
        cluster_network=network_settings.ClusterNetworkRef(kind="name", name="cluster"),
        networks_dir=tmp_path,
    )
    (default,) = build(view_of(pod()), settings_)
    assert default.status_name == "cluster"
    assert default.is_default
    assert not default.pod_default


@pytest.mark.req("DEV-DEFAULT")
def test_the_operators_own_nad_named_by_the_pod_stays_the_operators() -> None:
    operator = network_settings.ClusterNetworkRef(kind="nad", namespace="default", name="cluster")
    view = view_of(
        pod(default_network="default/cluster"), nad("cluster", MACVLAN, namespace="default")
    )
    (default,) = build(view, cfg(cluster_network=operator))
    assert default.status_name == "default/cluster"
    assert not default.pod_default  # neither the policy nor the node guard judges it


@pytest.mark.req("DEV-DEFAULT", "SEL-IPS", "SEL-MAC", "SEL-CNIARGS")
def test_ips_mac_and_cni_args_of_the_element_are_honoured() -> None:
    element = {
        "name": "ovn",
        "ips": ["10.20.0.5/24"],
        "mac": "0a:58:0a:14:00:05",
        "cni-args": {"role": "primary"},
        "default-route": ["10.20.0.1"],
    }
    config = {
        "type": "macvlan",
        "master": "eth1",
        "capabilities": {"ips": True, "mac": True},
        "ipam": {"type": "static"},
    }
    view = view_of(pod(default_network=json.dumps([element])), nad("ovn", config))
    (default,) = build(view)

    assert default.network.plugins[0].raw["args"]["cni"] == {
        "role": "primary",
        "ips": ["10.20.0.5/24"],
        "mac": "0a:58:0a:14:00:05",
    }
    assert default.ips == ("10.20.0.5/24",)
    assert default.mac == "0a:58:0a:14:00:05"
    assert default.gateways == ("10.20.0.1",)
    assert dict(default.capability_args) == {
        **RUNTIME_CONFIG,
        "ips": ["10.20.0.5/24"],
        "mac": "0a:58:0a:14:00:05",
    }


@pytest.mark.req("DEV-DEFAULT")
def test_an_ipam_claim_reference_travels_in_args_cni() -> None:
    element = {"name": "ovn", "ipam-claim-reference": "vm-a.pod"}
    view = view_of(pod(default_network=json.dumps([element])), nad("ovn", MACVLAN))
    (default,) = build(view)
    assert default.network.plugins[0].raw["args"]["cni"] == {"ipam-claim-reference": "vm-a.pod"}


@pytest.mark.req("DEV-DEFAULT", "RT-RESTRICT")
def test_namespace_isolation_refuses_another_namespaces_nad_before_any_lookup() -> None:
    view = view_of(pod(default_network="red/ovn"), nad("ovn", MACVLAN, namespace="red"))
    with pytest.raises(errors.InvalidSelectionError) as caught:
        build(view)
    assert caught.value.code == 102
    assert "red/ovn" in caught.value.msg
    # A global namespace's NAD, or no isolation, is allowed.
    assert build(
        view_of(pod(default_network="default/ovn"), nad("ovn", MACVLAN, namespace="default"))
    )[0].pod_default
    assert build(view, cfg(isolation=False))[0].status_name == "red/ovn"


@pytest.mark.req("DEV-DEFAULT", "DEF-ATTACH")
def test_a_missing_nad_is_101_naming_it() -> None:
    with pytest.raises(plan.NADNotFoundError) as caught:
        build(view_of(pod(default_network="ovn")))
    assert caught.value.code == 101
    assert (caught.value.namespace, caught.value.name) == (POD_NS, "ovn")
    assert "NetworkAttachmentDefinition blue/ovn not found" in caught.value.msg


@pytest.mark.req("DEV-DEFAULT", "RT-HOTPLUG")
def test_hot_plug_plans_without_reading_the_annotation_a_gone_nad_blocks_nothing() -> None:
    disk = network_settings.ClusterNetworkRef(kind="nad", namespace="kube-system", name="cluster")
    view = view_of(
        pod("net-a", default_network="ovn-gone"),
        nad("cluster", MACVLAN, namespace="kube-system"),
        nad("net-a", MACVLAN),
    )
    found = view.lookup_pod(POD_NS, POD_NAME)
    assert found is not None

    with pytest.raises(plan.NADNotFoundError):
        build(view, cfg(cluster_network=disk))
    replanned = plan.build_plan(
        pod=found,
        default_ifname="eth0",
        runtime_config={},
        view=view,
        cfg=cfg(cluster_network=disk),
        pod_default_network=False,
    )

    assert [(p.status_name, p.pod_default) for p in replanned] == [
        ("kube-system/cluster", False),
        ("blue/net-a", False),
    ]


# --- the delegate policy and the node guard judge it -------------------------------------------


@pytest.mark.req("DEV-DEFAULT", "SEC-DELEGATE")
def test_the_delegate_policy_judges_the_pods_default_network_nad() -> None:
    config = {"type": "host-device", "device": "eth0"}
    view = view_of(pod(default_network="ovn"), nad("ovn", config))
    planned = build(view)
    with pytest.raises(delegate_guard.DelegateRefusedError) as caught:
        delegate_guard.check_plan(planned, delegate_policy.DEFAULT_POLICY, view)
    assert caught.value.code == 7
    assert caught.value.msg.startswith(
        "NetworkAttachmentDefinition blue/ovn refused by the delegate policy: "
    )
    # The cluster default, the operator's own, is not judged: the same config passes as it.
    operators = [planned[0]._replace(pod_default=False)]
    delegate_guard.check_plan(operators, delegate_policy.DEFAULT_POLICY, view)


def static(address: str) -> dict[str, Any]:
    return {"type": "static", "addresses": [{"address": address}]}


@pytest.mark.req("DEV-DEFAULT", "SEC-NODE")
def test_the_node_guard_judges_the_pods_default_network_nad(tmp_path: Path) -> None:
    held = records.AttachmentRecord(
        status_name="blue/net-a",
        ifname="net1",
        is_default=False,
        config={},
        capability_args={},
        result={"ips": [{"address": "10.20.0.5/24"}]},
    )
    store_ = records.PodRecords(tmp_path)
    store_.save(builders.pod_record("c-other", held, namespace=POD_NS, pod="db", uid="u2"))
    config = {"type": "macvlan", "master": "eth1", "ipam": static("10.20.0.5/24")}
    view = view_of(pod(default_network="ovn"), nad("ovn", config))
    planned = build(view)
    policy = delegate_policy.DelegatePolicy(rules=delegate_policy.DelegateRules(reserved_ranges=()))

    guard = node_guard.NodeGuard(view=view, records=store_)
    with pytest.raises(delegate_guard.DelegateRefusedError) as caught:
        asyncio.run(guard.check_plan(planned, policy, "c1"))
    assert caught.value.code == 7
    assert "NetworkAttachmentDefinition blue/ovn refused" in caught.value.msg
    assert "held by the live attachment blue/net-a of pod blue/db" in caught.value.msg


@pytest.mark.req("DEV-DEFAULT", "SEC-NODE")
def test_a_recorded_pod_default_nad_has_a_nads_host_side(tmp_path: Path) -> None:
    """Another pod's default-network NAD (a ptp host veth, say) is a NAD's attachment: its host
    side is excused like a selection's; the cluster default's stays the node's own."""
    store_ = records.PodRecords(tmp_path)
    for container, status_name in (
        ("c-pod-default", "blue/ptp"),
        ("c-cluster-file", "cluster"),
        ("c-cluster-nad", "default/cluster"),
    ):
        attachment = records.AttachmentRecord(
            status_name=status_name,
            ifname="eth0",
            is_default=True,
            config={},
            capability_args={},
            result={
                "interfaces": [{"name": f"veth-{container}"}, {"name": "eth0", "sandbox": "/x"}]
            },
        )
        store_.save(builders.pod_record(container, attachment, namespace=POD_NS, pod=container))

    live = node_guard.live_attachments(store_, "c-self", cluster_nad="default/cluster")

    assert live.host_interfaces == {"veth-c-pod-default"}


# --- ADD, DEL and hot-plug through the orchestrator --------------------------------------------


@pytest.mark.req("DEV-DEFAULT")
def test_add_runs_the_nad_on_eth0_instead_of_the_cluster_default_and_del_undoes_it(
    tmp_path: Path,
) -> None:
    view = view_of(pod(default_network="ovn"), nad("ovn", MACVLAN))
    orch, sink, plugins = orchestrated(tmp_path, view)

    asyncio.run(orch.add(call(), {"cniVersion": "1.0.0", "runtimeConfig": RUNTIME_CONFIG}))

    assert plugins.commands() == [("macvlan", "ADD")]  # the cluster default's bridge never ran
    (added,) = [c for c in plugins.calls if c.command == "ADD"]
    assert added.env["CNI_IFNAME"] == "eth0"
    (entry,) = sink.status[(POD_NS, POD_NAME)]
    assert (entry["name"], entry["interface"], entry["default"]) == ("blue/ovn", "eth0", True)
    record = orch.records.load("c1")
    assert record is not None
    (att,) = record.attachments
    assert (att.status_name, att.is_default) == ("blue/ovn", True)

    # DEL works from the record, with the NAD gone from the cluster.
    view.remove(model.NAD, POD_NS, "ovn")
    plugins.calls.clear()
    asyncio.run(orch.delete(call(command="DEL")))
    assert plugins.commands() == [("macvlan", "DEL")]
    assert orch.records.load("c1") is None


@pytest.mark.req("DEV-DEFAULT", "SEC-DELEGATE")
def test_a_refused_default_network_nad_fails_the_add_before_any_plugin_runs(
    tmp_path: Path,
) -> None:
    view = view_of(
        pod(default_network="ovn"), nad("ovn", {"type": "host-device", "device": "eth0"})
    )
    orch, sink, plugins = orchestrated(tmp_path, view)

    refused = refused_add(orch)

    assert refused.msg.startswith(
        "[blue/web/u1] NetworkAttachmentDefinition blue/ovn refused by the delegate policy: "
    )
    assert plugins.commands() == []
    assert list(orch.records.container_ids()) == []
    (event,) = sink.events
    assert event[2] == delegate_guard.DelegateRefusedError.event_reason


@pytest.mark.req("DEV-DEFAULT", "KUBE-NADREAD")
def test_a_default_network_nad_the_cache_misses_is_read_from_the_api(tmp_path: Path) -> None:
    view = FetchingStore(pod(default_network="ovn"), nad=nad("ovn", MACVLAN))
    orch, sink, plugins = orchestrated(tmp_path, view)

    asyncio.run(orch.add(call(), {"cniVersion": "1.0.0"}))

    assert view.fetched == [(POD_NS, "ovn")]
    assert plugins.commands() == [("macvlan", "ADD")]
    assert [e["name"] for e in sink.status[(POD_NS, POD_NAME)]] == ["blue/ovn"]


@pytest.mark.req("DEV-DEFAULT", "KUBE-NADREAD")
def test_a_default_network_nad_the_api_does_not_have_either_is_101(tmp_path: Path) -> None:
    view = FetchingStore(pod(default_network="ovn"), nad=nad("other", MACVLAN))
    orch, sink, plugins = orchestrated(tmp_path, view)

    with pytest.raises(errors.AttachmentNotFoundError) as caught:
        asyncio.run(orch.add(call(), {"cniVersion": "1.0.0"}))

    assert caught.value.code == 101
    assert "blue/ovn" in caught.value.msg
    assert view.fetched == [(POD_NS, "ovn")]
    assert plugins.commands() == []
    assert sink.events[0][2] == "NetworkAttachmentDefinitionNotFound"


@pytest.mark.req("DEV-DEFAULT", "RT-HOTPLUG")
def test_hot_plug_never_touches_the_pods_default_network(tmp_path: Path) -> None:
    sandbox = tmp_path / "netns"  # the sandbox must exist for a pod to be hot-plugged
    sandbox.write_text("")
    view = view_of(
        pod(default_network="ovn"),
        nad("ovn", MACVLAN),
        nad("other", {"type": "macvlan", "master": "eth3"}),
        nad("net-a", {"type": "macvlan", "master": "eth2"}),
    )
    orch, _, plugins = orchestrated(tmp_path, view)
    asyncio.run(orch.add(call(netns=str(sandbox)), {"cniVersion": "1.0.0"}))
    plugins.calls.clear()

    # The default-network annotation changes, and a selection is added: only the selection
    # is plugged; the default stays the NAD the pod was created with.
    view.upsert(pod("net-a", default_network="other"))
    assert asyncio.run(orch.replug("c1"))

    assert plugins.commands() == [("macvlan", "ADD")]
    (added,) = [c for c in plugins.calls if c.command == "ADD"]
    assert added.env["CNI_IFNAME"] == "net1"
    record = orch.records.load("c1")
    assert record is not None
    assert [(a.status_name, a.ifname, a.is_default) for a in record.attachments] == [
        ("blue/ovn", "eth0", True),
        ("blue/net-a", "net1", False),
    ]
    # Nothing changes on a second pass.
    plugins.calls.clear()
    assert asyncio.run(orch.replug("c1"))
    assert plugins.commands() == []


@pytest.mark.req("DEV-DEFAULT")
def test_planned_attachments_default_to_not_a_pod_default() -> None:
    network = conf.parse_any({"cniVersion": "1.0.0", "name": "n", "type": "bridge"}, source="t")
    planned = plan.PlannedAttachment(
        status_name="n", ifname="eth0", is_default=True, network=network, capability_args={}
    )
    assert planned.pod_default is False
