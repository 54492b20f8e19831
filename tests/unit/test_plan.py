"""Tests of netattach.pods.plan: what a pod's ADD will attach, decided before anything runs.

Pure: the cluster view is a real `ClusterStore` filled by hand, on-disk networks are real files in
tmp_path, and nothing is executed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netattach.attach import selection
from netattach.cluster import model, store
from netattach.cni import errors
from netattach.pods import plan
from netattach.settings import network as network_settings
from tests import builders

POD_NS = "ns1"
POD_NAME = "pod1"


def _sel(interface: str = "", *, namespace: str = POD_NS, name: str = "net") -> selection.Selection:
    return selection.Selection(namespace=namespace, name=name, interface=interface)


def _refs(*refs: str) -> list[selection.Selection]:
    """A selection of each "namespace/name" of `refs`."""
    return [_sel(namespace=ref.split("/")[0], name=ref.split("/")[1]) for ref in refs]


# ---------------------------------------------------------------------------------------------
# choose_ifnames: SEL-TUPLE, SEL-IFACE


@pytest.mark.req("SEL-TUPLE")
def test_generated_names_follow_the_position_in_the_annotation() -> None:
    assert plan.choose_ifnames("eth0", [_sel(), _sel(), _sel()]) == ["net1", "net2", "net3"]


@pytest.mark.req("SEL-TUPLE", "SEL-IFACE")
def test_a_requested_name_at_its_own_position_leaves_the_others_in_place() -> None:
    # b asks for net2, which is what position 2 would get anyway: c still gets net3.
    names = plan.choose_ifnames("eth0", [_sel(), _sel("net2"), _sel()])
    assert names == ["net1", "net2", "net3"]


@pytest.mark.req("SEL-TUPLE", "SEL-IFACE")
def test_a_requested_first_name_does_not_shift_the_next_generated_one() -> None:
    assert plan.choose_ifnames("eth0", [_sel("net1"), _sel()]) == ["net1", "net2"]


@pytest.mark.req("SEL-TUPLE", "SEL-IFACE")
def test_a_later_request_for_net1_pushes_the_earlier_generated_name_past_it() -> None:
    # net1 is requested by the second selection, so the first may not take it.
    assert plan.choose_ifnames("eth0", [_sel(), _sel("net1")]) == ["net2", "net1"]


@pytest.mark.req("SEL-TUPLE", "SEL-IFACE")
def test_generated_names_skip_requested_ones_and_never_go_back() -> None:
    names = plan.choose_ifnames("eth0", [_sel(), _sel(), _sel("net2"), _sel()])
    assert names == ["net1", "net3", "net2", "net4"]


@pytest.mark.req("SEL-TUPLE", "SEL-IFACE")
def test_a_non_netN_request_keeps_positional_numbering() -> None:
    assert plan.choose_ifnames("eth0", [_sel("eth5"), _sel()]) == ["eth5", "net2"]


@pytest.mark.req("SEL-TUPLE")
def test_a_generated_name_never_equals_the_default_ifname() -> None:
    assert plan.choose_ifnames("net1", [_sel(), _sel()]) == ["net2", "net3"]


@pytest.mark.req("SEL-IFACE")
def test_duplicate_requests_are_kept_for_the_second_attachment_to_fail_at_run_time() -> None:
    # §4.1.2.1.5: the second attachment fails when it runs (the orchestrator's check), so the
    # plan keeps the name as requested instead of renaming it.
    assert plan.choose_ifnames("eth0", [_sel("eth0"), _sel("eth0")]) == ["eth0", "eth0"]


@pytest.mark.req("SEL-TUPLE")
def test_no_selections_no_names() -> None:
    assert plan.choose_ifnames("eth0", []) == []


_NAME_POOL = ["", "", "", "net1", "net2", "net3", "net4", "eth0", "eth5"]


@pytest.mark.req("SEL-TUPLE", "SEL-IFACE")
@given(
    requested=st.lists(st.sampled_from(_NAME_POOL), max_size=12),
    default_ifname=st.sampled_from(["eth0", "net1", "net2", "eth5"]),
)
def test_generated_names_are_unique_and_never_collide(
    requested: list[str], default_ifname: str
) -> None:
    selections = [_sel(name) for name in requested]
    names = plan.choose_ifnames(default_ifname, selections)

    assert len(names) == len(selections)
    wanted = {name for name in requested if name}
    generated = [names[i] for i, name in enumerate(requested) if not name]
    for i, name in enumerate(requested):
        if name:
            assert names[i] == name  # a requested name is used at its position, unchanged
    assert len(set(generated)) == len(generated)
    assert not set(generated) & wanted
    assert default_ifname not in generated
    assert all(g.startswith("net") and g[3:].isdigit() for g in generated)
    # by position: the N-th selection's generated name is never below netN
    for i, name in enumerate(requested):
        if not name:
            assert int(names[i][3:]) >= i + 1


# ---------------------------------------------------------------------------------------------
# check_isolation: RT-RESTRICT


def _cfg(
    *,
    isolation: bool = True,
    global_namespaces: tuple[str, ...] = ("default",),
    cluster_network: network_settings.ClusterNetworkRef | None = None,
    networks_dir: Path = Path("/nonexistent-netattach-test"),
) -> network_settings.NetworkSettings:
    return builders.networks(
        cluster_network or "x",
        networks_dir=networks_dir,
        isolation=isolation,
        global_namespaces=global_namespaces,
    )


@pytest.mark.req("RT-RESTRICT")
def test_isolation_allows_the_pods_own_namespace_and_global_ones() -> None:
    selections = _refs(f"{POD_NS}/a", "default/b", "shared/c")
    plan.check_isolation(POD_NS, selections, _cfg(global_namespaces=("default", "shared")))


@pytest.mark.req("RT-RESTRICT")
def test_isolation_refuses_other_namespaces_naming_each_refused_reference() -> None:
    selections = _refs(f"{POD_NS}/a", "other/b", "default/c", "third/d")
    with pytest.raises(errors.InvalidSelectionError) as caught:
        plan.check_isolation(POD_NS, selections, _cfg())
    assert caught.value.code == 102
    assert "other/b" in caught.value.msg
    assert "third/d" in caught.value.msg
    assert f"{POD_NS}/a" not in caught.value.msg
    assert "default/c" not in caught.value.msg
    assert repr(POD_NS) in caught.value.msg  # names the pod's namespace


@pytest.mark.req("RT-RESTRICT")
def test_isolation_without_global_namespaces_refuses_default_too() -> None:
    with pytest.raises(errors.InvalidSelectionError) as caught:
        plan.check_isolation(
            POD_NS, [_sel(namespace="default", name="b")], _cfg(global_namespaces=())
        )
    assert "default/b" in caught.value.msg
    assert "no other" in caught.value.details


@pytest.mark.req("RT-RESTRICT")
def test_isolation_off_allows_every_namespace() -> None:
    selections = [_sel(namespace="other", name="b"), _sel(namespace="third", name="d")]
    plan.check_isolation(POD_NS, selections, _cfg(isolation=False, global_namespaces=()))


# ---------------------------------------------------------------------------------------------
# build_plan: DEF-ATTACH, SEL-CAPS, SEL-TUPLE


def _macvlan(name: str, **extra: Any) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": name, "type": "macvlan", "master": "eth0", **extra}


def _nad(namespace: str, name: str, config: dict[str, Any]) -> model.KubeObject:
    return {
        "apiVersion": model.API_VERSIONS[model.NAD],
        "kind": model.NAD,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"config": json.dumps(config)},
    }


def _pod(networks: object | None) -> model.KubeObject:
    annotations = {} if networks is None else {model.NETWORKS_ANNOTATION: json.dumps(networks)}
    return {
        "apiVersion": "v1",
        "kind": model.POD,
        "metadata": {
            "name": POD_NAME,
            "namespace": POD_NS,
            "uid": "uid-1",
            "annotations": annotations,
        },
    }


def _write_default(directory: Path, name: str = "cluster-net") -> Path:
    raw = {
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [
            {"type": "bridge", "bridge": "cni0"},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    path = directory / f"10-{name}.conflist"
    path.write_text(json.dumps(raw), encoding="utf-8")
    return path


KUBELET_RUNTIME_CONFIG: dict[str, Any] = {
    "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
}


def _view(*objects: model.KubeObject) -> store.ClusterStore:
    view = store.ClusterStore()
    for obj in objects:
        view.upsert(obj)
    return view


def _build(
    view: store.ClusterStore,
    cfg: network_settings.NetworkSettings,
    *,
    runtime_config: dict[str, Any] | None = None,
    default_ifname: str = "eth0",
) -> list[plan.PlannedAttachment]:
    pod = view.lookup_pod(POD_NS, POD_NAME)
    assert pod is not None
    return plan.build_plan(
        pod=pod,
        default_ifname=default_ifname,
        runtime_config=KUBELET_RUNTIME_CONFIG if runtime_config is None else runtime_config,
        view=view,
        cfg=cfg,
    )


def _default_cfg(networks_dir: Path, **ref: Any) -> network_settings.NetworkSettings:
    """Settings whose cluster default network is the reference `ref`."""
    return _cfg(
        cluster_network=network_settings.ClusterNetworkRef(**ref), networks_dir=networks_dir
    )


def _name_cfg(networks_dir: Path, name: str = "cluster-net") -> network_settings.NetworkSettings:
    return _default_cfg(networks_dir, kind="name", name=name)


@pytest.mark.req("DEF-ATTACH", "SEL-TUPLE")
def test_plan_is_the_default_network_then_each_selection_in_order(tmp_path: Path) -> None:
    _write_default(tmp_path)
    view = _view(
        _pod([{"name": "a"}, {"name": "b", "namespace": "default", "interface": "eth9"}]),
        _nad(POD_NS, "a", _macvlan("a")),
        _nad("default", "b", _macvlan("b")),
    )
    planned = _build(view, _name_cfg(tmp_path))

    assert [p.status_name for p in planned] == ["cluster-net", f"{POD_NS}/a", "default/b"]
    assert [p.ifname for p in planned] == ["eth0", "net1", "eth9"]
    assert [p.is_default for p in planned] == [True, False, False]
    assert [p.network.name for p in planned] == ["cluster-net", "a", "b"]
    assert [pl.type for pl in planned[0].network.plugins] == ["bridge", "portmap"]


@pytest.mark.req("DEF-ATTACH")
def test_a_pod_without_selections_gets_the_default_network_only(tmp_path: Path) -> None:
    _write_default(tmp_path)
    planned = _build(_view(_pod(None)), _name_cfg(tmp_path))
    assert len(planned) == 1
    assert planned[0].is_default
    assert planned[0].ifname == "eth0"
    assert planned[0].status_name == "cluster-net"


# A selected network "a" that declares portMappings too.
WITH_PORTMAP = {
    "cniVersion": "1.0.0",
    "name": "a",
    "plugins": [
        {"type": "macvlan", "master": "eth0"},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ],
}


@pytest.mark.req("SEL-CAPS")
def test_kubelet_runtime_capabilities_apply_to_the_default_network_only(tmp_path: Path) -> None:
    """SEL-CAPS, the "runtime capabilities apply to the default network only" half (§7.5)."""
    _write_default(tmp_path)
    # The selected network declares portMappings too: it still must not get the kubelet's.
    view = _view(_pod([{"name": "a"}]), _nad(POD_NS, "a", WITH_PORTMAP))
    planned = _build(view, _name_cfg(tmp_path))

    assert dict(planned[0].capability_args) == KUBELET_RUNTIME_CONFIG
    assert dict(planned[1].capability_args) == {}
    assert all("runtimeConfig" not in p.raw for p in planned[1].network.plugins)


@pytest.mark.req("SEL-CAPS")
def test_a_selections_own_capability_request_reaches_only_its_network(tmp_path: Path) -> None:
    _write_default(tmp_path)
    request = [{"hostPort": 9090, "containerPort": 90, "protocol": "UDP"}]
    view = _view(_pod([{"name": "a", "portMappings": request}]), _nad(POD_NS, "a", WITH_PORTMAP))
    planned = _build(view, _name_cfg(tmp_path))

    assert dict(planned[0].capability_args) == KUBELET_RUNTIME_CONFIG
    assert dict(planned[1].capability_args) == {
        "portMappings": [{"hostPort": 9090, "containerPort": 90, "protocol": "udp"}]
    }


@pytest.mark.req("SEL-CAPS")
def test_ips_mac_and_cni_args_travel_in_args_cni_of_every_plugin(tmp_path: Path) -> None:
    _write_default(tmp_path)
    config = {
        "cniVersion": "1.0.0",
        "name": "a",
        "plugins": [
            {"type": "macvlan", "master": "eth0", "args": {"cni": {"own": 1}, "other": "kept"}},
            {"type": "tuning"},
        ],
    }
    networks = [
        {
            "name": "a",
            "ips": ["10.1.1.5/24"],
            "mac": "c2:b0:57:49:47:f1",
            "cni-args": {"foo": "bar", "ips": ["overridden"]},
        }
    ]
    view = _view(_pod(networks), _nad(POD_NS, "a", config))
    planned = _build(view, _name_cfg(tmp_path))

    selected = planned[1]
    expected_cni = {"foo": "bar", "ips": ["10.1.1.5/24"], "mac": "c2:b0:57:49:47:f1"}
    first, second = (p.raw for p in selected.network.plugins)
    assert first["args"] == {"cni": {"own": 1, **expected_cni}, "other": "kept"}
    assert second["args"] == {"cni": expected_cni}
    assert selected.network.raw["plugins"] == [first, second]
    assert selected.ips == ("10.1.1.5/24",)
    assert selected.mac == "c2:b0:57:49:47:f1"
    # neither plugin declares ips/mac: they go through args.cni only, no runtimeConfig
    assert dict(selected.capability_args) == {}
    # the default network is not touched by the selection's arguments
    assert all("args" not in p.raw for p in planned[0].network.plugins)


@pytest.mark.req("SEL-CAPS")
def test_ips_reach_runtime_config_when_a_plugin_declares_the_capability(tmp_path: Path) -> None:
    _write_default(tmp_path)
    config = _macvlan("a", ipam={"type": "static"}, capabilities={"ips": True})
    view = _view(_pod([{"name": "a", "ips": ["10.1.1.5/24"]}]), _nad(POD_NS, "a", config))
    planned = _build(view, _name_cfg(tmp_path))
    assert dict(planned[1].capability_args) == {"ips": ["10.1.1.5/24"]}
    assert planned[1].network.plugins[0].raw["args"] == {"cni": {"ips": ["10.1.1.5/24"]}}


@pytest.mark.req("SEL-CAPS")
def test_ipam_claim_reference_travels_in_args_cni_unless_cni_args_names_one(
    tmp_path: Path,
) -> None:
    _write_default(tmp_path)
    networks = [
        {"name": "a", "ipam-claim-reference": "claim-1"},
        {"name": "a", "ipam-claim-reference": "claim-2", "cni-args": {"ipam-claim-reference": "x"}},
    ]
    view = _view(_pod(networks), _nad(POD_NS, "a", _macvlan("a")))
    planned = _build(view, _name_cfg(tmp_path))
    assert planned[1].network.plugins[0].raw["args"] == {"cni": {"ipam-claim-reference": "claim-1"}}
    assert planned[2].network.plugins[0].raw["args"] == {"cni": {"ipam-claim-reference": "x"}}


@pytest.mark.req("SEL-CAPS")
def test_a_request_no_plugin_of_the_selected_network_declares_fails_the_plan(
    tmp_path: Path,
) -> None:
    _write_default(tmp_path)  # the default declares portMappings: that does not help `a`
    networks = [{"name": "a", "portMappings": [{"hostPort": 1, "containerPort": 2}]}]
    view = _view(_pod(networks), _nad(POD_NS, "a", _macvlan("a")))
    with pytest.raises(errors.InvalidSelectionError) as caught:
        _build(view, _name_cfg(tmp_path))
    assert caught.value.code == 102
    assert "'portMappings'" in caught.value.msg
    assert "'a'" in caught.value.msg


@pytest.mark.req("SEL-TUPLE")
def test_the_same_network_selected_twice_is_two_attachments(tmp_path: Path) -> None:
    _write_default(tmp_path)
    view = _view(_pod([{"name": "a"}, {"name": "a"}]), _nad(POD_NS, "a", _macvlan("a")))
    planned = _build(view, _name_cfg(tmp_path))
    assert [(p.status_name, p.ifname) for p in planned[1:]] == [
        (f"{POD_NS}/a", "net1"),
        (f"{POD_NS}/a", "net2"),
    ]


@pytest.mark.req("DEF-ATTACH")
def test_a_missing_nad_fails_the_plan_with_101_naming_it(tmp_path: Path) -> None:
    _write_default(tmp_path)
    view = _view(_pod([{"name": "a"}, {"name": "missing"}]), _nad(POD_NS, "a", _macvlan("a")))
    with pytest.raises(errors.AttachmentNotFoundError) as caught:
        _build(view, _name_cfg(tmp_path))
    assert caught.value.code == 101
    assert f"{POD_NS}/missing" in caught.value.msg


@pytest.mark.req("RT-RESTRICT")
def test_build_plan_refuses_a_foreign_namespace_before_looking_anything_up(
    tmp_path: Path,
) -> None:
    # No default network on disk either: isolation is what fails, with 102.
    view = _view(_pod([{"name": "b", "namespace": "other"}]), _nad("other", "b", _macvlan("b")))
    with pytest.raises(errors.InvalidSelectionError) as caught:
        _build(view, _name_cfg(tmp_path))
    assert caught.value.code == 102
    assert "other/b" in caught.value.msg


@pytest.mark.req("DEF-ATTACH")
def test_the_cluster_default_as_a_nad_reference(tmp_path: Path) -> None:
    cfg = _default_cfg(tmp_path, kind="nad", namespace="kube-system", name="cluster")
    view = _view(_pod(None), _nad("kube-system", "cluster", _macvlan("cluster")))
    planned = _build(view, cfg)
    assert len(planned) == 1
    assert planned[0].status_name == "kube-system/cluster"
    assert planned[0].network.name == "cluster"
    assert planned[0].is_default
    assert dict(planned[0].capability_args) == KUBELET_RUNTIME_CONFIG


@pytest.mark.req("DEF-ATTACH")
def test_the_cluster_default_as_a_missing_nad_is_101_naming_it(tmp_path: Path) -> None:
    cfg = _default_cfg(tmp_path, kind="nad", namespace="kube-system", name="cluster")
    with pytest.raises(errors.AttachmentNotFoundError) as caught:
        _build(_view(_pod(None)), cfg)
    assert "kube-system/cluster" in caught.value.msg


@pytest.mark.req("DEF-ATTACH")
def test_the_cluster_default_as_an_on_disk_network_name(tmp_path: Path) -> None:
    _write_default(tmp_path, "other-net")
    path = _write_default(tmp_path, "cluster-net")
    planned = _build(_view(_pod(None)), _name_cfg(tmp_path, "cluster-net"))
    assert planned[0].status_name == "cluster-net"
    assert planned[0].network.source == str(path)


@pytest.mark.req("DEF-ATTACH")
def test_the_cluster_default_as_a_file_path(tmp_path: Path) -> None:
    conf_path = tmp_path / "elsewhere" / "default.conf"
    conf_path.parent.mkdir()
    conf_path.write_text(json.dumps(_macvlan("from-file")), encoding="utf-8")
    # tmp_path holds nothing: the path is used, not the directory
    cfg = _default_cfg(tmp_path, kind="file", path=conf_path)
    planned = _build(_view(_pod(None)), cfg)
    assert planned[0].status_name == "from-file"
    assert planned[0].network.source == str(conf_path)
    assert [p.type for p in planned[0].network.plugins] == ["macvlan"]


@pytest.mark.req("DEF-ATTACH")
def test_a_missing_default_file_fails_naming_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "gone.conflist"
    cfg = _default_cfg(tmp_path, kind="file", path=missing)
    with pytest.raises(errors.CNIError) as caught:
        _build(_view(_pod(None)), cfg)
    assert repr(str(missing)) in caught.value.msg


@pytest.mark.req("DEF-ATTACH")
def test_a_missing_on_disk_default_is_101_naming_the_directory(tmp_path: Path) -> None:
    _write_default(tmp_path, "not-it")
    (tmp_path / "20-broken.conflist").write_text("{", encoding="utf-8")
    view = _view(_pod(None))
    with pytest.raises(errors.AttachmentNotFoundError) as caught:
        _build(view, _name_cfg(tmp_path, "cluster-net"))
    assert caught.value.code == 101
    assert "'cluster-net'" in caught.value.msg
    assert repr(str(tmp_path)) in caught.value.msg
    assert "20-broken.conflist" in caught.value.details  # the skipped file is named


@pytest.mark.req("DEF-ATTACH")
def test_resolve_default_by_name_returns_the_network_and_its_name(tmp_path: Path) -> None:
    _write_default(tmp_path)
    name, network = plan.resolve_default(_view(), _name_cfg(tmp_path))
    assert name == "cluster-net"
    assert network.name == "cluster-net"
