"""Tests of netattach.attach.delegate: NAD -> delegate config, selection applied, result verified.

Config directories are real files in tmp_path; nothing is executed (the module runs no plugin).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netattach.attach import delegate
from netattach.cni import conf, errors
from netattach.cni import result as cni_result
from netattach.runtime import chain


def _write(directory: Path, filename: str, raw: dict[str, Any]) -> Path:
    path = directory / filename
    path.write_text(json.dumps(raw), encoding="utf-8")
    return path


def _macvlan(name: str, **extra: Any) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": name, "type": "macvlan", "master": "eth0", **extra}


def _list(name: str, *plugins: dict[str, Any]) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": name, "plugins": list(plugins)}


def _resolve(
    tmp_path: Path, spec_config: str | None, *, has_spec: bool = True, name: str = "net"
) -> delegate.Delegate:
    return delegate.resolve_delegate(
        namespace="ns1",
        name=name,
        spec_config=spec_config,
        has_spec=has_spec,
        networks_dir=tmp_path,
    )


# ---------------------------------------------------------------------------------------------
# resolve_delegate: the order of standard §3.4.1


@pytest.mark.req("NAD-RESOLVE")
def test_spec_config_wins_over_a_file_of_the_same_name(tmp_path: Path) -> None:
    _write(tmp_path, "10-net.conflist", _list("net", {"type": "bridge"}))
    found = _resolve(tmp_path, json.dumps(_macvlan("net")))
    assert found.source == "spec.config"
    assert [p.type for p in found.network.plugins] == ["macvlan"]
    assert found.name_mismatch is None


@pytest.mark.req("NAD-RESOLVE")
def test_a_conflist_is_preferred_over_a_conf_with_the_same_name(tmp_path: Path) -> None:
    # The .conf sorts first: the preference is the kind of file, not the order of the names.
    _write(tmp_path, "00-net.conf", _macvlan("net"))
    conflist = _write(tmp_path, "99-net.conflist", _list("net", {"type": "bridge"}))
    found = _resolve(tmp_path, None, has_spec=True)
    assert found.source == str(conflist)
    assert [p.type for p in found.network.plugins] == ["bridge"]


@pytest.mark.req("NAD-RESOLVE")
def test_a_conf_is_used_when_no_conflist_has_the_name(tmp_path: Path) -> None:
    _write(tmp_path, "10-other.conflist", _list("other", {"type": "bridge"}))
    conf_path = _write(tmp_path, "20-net.conf", _macvlan("net"))
    _write(tmp_path, "30-else.json", _macvlan("else"))
    found = _resolve(tmp_path, "")
    assert found.source == str(conf_path)
    assert found.network.name == "net"
    assert [p.type for p in found.network.plugins] == ["macvlan"]


@pytest.mark.req("NAD-RESOLVE")
@pytest.mark.parametrize("has_spec", [True, False], ids=["spec-without-config", "no-spec"])
def test_nothing_found_is_101_naming_the_nad_and_the_directory(
    tmp_path: Path, has_spec: bool
) -> None:
    _write(tmp_path, "10-other.conflist", _list("other", {"type": "bridge"}))
    with pytest.raises(errors.AttachmentNotFoundError) as info:
        _resolve(tmp_path, None, has_spec=has_spec, name="missing-net")
    assert info.value.code == 101
    assert "ns1/missing-net" in info.value.msg
    assert str(tmp_path) in info.value.msg
    assert ("has no spec.config" if has_spec else "has no spec,") in info.value.msg


@pytest.mark.req("NAD-RESOLVE")
def test_a_missing_directory_is_not_found_too(tmp_path: Path) -> None:
    with pytest.raises(errors.AttachmentNotFoundError) as info:
        delegate.resolve_delegate(
            namespace="ns1",
            name="net",
            spec_config=None,
            has_spec=False,
            networks_dir=tmp_path / "absent",
        )
    assert str(tmp_path / "absent") in info.value.msg


@pytest.mark.req("NAD-IMPLICIT")
def test_a_nad_without_spec_names_a_network_on_disk(tmp_path: Path) -> None:
    # standard §3.2.4: no spec at all; the NAD refers to a network the node knows by its name.
    path = _write(tmp_path, "50-sriov.conflist", _list("sriov-net", {"type": "sriov"}))
    found = _resolve(tmp_path, None, has_spec=False, name="sriov-net")
    assert found.source == str(path)
    assert found.network.name == "sriov-net"
    assert found.name_mismatch is None


# ---------------------------------------------------------------------------------------------
# Name injection and mismatch


@pytest.mark.req("NAD-NAMEINJ")
def test_a_config_without_name_gets_the_nads_name_and_nothing_else_changes(
    tmp_path: Path,
) -> None:
    # standard §3.4.2.1, with plugin-specific fields that must reach the delegate untouched.
    written = (
        '{"cniVersion": "0.3.0", "type": "awesome-plugin", "zeta": 1.5, '
        '"nested": {"b": [1, {"c": null}], "a": "\\u00e9"}, "flag": false}'
    )
    found = _resolve(tmp_path, written, name="a-bridge-network")
    original = json.loads(written)
    (plugin,) = found.network.plugins
    assert found.network.name == "a-bridge-network"
    assert plugin.raw == {**original, "name": "a-bridge-network"}
    # Every other key keeps its value and its place.
    assert [k for k in plugin.raw if k != "name"] == list(original)
    without_name = {k: v for k, v in plugin.raw.items() if k != "name"}
    assert json.dumps(without_name) == json.dumps(original)
    assert found.name_mismatch is None
    # What the delegate gets on stdin (the runtime's job) carries the injected name.
    sent = chain.build_plugin_config(found.network, plugin)
    assert sent["name"] == "a-bridge-network"
    assert sent["type"] == "awesome-plugin"


@pytest.mark.req("NAD-NAMEINJ")
@pytest.mark.parametrize("name_value", ['""', "null"], ids=["empty", "null"])
def test_an_empty_or_null_name_is_replaced_in_place(tmp_path: Path, name_value: str) -> None:
    written = f'{{"cniVersion": "1.0.0", "name": {name_value}, "type": "macvlan"}}'
    found = _resolve(tmp_path, written, name="macvlan-net")
    assert list(found.network.plugins[0].raw.items()) == [
        ("cniVersion", "1.0.0"),
        ("name", "macvlan-net"),
        ("type", "macvlan"),
    ]


@pytest.mark.req("NAD-NAMEINJ")
def test_a_config_list_without_name_gets_it_on_the_list(tmp_path: Path) -> None:
    written = {
        "cniVersion": "1.0.0",
        "plugins": [{"type": "bridge", "bridge": "br9"}, {"type": "tuning", "sysctl": {}}],
    }
    found = _resolve(tmp_path, json.dumps(written), name="chained")
    assert found.network.name == "chained"
    assert found.network.raw == {**written, "name": "chained"}
    assert [p.raw for p in found.network.plugins] == written["plugins"]
    assert all(
        chain.build_plugin_config(found.network, p)["name"] == "chained"
        for p in found.network.plugins
    )


def test_a_different_name_is_used_with_a_warning_naming_both(tmp_path: Path) -> None:
    found = _resolve(tmp_path, json.dumps(_macvlan("mynet")), name="bridge-multus-cni")
    assert found.network.name == "mynet"
    assert found.name_mismatch is not None
    assert "'mynet'" in found.name_mismatch
    assert "'bridge-multus-cni'" in found.name_mismatch
    assert "ns1/bridge-multus-cni" in found.name_mismatch


# ---------------------------------------------------------------------------------------------
# Bad spec.config


BAD_CONFIGS = {
    "not-json": ("{'type': 'macvlan'}", "not valid JSON"),
    "truncated": ('{"type": "macvlan"', "not valid JSON"),
    "a-list": ('[{"type": "macvlan"}]', "not a list"),
    "a-string": ('"macvlan"', "not a string"),
    "no-type-no-plugins": ('{"cniVersion": "1.0.0", "master": "eth0"}', "neither 'type'"),
    "type-with-slash": ('{"type": "/opt/cni/bin/macvlan"}', "plain file name"),
    "type-with-dotdot": ('{"type": "..macvlan"}', "plain file name"),
    "type-not-string": ('{"type": 5}', "non-empty string"),
    "plugins-empty": ('{"plugins": []}', "non-empty list"),
    "plugins-not-list": ('{"plugins": {"type": "bridge"}}', "non-empty list"),
    "plugin-path": ('{"plugins": [{"type": "bridge"}, {"type": "a/b"}]}', "plugins[1]"),
    "bad-version": ('{"cniVersion": 1.0, "type": "macvlan"}', "cniVersion 1.0"),
    "bad-capabilities": ('{"type": "portmap", "capabilities": ["portMappings"]}', "capabilities"),
    "name-not-string": ('{"name": 5, "type": "macvlan"}', "network name 5"),
    "nan": ('{"type": "macvlan", "mtu": NaN}', "NaN is not a JSON value"),
    "deep-nesting": ('{"type": "x", "a": ' + "[" * 50_000 + "]" * 50_000 + "}", "32 deep"),
    "past-the-depth-limit": ('{"type": "x", "a": ' + "[" * 40 + "]" * 40 + "}", "32 deep"),
}


@pytest.mark.req("NAD-BADCONF")
@pytest.mark.parametrize(("text", "expected"), BAD_CONFIGS.values(), ids=BAD_CONFIGS.keys())
def test_a_bad_spec_config_is_code_7_naming_the_nad_and_the_problem(
    tmp_path: Path, text: str, expected: str
) -> None:
    # A file with the NAD's name exists: a bad spec.config must not fall back to it.
    _write(tmp_path, "10-bad-net.conf", _macvlan("bad-net"))
    with pytest.raises(errors.InvalidNetworkConfigError) as info:
        _resolve(tmp_path, text, name="bad-net")
    assert info.value.code == 7
    assert "NetworkAttachmentDefinition ns1/bad-net" in info.value.msg
    assert "spec.config" in info.value.msg
    assert expected in info.value.msg


@pytest.mark.req("NAD-BADCONF")
def test_an_oversized_spec_config_is_refused_before_parsing_quoting_the_limit(
    tmp_path: Path,
) -> None:
    filler = "x" * delegate.SPEC_CONFIG_MAX_BYTES
    text = json.dumps({"type": "macvlan", "pad": filler})
    with pytest.raises(errors.InvalidNetworkConfigError) as info:
        _resolve(tmp_path, text, name="big")
    assert "ns1/big" in info.value.msg
    assert str(delegate.SPEC_CONFIG_MAX_BYTES) in info.value.msg
    assert "256 KiB" in info.value.msg


def test_the_size_limit_counts_bytes_not_characters(tmp_path: Path) -> None:
    # 3 bytes per character in UTF-8: under the limit in characters, over it in bytes.
    pad = "\u20ac" * (delegate.SPEC_CONFIG_MAX_BYTES // 3 + 10)
    text = '{"type": "macvlan", "pad": "' + pad + '"}'
    assert len(text) < delegate.SPEC_CONFIG_MAX_BYTES
    with pytest.raises(errors.InvalidNetworkConfigError, match="larger than the limit"):
        _resolve(tmp_path, text)
    # And a config just under the limit is accepted.
    fits = json.dumps({"type": "macvlan", "pad": "x" * (delegate.SPEC_CONFIG_MAX_BYTES - 100)})
    assert _resolve(tmp_path, fits).network.plugins[0].type == "macvlan"


def test_a_non_string_spec_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(errors.InvalidNetworkConfigError, match="must be a string"):
        _resolve(tmp_path, {"type": "macvlan"})  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# apply_selection


def _network(*plugins: dict[str, Any], name: str = "net") -> conf.NetworkConfigList:
    return conf.parse_config_list(_list(name, *plugins), source="test")


def _cni_args(network: conf.NetworkConfigList) -> list[Any]:
    return [p.raw.get("args", {}).get("cni") for p in network.plugins]


@pytest.mark.req("SEL-CNIARGS")
def test_cni_args_merge_into_every_plugins_args_cni_and_the_annotation_wins() -> None:
    network = _network(
        {
            "type": "macvlan",
            "args": {"cni": {"keep": 1, "override": "nad"}, "org.example": {"x": 1}},
        },
        {"type": "tuning"},
    )
    applied, caps = delegate.apply_selection(
        network,
        cni_args={"override": "annotation", "new": [1, 2]},
        runtime_requests={},
    )
    assert _cni_args(applied) == [
        {"keep": 1, "override": "annotation", "new": [1, 2]},
        {"override": "annotation", "new": [1, 2]},
    ]
    # Other `args` keys stay as they were.
    assert applied.plugins[0].raw["args"]["org.example"] == {"x": 1}
    assert caps == {}
    # And the delegates get it on stdin.
    sent = chain.build_plugin_config(applied, applied.plugins[1])
    assert sent["args"] == {"cni": {"override": "annotation", "new": [1, 2]}}


def test_ips_and_mac_go_into_args_cni_over_a_same_named_cni_arg() -> None:
    network = _network({"type": "macvlan", "ipam": {"type": "static"}})
    applied, caps = delegate.apply_selection(
        network,
        ips=("10.1.1.5/24", "fd00::5/64"),
        mac="02:00:00:00:00:05",
        cni_args={"ips": ["1.1.1.1/32"], "other": True},
        runtime_requests={},
    )
    assert _cni_args(applied) == [
        {"ips": ["10.1.1.5/24", "fd00::5/64"], "mac": "02:00:00:00:00:05", "other": True}
    ]
    # No plugin declares "ips" or "mac": args.cni is their only route, and that is no error.
    assert caps == {}


def test_runtime_config_carries_only_declared_capabilities() -> None:
    network = _network(
        {"type": "macvlan", "capabilities": {"ips": True, "mac": True}},
        {"type": "portmap", "capabilities": {"portMappings": True, "bandwidth": False}},
    )
    mappings = [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]
    applied, caps = delegate.apply_selection(
        network,
        ips=("10.1.1.5/24",),
        mac="02:00:00:00:00:05",
        runtime_requests={"portMappings": mappings, "bandwidth": None, "infinibandGUID": ""},
    )
    assert caps == {"portMappings": mappings, "ips": ["10.1.1.5/24"], "mac": "02:00:00:00:00:05"}
    assert caps["portMappings"] is not mappings
    # ips/mac also travel in args.cni (SEL-CAPS: "and ips/mac also through args.cni").
    assert _cni_args(applied)[0] == {"ips": ["10.1.1.5/24"], "mac": "02:00:00:00:00:05"}
    # The runtime then gives each plugin only what it declares.
    first = chain.build_plugin_config(applied, applied.plugins[0], capability_args=caps)
    second = chain.build_plugin_config(applied, applied.plugins[1], capability_args=caps)
    assert first["runtimeConfig"] == {"ips": ["10.1.1.5/24"], "mac": "02:00:00:00:00:05"}
    assert second["runtimeConfig"] == {"portMappings": mappings}


def test_a_request_no_plugin_declares_is_102_naming_the_capability_and_network() -> None:
    network = _network(
        {"type": "macvlan"},
        {"type": "portmap", "capabilities": {"portMappings": True}},
        name="macvlan-net",
    )
    with pytest.raises(errors.InvalidSelectionError) as info:
        delegate.apply_selection(
            network,
            runtime_requests={
                "portMappings": [{"hostPort": 1, "containerPort": 2}],
                "bandwidth": {"ingressRate": 1000, "ingressBurst": 10},
                "infinibandGUID": "c2:11:22:33:44:55:66:77",
            },
        )
    assert info.value.code == 102
    assert "'macvlan-net'" in info.value.msg
    assert "'bandwidth'" in info.value.msg
    assert "'infinibandGUID'" in info.value.msg
    assert "'portMappings'" not in info.value.msg.split(":")[0]
    assert "declared: portMappings" in info.value.msg


def test_an_ips_request_without_an_args_route_needs_the_capability() -> None:
    # Only `ips` given as `ips` travels in args.cni; a bare runtime request has no such route.
    network = _network({"type": "macvlan"})
    with pytest.raises(errors.InvalidSelectionError, match="'ips'"):
        delegate.apply_selection(network, runtime_requests={"ips": ["10.0.0.1/24"]})


def test_a_plugin_whose_args_is_not_an_object_cannot_take_cni_args() -> None:
    network = _network({"type": "tuning"}, {"type": "macvlan", "args": ["x"]})
    with pytest.raises(errors.InvalidNetworkConfigError) as info:
        delegate.apply_selection(network, cni_args={"a": 1}, runtime_requests={})
    assert "plugin 1 (macvlan)" in info.value.msg
    # Without anything to merge, such a plugin is left alone.
    applied, _ = delegate.apply_selection(network, runtime_requests={})
    assert applied.plugins[1].raw["args"] == ["x"]

    bad_cni = _network({"type": "macvlan", "args": {"cni": "x"}})
    with pytest.raises(errors.InvalidNetworkConfigError, match=r"args\.cni"):
        delegate.apply_selection(bad_cni, mac="02:00:00:00:00:01", runtime_requests={})


def _snapshot(network: conf.NetworkConfigList) -> tuple[Any, ...]:
    return (copy.deepcopy(network.raw), [copy.deepcopy(p.raw) for p in network.plugins])


@pytest.mark.req("SEL-CNIARGS")
def test_the_input_network_is_never_mutated_and_the_copy_is_consistent() -> None:
    network = _network(
        {"type": "macvlan", "args": {"cni": {"a": {"deep": [1]}}}, "capabilities": {"mac": True}},
        {"type": "tuning"},
    )
    before = _snapshot(network)
    applied, caps = delegate.apply_selection(
        network,
        ips=("10.0.0.2/24",),
        mac="02:00:00:00:00:02",
        cni_args={"a": {"deep": [2]}, "b": {"list": [1]}},
        runtime_requests={"mac": "02:00:00:00:00:02"},
    )
    assert _snapshot(network) == before
    # The list's raw "plugins" are the plugins' raws, as conf builds them.
    assert all(a is b.raw for a, b in zip(applied.raw["plugins"], applied.plugins, strict=True))
    # Changing the copy (as a later step might) leaves the input alone.
    applied.plugins[0].raw["args"]["cni"]["b"]["list"].append(9)
    applied.raw["cniVersion"] = "0.4.0"
    assert _snapshot(network) == before
    assert applied.name == network.name
    assert [p.capabilities for p in applied.plugins] == [p.capabilities for p in network.plugins]
    assert caps == {"mac": "02:00:00:00:00:02"}


def test_a_single_conf_network_gets_the_args_too(tmp_path: Path) -> None:
    path = _write(tmp_path, "10-net.conf", _macvlan("net"))
    network = conf.load_file(path)
    applied, _ = delegate.apply_selection(network, cni_args={"k": "v"}, runtime_requests={})
    assert applied.plugins[0].raw["args"] == {"cni": {"k": "v"}}
    assert applied.raw["plugins"][0] is applied.plugins[0].raw
    assert "args" not in network.plugins[0].raw


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)
json_maps = st.dictionaries(st.text(max_size=5), json_values, max_size=4)


@pytest.mark.req("SEL-CNIARGS")
@given(own=json_maps, annotation=json_maps)
def test_merge_is_own_args_then_annotation_over_them(
    own: dict[str, Any], annotation: dict[str, Any]
) -> None:
    network = _network({"type": "macvlan", "args": {"cni": own}}, {"type": "tuning"})
    before = _snapshot(network)
    applied, _ = delegate.apply_selection(network, cni_args=annotation, runtime_requests={})
    merged = {**own, **annotation}
    assert _cni_args(applied)[0] == (merged if merged else own)
    assert _cni_args(applied)[1] == (annotation if annotation else None)
    assert _snapshot(network) == before


# ---------------------------------------------------------------------------------------------
# verify_result


def _result(*ips: cni_result.IPConfig, mac: str = "0A:58:0A:F4:00:07") -> cni_result.Result100:
    return cni_result.Result100(
        cni_version="1.0.0",
        interfaces=(
            cni_result.Interface(name="cni0", mac="aa:aa:aa:aa:aa:aa"),
            cni_result.Interface(name="net1", mac=mac, sandbox="/var/run/netns/p"),
        ),
        ips=ips,
    )


@pytest.mark.parametrize(
    "requested",
    [("10.1.1.5/24",), ("10.1.1.5",), ("10.1.1.5", "fd00::0005/64"), ()],
    ids=["cidr", "bare", "dual-stack-non-canonical", "none"],
)
@pytest.mark.parametrize("mac", ["", "0a:58:0a:f4:00:07", "0A-58-0A-F4-00-07", "0a58.0af4.0007"])
def test_requested_ips_and_mac_on_the_interface_pass(requested: tuple[str, ...], mac: str) -> None:
    result = _result(
        cni_result.IPConfig(address="10.1.1.5/24", interface=1),
        cni_result.IPConfig(address="fd00::5/64", interface=1),
    )
    delegate.verify_result(result, ifname="net1", ips=requested, mac=mac, network="ns/net")


@pytest.mark.parametrize(
    ("result", "ips", "mac", "expected"),
    [
        (
            _result(cni_result.IPConfig(address="10.1.1.6/24", interface=1)),
            ("10.1.1.5",),
            "",
            "IP 10.1.1.5",
        ),
        (
            _result(cni_result.IPConfig(address="10.1.1.5/16", interface=1)),
            ("10.1.1.5/24",),
            "",
            "IP 10.1.1.5/24",
        ),
        (
            _result(cni_result.IPConfig(address="10.1.1.5/24", interface=0)),
            ("10.1.1.5",),
            "",
            "IP 10.1.1.5",
        ),
        (_result(), (), "02:00:00:00:00:01", "MAC 02:00:00:00:00:01"),
        (_result(mac=""), (), "02:00:00:00:00:01", "reports no MAC"),
        (
            cni_result.Result020(
                cni_version="0.2.0", ip4=cni_result.IPv4or6Config(ip="10.1.1.5/24")
            ),
            ("10.1.1.5",),
            "02:00:00:00:00:01",
            "has no interfaces",
        ),
        (
            cni_result.Result040(
                cni_version="0.4.0",
                interfaces=(cni_result.Interface(name="eth0", sandbox="/ns"),),
                ips=(cni_result.IPConfig(address="10.1.1.5/24", interface=0),),
            ),
            ("10.1.1.5",),
            "",
            "sandbox interfaces are 'eth0'",
        ),
    ],
    ids=[
        "other-ip",
        "other-prefix",
        "on-host-interface",
        "other-mac",
        "no-mac",
        "old-result-cannot-show-mac",
        "no-interface-named-ifname",
    ],
)
def test_what_the_result_does_not_give_fails_with_code_7(
    result: cni_result.Result, ips: tuple[str, ...], mac: str, expected: str
) -> None:
    with pytest.raises(errors.InvalidNetworkConfigError) as info:
        delegate.verify_result(result, ifname="net1", ips=ips, mac=mac, network="ns1/static-net")
    assert info.value.code == 7
    assert "'ns1/static-net'" in info.value.msg
    assert "'net1'" in info.value.msg
    assert expected in info.value.msg


def test_every_missing_request_is_listed_at_once() -> None:
    result = _result(cni_result.IPConfig(address="10.1.1.5/24", interface=1))
    with pytest.raises(errors.InvalidNetworkConfigError) as info:
        delegate.verify_result(
            result, ifname="net1", ips=("10.1.1.5", "10.1.1.6", "fd00::6"), mac="02:00:00:00:00:09"
        )
    msg = info.value.msg
    assert "IP 10.1.1.6" in msg
    assert "IP fd00::6" in msg
    assert "MAC 02:00:00:00:00:09" in msg
    assert "IP 10.1.1.5," not in msg
    assert "addresses it does give: 10.1.1.5/24" in msg


def test_old_results_and_results_without_sandbox_offer_their_unbound_ips() -> None:
    old = cni_result.Result020(
        cni_version="0.2.0",
        ip4=cni_result.IPv4or6Config(ip="10.1.1.5/24"),
        ip6=cni_result.IPv4or6Config(ip="fd00::5/64"),
    )
    delegate.verify_result(old, ifname="net1", ips=("10.1.1.5", "fd00::5/64"), mac="")
    no_sandbox = cni_result.Result100(
        cni_version="1.0.0",
        interfaces=(cni_result.Interface(name="br0"),),
        ips=(
            cni_result.IPConfig(address="10.1.1.5/24"),
            cni_result.IPConfig(address="10.1.1.9/24", interface=0),
        ),
    )
    delegate.verify_result(no_sandbox, ifname="net1", ips=("10.1.1.5",), mac="")
    with pytest.raises(errors.InvalidNetworkConfigError, match="no sandbox interface"):
        delegate.verify_result(no_sandbox, ifname="net1", ips=("10.1.1.9",), mac="")


def test_no_result_passes_only_without_requests() -> None:
    delegate.verify_result(None, ifname="net1", ips=(), mac="")
    with pytest.raises(errors.InvalidNetworkConfigError, match="returned no result"):
        delegate.verify_result(None, ifname="net1", ips=("10.0.0.1",), mac="")


def test_an_unparsable_requested_ip_is_an_invalid_selection() -> None:
    with pytest.raises(errors.InvalidSelectionError, match=r"'10\.0\.0\.300'"):
        delegate.verify_result(_result(), ifname="net1", ips=("10.0.0.300",), mac="")
