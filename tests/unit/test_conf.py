"""Network configurations and lists: verbatim raw dicts, version choice, validation, directories."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from netattach.cni import conf, errors


def bridge(**extra: Any) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "dbnet", "type": "bridge", **extra}


def bridge_list(**extra: Any) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "dbnet",
        "plugins": [{"type": "bridge"}, {"type": "tuning"}],
        **extra,
    }


def invalid_config(raw: Any, *, as_list: bool = False) -> errors.InvalidNetworkConfigError:
    parse = conf.parse_config_list if as_list else conf.parse_config
    with pytest.raises(errors.InvalidNetworkConfigError) as info:
        parse(raw, source="test.conf")
    assert info.value.code == 7
    return info.value


# --- the raw dict is kept verbatim ---------------------------------------------------------------

VENDOR = {"keep": [1, 2, {"deep": None}], "float": 1.5, "flag": False, "": "empty key"}


def test_config_keeps_unknown_fields_and_nesting() -> None:
    raw = bridge(
        bridge="cni0", ipam={"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/16"}]]}
    )
    raw["x-vendor"] = VENDOR
    before = copy.deepcopy(raw)
    got = conf.parse_config(raw)
    assert got.raw == before
    assert raw == before  # the input is not modified either


def test_config_from_bytes_keeps_every_field() -> None:
    raw = bridge(**{"x-vendor": VENDOR, "unicode": "ñ€"})
    got = conf.parse_config(json.dumps(raw).encode())
    assert got.raw == raw


@pytest.mark.req("RT-LIST")
def test_config_list_keeps_plugin_dicts_verbatim_including_their_own_name_and_version() -> None:
    plugin = {"type": "bridge", "name": "ignored", "cniVersion": "0.1.0", "x-vendor": VENDOR}
    raw = bridge_list(plugins=[plugin, {"type": "tuning", "sysctl": {"a.b": "1"}}], extra=[1])
    before = copy.deepcopy(raw)
    got = conf.parse_config_list(raw)
    assert got.raw == before
    assert [p.raw for p in got.plugins] == before["plugins"]
    # The list's name and version are the ones every plugin runs with; its own stay in `raw`.
    assert [(p.name, p.cni_version) for p in got.plugins] == [("dbnet", "1.0.0")] * 2
    assert got.plugins[0].raw["name"] == "ignored"
    assert got.plugins[0].raw["cniVersion"] == "0.1.0"


# --- parse_config / parse_config_list / parse_any ------------------------------------------------


def test_parse_config_fields() -> None:
    got = conf.parse_config(
        bridge(capabilities={"portMappings": True}), source="/etc/cni/net.d/10.conf"
    )
    assert (got.name, got.type, got.cni_version, got.source) == (
        "dbnet",
        "bridge",
        "1.0.0",
        "/etc/cni/net.d/10.conf",
    )
    assert got.capabilities == frozenset({"portMappings"})


def test_parse_config_accepts_str_bytes_and_mappings_alike() -> None:
    raw = bridge()
    text = json.dumps(raw)
    assert conf.parse_config(text) == conf.parse_config(text.encode()) == conf.parse_config(raw)


def test_parse_config_refuses_a_list() -> None:
    err = invalid_config(bridge_list())
    assert "this is a configuration list (it has 'plugins'), not a single config" in err.details


def test_nad_config_without_name_is_accepted_when_name_not_required() -> None:
    raw = {"cniVersion": "1.0.0", "type": "macvlan"}
    assert conf.parse_config(raw, require_name=False).name == ""
    assert (
        conf.parse_config_list(
            {"cniVersion": "1.0.0", "plugins": [{"type": "macvlan"}]}, require_name=False
        ).name
        == ""
    )
    err = invalid_config(raw)
    assert "network name '' must start with a letter or digit" in err.details


def test_a_present_name_is_validated_even_when_not_required() -> None:
    with pytest.raises(errors.InvalidNetworkConfigError) as info:
        conf.parse_config(bridge(name="bad name"), require_name=False)
    assert "network name 'bad name'" in info.value.details


@pytest.mark.req("RT-LIST")
def test_config_list_plugins_keep_order_and_take_the_list_name_and_version() -> None:
    raw = bridge_list(
        cniVersion="0.4.0",
        plugins=[{"type": "bridge"}, {"type": "tuning"}, {"type": "portmap"}],
    )
    got = conf.parse_config_list(raw, source="l.conflist")
    assert (got.name, got.cni_version, got.source) == ("dbnet", "0.4.0", "l.conflist")
    assert [p.type for p in got.plugins] == ["bridge", "tuning", "portmap"]
    assert {(p.name, p.cni_version, p.source) for p in got.plugins} == {
        ("dbnet", "0.4.0", "l.conflist")
    }
    assert (got.disable_check, got.disable_gc) == (False, False)


@pytest.mark.parametrize(
    ("plugins", "problem"),
    [
        (None, "plugins must be a non-empty list, not None"),
        ([], "plugins must be a non-empty list, not []"),
        ({"type": "bridge"}, "plugins must be a non-empty list, not {'type': 'bridge'}"),
        ([{"type": "bridge"}, "tuning"], "plugins[1] must be an object, not 'tuning'"),
    ],
)
def test_config_list_needs_a_list_of_plugin_objects(plugins: Any, problem: str) -> None:
    raw = bridge_list(plugins=plugins)
    if plugins is None:
        del raw["plugins"]
    err = invalid_config(raw, as_list=True)
    assert problem in err.details


@pytest.mark.req("RT-LIST")
def test_parse_any_wraps_a_single_config_as_a_list_of_one() -> None:
    raw = bridge(cniVersion="0.3.1", mtu=1400)
    got = conf.parse_any(json.dumps(raw), source="nad:ns/dbnet")
    assert got.raw == {"cniVersion": "0.3.1", "name": "dbnet", "plugins": [raw]}
    assert (got.name, got.cni_version, got.source) == ("dbnet", "0.3.1", "nad:ns/dbnet")
    assert len(got.plugins) == 1
    assert got.plugins[0].raw == raw
    assert (got.disable_check, got.disable_gc) == (False, False)


@pytest.mark.req("RT-LIST")
def test_parse_any_tells_a_list_apart_by_its_plugins() -> None:
    raw = bridge_list(disableCheck=True)
    got = conf.parse_any(raw)
    assert got == conf.parse_config_list(raw)
    assert got.raw == raw
    assert got.disable_check is True


def test_parse_any_reports_errors_with_its_source() -> None:
    with pytest.raises(errors.DecodingFailureError) as info:
        conf.parse_any("{", source="nad:ns/broken")
    assert info.value.msg == "nad:ns/broken: invalid JSON"
    with pytest.raises(errors.InvalidNetworkConfigError) as info7:
        conf.parse_any({"plugins": []}, source="nad:ns/empty")
    assert info7.value.msg == "nad:ns/empty: invalid network configuration"


# --- version choice ------------------------------------------------------------------------------


@pytest.mark.parametrize("as_list", [False, True])
def test_cni_versions_picks_the_highest_known_version(as_list: bool) -> None:
    extra = {"cniVersions": ["0.4.0", "1.1.0", "9.9.9"], "cniVersion": "0.4.0"}
    raw = bridge_list(**extra) if as_list else bridge(**extra)
    got = conf.parse_any(raw)
    assert got.cni_version == "1.1.0"
    assert {p.cni_version for p in got.plugins} == {"1.1.0"}


def test_cni_versions_ignores_order_and_malformed_entries() -> None:
    raw = bridge_list(cniVersions=["1.0.0", "garbage", "0.3.1"])
    del raw["cniVersion"]
    assert conf.parse_config_list(raw).cni_version == "1.0.0"


def test_cni_versions_falls_back_to_cni_version_when_none_is_known() -> None:
    raw = bridge_list(cniVersions=["9.9.9", "2.0.0"], cniVersion="0.3.1")
    assert conf.parse_config_list(raw).cni_version == "0.3.1"
    assert conf.parse_config_list(bridge_list(cniVersions=[])).cni_version == "1.0.0"


def test_cni_versions_without_known_version_or_cni_version_is_an_error() -> None:
    raw = bridge_list(cniVersions=["9.9.9"])
    del raw["cniVersion"]
    err = invalid_config(raw, as_list=True)
    assert "none of cniVersions ['9.9.9'] is supported" in err.details


def test_cni_versions_must_be_a_list_of_strings() -> None:
    err = invalid_config(bridge_list(cniVersions="1.1.0"), as_list=True)
    assert "cniVersions must be a list of strings, not '1.1.0'" in err.details
    err = invalid_config(bridge_list(cniVersions=["1.1.0", 1]), as_list=True)
    assert "cniVersions must be a list of strings, not ['1.1.0', 1]" in err.details


def test_missing_cni_version_means_0_1_0() -> None:
    raw = bridge()
    del raw["cniVersion"]
    assert conf.parse_config(raw).cni_version == "0.1.0"
    raw_list = bridge_list()
    del raw_list["cniVersion"]
    assert conf.parse_config_list(raw_list).cni_version == "0.1.0"


@pytest.mark.parametrize("known", ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
def test_every_published_cni_version_is_accepted(known: str) -> None:
    assert conf.parse_config(bridge(cniVersion=known)).cni_version == known


@pytest.mark.parametrize("unknown", ["0.5.0", "1.2.0", "1.0", "v1.0.0", "", 1.0, None])
def test_unknown_cni_version_is_an_error_quoting_it(unknown: object) -> None:
    err = invalid_config(bridge(cniVersion=unknown))
    assert f"cniVersion {unknown!r} is not a CNI version netattach supports" in err.details


# --- capabilities and flags ----------------------------------------------------------------------


def test_capabilities_keep_only_true_ones() -> None:
    caps = {"portMappings": True, "bandwidth": False, "ips": True, "mac": False}
    assert conf.parse_config(bridge(capabilities=caps)).capabilities == {"portMappings", "ips"}
    assert conf.parse_config(bridge()).capabilities == frozenset()


def test_list_plugin_capabilities_are_per_plugin() -> None:
    raw = bridge_list(
        plugins=[{"type": "bridge"}, {"type": "portmap", "capabilities": {"portMappings": True}}]
    )
    got = conf.parse_config_list(raw)
    assert [p.capabilities for p in got.plugins] == [frozenset(), frozenset({"portMappings"})]


@pytest.mark.parametrize("caps", [["portMappings"], {"portMappings": "true"}, {"x": 1}])
def test_capabilities_must_map_names_to_booleans(caps: object) -> None:
    err = invalid_config(bridge(capabilities=caps))
    assert f"capabilities must map names to booleans, not {caps!r}" in err.details
    err = invalid_config(bridge_list(plugins=[{"type": "a", "capabilities": caps}]), as_list=True)
    assert f"plugins[0].capabilities must map names to booleans, not {caps!r}" in err.details


@pytest.mark.parametrize("key", ["disableCheck", "disableGC"])
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, True),
        (False, False),
        ("true", True),
        ("false", False),
        ("TRUE", True),
        ("False", False),
    ],
)
def test_disable_flags_accept_bools_and_true_false_strings(
    key: str, value: object, expected: bool
) -> None:
    got = conf.parse_config_list(bridge_list(**{key: value}))
    flags = {"disableCheck": got.disable_check, "disableGC": got.disable_gc}
    assert flags[key] is expected
    other = "disableGC" if key == "disableCheck" else "disableCheck"
    assert flags[other] is False


@pytest.mark.parametrize("key", ["disableCheck", "disableGC"])
@pytest.mark.parametrize("value", ["yes", "1", "", 1, 0, None, ["true"]])
def test_disable_flags_refuse_other_values_quoting_them(key: str, value: object) -> None:
    err = invalid_config(bridge_list(**{key: value}), as_list=True)
    assert f"{key} must be a boolean, not {value!r}" in err.details


# --- every problem in one error ------------------------------------------------------------------


def test_all_problems_of_a_list_are_reported_in_one_error() -> None:
    raw = {
        "cniVersion": "0.9.0",
        "name": "bad name",
        "plugins": [{"type": "../evil"}, {"type": "ok", "capabilities": {"a": "x"}}],
        "disableGC": "maybe",
    }
    err = invalid_config(raw, as_list=True)
    assert err.msg == "test.conf: invalid network configuration"
    problems = err.details.split("; ")
    assert len(problems) == 5
    for expected in (
        "network name 'bad name'",
        "cniVersion '0.9.0' is not a CNI version",
        "plugins[0].type: plugin type '../evil' must be a plain file name",
        "plugins[1].capabilities must map names to booleans",
        "disableGC must be a boolean, not 'maybe'",
    ):
        assert sum(expected in p for p in problems) == 1, expected
    assert "bad name" in str(err)
    assert "../evil" in str(err)


def test_all_problems_of_a_single_config_are_reported_in_one_error() -> None:
    err = invalid_config({"cniVersion": "2.0.0", "name": "-x"})
    assert "network name '-x'" in err.details
    assert "cniVersion '2.0.0'" in err.details
    assert "plugin type must be a non-empty string, not None" in err.details
    assert len(err.details.split("; ")) == 3


# --- JSON and shape errors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "data", ["{", "", '{"name": "x",}', b"\xff\xfe\x00garbage", "{'name': 'x'}", "[1, 2"]
)
@pytest.mark.parametrize("parse", [conf.parse_config, conf.parse_config_list, conf.parse_any])
def test_json_syntax_errors_are_code_6_naming_the_source(
    parse: Callable[..., object], data: str | bytes
) -> None:
    with pytest.raises(errors.DecodingFailureError) as info:
        parse(data, source="/etc/cni/net.d/10-x.conf")
    assert info.value.code == 6
    assert info.value.msg == "/etc/cni/net.d/10-x.conf: invalid JSON"
    assert info.value.details  # the decoder's own explanation


@pytest.mark.parametrize(
    ("data", "kind"), [("[]", "list"), ('"x"', "str"), ("3", "int"), ("null", "NoneType")]
)
@pytest.mark.parametrize("parse", [conf.parse_config, conf.parse_config_list, conf.parse_any])
def test_a_non_object_is_code_7(parse: Callable[..., object], data: str, kind: str) -> None:
    with pytest.raises(errors.InvalidNetworkConfigError) as info:
        parse(data, source="src")
    assert info.value.code == 7
    assert info.value.msg == f"src: a network configuration must be a JSON object, not {kind}"


# --- plugin type ---------------------------------------------------------------------------------


@pytest.mark.req("CNI-FIND")
@pytest.mark.parametrize(
    "plugin_type",
    ["/usr/bin/bridge", "sub/bridge", "a\\b", "..", "../bridge", "bridge..", "a\0b"],
    ids=["absolute", "slash", "backslash", "dotdot", "dotdot-slash", "dotdot-suffix", "nul"],
)
def test_plugin_type_that_is_not_a_plain_file_name_is_code_7_quoting_it(plugin_type: str) -> None:
    expected = f"plugin type {plugin_type!r} must be a plain file name"
    assert (conf.plugin_type_problem(plugin_type) or "").startswith(expected)
    err = invalid_config(bridge(type=plugin_type))
    assert expected in err.details
    err = invalid_config(bridge_list(plugins=[{"type": "ok"}, {"type": plugin_type}]), as_list=True)
    assert f"plugins[1].type: {expected}" in err.details


@pytest.mark.req("CNI-FIND")
@pytest.mark.parametrize("plugin_type", ["", None, 7, ["bridge"]])
def test_plugin_type_must_be_a_non_empty_string(plugin_type: object) -> None:
    expected = f"plugin type must be a non-empty string, not {plugin_type!r}"
    assert conf.plugin_type_problem(plugin_type) == expected
    raw = bridge(type=plugin_type)
    if plugin_type is None:
        del raw["type"]
    assert expected in invalid_config(raw).details


@pytest.mark.parametrize("plugin_type", ["bridge", "host-local", "my_plugin.v2", "a.b"])
def test_plain_plugin_types_are_accepted(plugin_type: str) -> None:
    assert conf.plugin_type_problem(plugin_type) is None
    assert conf.parse_config(bridge(type=plugin_type)).type == plugin_type


# --- network names -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["dbnet", "a", "0net", "my_net.v1-2", "A-b_C.d"])
def test_valid_network_names(name: str) -> None:
    assert conf.network_name_problem(name) is None
    assert conf.parse_config(bridge(name=name)).name == name
    assert conf.parse_config_list(bridge_list(name=name)).name == name


@pytest.mark.parametrize(
    "name", ["", "-net", "_net", ".net", "my net", "a/b", "../x", "a:b", "né", "x\n", 5, None]
)
def test_invalid_network_names_are_refused_quoting_them(name: object) -> None:
    expected = f"network name {name!r} must start with a letter or digit"
    assert (conf.network_name_problem(name) or "").startswith(expected)
    assert expected in invalid_config(bridge(name=name)).details
    assert expected in invalid_config(bridge_list(name=name), as_list=True).details


# --- config directories --------------------------------------------------------------------------


def write(directory: Path, name: str, content: dict[str, Any] | str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def test_list_config_files_returns_conf_json_and_conflist_in_lexical_order(tmp_path: Path) -> None:
    for name in ["2-b.conf", "10-a.conflist", "05-c.json", "99-z.conf"]:
        write(tmp_path, name, "{}")
    for name in ["00-old.conf.bak", "01-notes.txt", "03-x.conflist~", "04-noext"]:
        write(tmp_path, name, "{}")
    (tmp_path / "00-dir.conf").mkdir()
    (tmp_path / "00-dir.conflist").mkdir()
    got = conf.list_config_files(tmp_path)
    assert [p.name for p in got] == ["05-c.json", "10-a.conflist", "2-b.conf", "99-z.conf"]
    assert all(p.parent == tmp_path for p in got)


def test_list_config_files_of_a_missing_directory_is_empty(tmp_path: Path) -> None:
    assert conf.list_config_files(tmp_path / "missing") == []


def test_list_config_files_of_a_file_is_an_io_failure(tmp_path: Path) -> None:
    not_a_dir = write(tmp_path, "file", "x")
    with pytest.raises(errors.IOFailureError) as info:
        conf.list_config_files(not_a_dir)
    assert info.value.code == 5
    assert repr(str(not_a_dir)) in info.value.msg


def test_load_dir_returns_good_networks_and_one_error_per_bad_file(tmp_path: Path) -> None:
    write(tmp_path, "10-a.conflist", bridge_list(name="a"))
    bad_json = write(tmp_path, "20-bad.conf", "{not json")
    write(tmp_path, "30-b.conf", bridge(name="b"))
    bad_type = write(tmp_path, "40-bad.conflist", bridge_list(plugins=[{"type": "../x"}]))
    write(tmp_path, "50-c.json", bridge(name="c"))
    no_plugins = write(tmp_path, "60-bad.conflist", bridge(name="single-in-a-list-file"))
    write(tmp_path, "70-ignored.bak", "{not json")

    got = conf.load_dir(tmp_path)

    assert [(n.name, Path(n.source).name, len(n.plugins)) for n in got.networks] == [
        ("a", "10-a.conflist", 2),
        ("b", "30-b.conf", 1),
        ("c", "50-c.json", 1),
    ]
    assert [type(e) for e in got.problems] == [
        errors.DecodingFailureError,
        errors.InvalidNetworkConfigError,
        errors.InvalidNetworkConfigError,
    ]
    for problem, path in zip(got.problems, [bad_json, bad_type, no_plugins], strict=True):
        assert problem.msg.startswith(f"{path}: ")
    assert "'../x'" in got.problems[1].details
    assert "plugins must be a non-empty list" in got.problems[2].details


def test_load_dir_of_a_missing_directory_is_empty(tmp_path: Path) -> None:
    got = conf.load_dir(tmp_path / "missing")
    assert (got.networks, got.problems) == ((), ())


def test_load_file_reports_an_unreadable_file_as_io_failure(tmp_path: Path) -> None:
    missing = tmp_path / "gone.conf"
    with pytest.raises(errors.IOFailureError) as info:
        conf.load_file(missing)
    assert info.value.msg == f"cannot read {str(missing)!r}"


@pytest.mark.parametrize(
    ("files", "found", "plugins"),
    [
        pytest.param(
            {"00-net.conf": bridge(name="net"), "99-net.conflist": bridge_list(name="net")},
            "99-net.conflist",
            2,
            id="prefers-a-conflist-over-a-conf-that-sorts-first",
        ),
        pytest.param(
            {"00-else.conflist": bridge_list(name="else"), "50-net.conf": bridge(name="net")},
            "50-net.conf",
            1,
            id="falls-back-to-a-conf-when-no-list-has-the-name",
        ),
    ],
)
def test_find_network_picks_the_file_of_its_name(
    tmp_path: Path, files: dict[str, dict[str, Any]], found: str, plugins: int
) -> None:
    for name, content in files.items():
        write(tmp_path, name, content)
    got = conf.find_network(tmp_path, "net")
    assert got is not None
    assert Path(got.source).name == found
    assert len(got.plugins) == plugins


def test_find_network_takes_the_lexically_first_within_a_kind(tmp_path: Path) -> None:
    write(tmp_path, "20-net.conflist", bridge_list(name="net", cniVersion="0.4.0"))
    write(tmp_path, "10-net.conflist", bridge_list(name="net", cniVersion="1.0.0"))
    write(tmp_path, "20-other.conf", bridge(name="other", type="second"))
    write(tmp_path, "10-other.json", bridge(name="other", type="first"))
    net = conf.find_network(tmp_path, "net")
    assert net is not None
    assert (Path(net.source).name, net.cni_version) == ("10-net.conflist", "1.0.0")
    other = conf.find_network(tmp_path, "other")
    assert other is not None
    assert (Path(other.source).name, other.plugins[0].type) == ("10-other.json", "first")


def test_find_network_passes_over_bad_files(tmp_path: Path) -> None:
    write(tmp_path, "00-broken.conflist", "{")
    write(tmp_path, "01-invalid.conflist", {"name": "net", "plugins": []})
    write(tmp_path, "02-net.conflist", bridge_list(name="net"))
    got = conf.find_network(tmp_path, "net")
    assert got is not None
    assert Path(got.source).name == "02-net.conflist"


def test_find_network_without_a_match_is_none(tmp_path: Path) -> None:
    write(tmp_path, "10-a.conflist", bridge_list(name="a"))
    assert conf.find_network(tmp_path, "b") is None
    assert conf.find_network(tmp_path / "missing", "a") is None


def test_deeply_nested_json_is_a_decoding_failure_not_a_crash() -> None:
    with pytest.raises(errors.DecodingFailureError) as info:
        conf.parse_config("[" * 100_000, source="deep.conf")
    assert info.value.msg == "deep.conf: invalid JSON"


def test_a_deeply_nested_file_does_not_stop_finding_a_good_one(tmp_path: Path) -> None:
    deep = write(tmp_path, "00-deep.conflist", "[" * 100_000)
    write(tmp_path, "10-net.conflist", bridge_list(name="net"))
    got = conf.find_network(tmp_path, "net")
    assert got is not None
    assert Path(got.source).name == "10-net.conflist"
    loaded = conf.load_dir(tmp_path)
    assert [n.name for n in loaded.networks] == ["net"]
    assert [p.msg for p in loaded.problems] == [f"{deep}: invalid JSON"]
