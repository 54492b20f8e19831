"""Config lists as the CNI spec runs them, observed through the exec seam (RT-LIST, CNI-*)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from netattach.cni import conf, errors, result, spec
from netattach.runtime import cache, chain, execute
from tests.unit.fake_plugins import Call, FakePlugins, fail, interface_result, ok
from tests.unit.script_plugins import unparsed_list

NETNS = "/run/netns/na-fake"


@pytest.fixture
def plugins(tmp_path: Path) -> FakePlugins:
    return FakePlugins(tmp_path / "bin", ["bridge", "tuning", "portmap", "sbr"])


@pytest.fixture
def runtime(plugins: FakePlugins, tmp_path: Path) -> chain.Runtime:
    return chain.Runtime(
        path=[str(plugins.directory)], cache_dir=tmp_path / "cache", executor=plugins
    )


def network(version: str = "1.0.0", **extra: Any) -> conf.NetworkConfigList:
    raw: dict[str, Any] = {
        "cniVersion": version,
        "name": "dbnet",
        "plugins": [
            {
                "type": "bridge",
                "name": "ignored",
                "cniVersion": "0.1.0",
                "bridge": "cni0",
                "x-vendor": {"keep": [1, 2, 3]},
            },
            {"type": "tuning", "sysctl": {"net.core.somaxconn": "500"}},
        ],
        **extra,
    }
    return conf.parse_config_list(raw, source="test")


def rt(container_id: str = "ctr1", ifname: str = "eth0", **kw: Any) -> chain.RuntimeConf:
    return chain.RuntimeConf(container_id=container_id, ifname=ifname, netns=NETNS, **kw)


@pytest.mark.req("RT-LIST")
def test_add_injects_list_name_and_version_and_chains_prev_result(
    runtime: chain.Runtime, plugins: FakePlugins
) -> None:
    net = network("1.0.0")
    got = asyncio.run(runtime.add_network_list(net, rt()))

    first, second = plugins.calls
    assert first.config == {
        "type": "bridge",
        "name": "dbnet",
        "cniVersion": "1.0.0",
        "bridge": "cni0",
        "x-vendor": {"keep": [1, 2, 3]},
    }
    assert "prevResult" not in first.config
    assert second.config["name"] == "dbnet"
    assert second.config["cniVersion"] == "1.0.0"
    assert second.config["sysctl"] == {"net.core.somaxconn": "500"}
    assert second.config["prevResult"] == interface_result(first)
    assert isinstance(got, result.Result100)
    assert got.to_raw() == interface_result(first)
    # the operator's dict is never modified by injection
    assert net.plugins[0].raw["name"] == "ignored"


@pytest.mark.req("RT-LIST")
def test_runtime_config_carries_only_the_capabilities_a_plugin_declares(
    runtime: chain.Runtime, plugins: FakePlugins
) -> None:
    net = conf.parse_config_list(
        {
            "cniVersion": "1.0.0",
            "name": "pm",
            "plugins": [
                {"type": "bridge"},
                {"type": "portmap", "capabilities": {"portMappings": True, "bandwidth": False}},
            ],
        }
    )
    mappings = [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]
    caps = {
        "portMappings": mappings,
        "bandwidth": {"ingressRate": 1000},
        "mac": "aa:bb:cc:dd:ee:ff",
    }
    asyncio.run(runtime.add_network_list(net, rt(capability_args=caps)))

    bridge_call, portmap_call = plugins.calls
    assert "runtimeConfig" not in bridge_call.config
    assert portmap_call.config["runtimeConfig"] == {"portMappings": mappings}


@pytest.mark.req("CNI-ENV")
def test_delegates_get_the_cni_environment_and_not_inherited_cni_variables(
    runtime: chain.Runtime, plugins: FakePlugins, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CNI_IFNAME", "stale0")
    monkeypatch.setenv("CNI_ARGS", "STALE=1")
    args = (("K8S_POD_NAMESPACE", "ns1"), ("K8S_POD_NAME", "web"), ("IgnoreUnknown", "1"))
    asyncio.run(runtime.add_network_list(network(), rt(args=args)))

    env = plugins.calls[0].env
    assert env[spec.ENV_COMMAND] == "ADD"
    assert env[spec.ENV_CONTAINERID] == "ctr1"
    assert env[spec.ENV_NETNS] == NETNS
    assert env[spec.ENV_IFNAME] == "eth0"
    assert env[spec.ENV_ARGS] == "K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=web;IgnoreUnknown=1"
    assert env[spec.ENV_PATH] == str(plugins.directory)
    assert "PATH" in env  # the rest of the environment is inherited, as libcni does


@pytest.mark.req("RT-LIST")
@pytest.mark.req("CNI-CACHE")
@pytest.mark.parametrize("version", ["0.3.1", "0.4.0", "1.0.0", "1.1.0"])
def test_del_runs_in_reverse_with_the_cached_result_from_0_4_0(
    runtime: chain.Runtime, plugins: FakePlugins, version: str
) -> None:
    net = network(version)
    added = asyncio.run(runtime.add_network_list(net, rt()))
    key = cache.AttachmentKey(network_name="dbnet", container_id="ctr1", ifname="eth0")
    assert runtime.cache.load(key) is not None
    plugins.calls.clear()

    asyncio.run(runtime.del_network_list(net, rt()))

    assert plugins.commands() == [("tuning", "DEL"), ("bridge", "DEL")]
    for call in plugins.calls:
        if version in ("0.3.1",):
            assert "prevResult" not in call.config
        else:
            assert call.config["prevResult"] == added.to_raw()
    assert runtime.cache.load(key) is None


@pytest.mark.req("RT-LIST")
def test_del_is_idempotent(runtime: chain.Runtime, plugins: FakePlugins) -> None:
    net = network()
    asyncio.run(runtime.add_network_list(net, rt()))
    asyncio.run(runtime.del_network_list(net, rt()))
    asyncio.run(runtime.del_network_list(net, rt()))
    assert plugins.commands()[-2:] == [("tuning", "DEL"), ("bridge", "DEL")]


@pytest.mark.req("CNI-CHECK")
def test_check_runs_every_plugin_in_order_with_the_cached_result(
    runtime: chain.Runtime, plugins: FakePlugins
) -> None:
    net = network("0.4.0")
    added = asyncio.run(runtime.add_network_list(net, rt()))
    plugins.calls.clear()
    asyncio.run(runtime.check_network_list(net, rt()))
    assert plugins.commands() == [("bridge", "CHECK"), ("tuning", "CHECK")]
    assert all(c.config["prevResult"] == added.to_raw() for c in plugins.calls)


@pytest.mark.req("CNI-CHECK")
def test_check_needs_0_4_0_a_cached_result_and_respects_disable_check(
    runtime: chain.Runtime, plugins: FakePlugins
) -> None:
    with pytest.raises(errors.IncompatibleVersionError, match="does not support CHECK"):
        asyncio.run(runtime.check_network_list(network("0.3.1"), rt()))
    with pytest.raises(errors.UnknownContainerError, match="no cached result"):
        asyncio.run(runtime.check_network_list(network("1.0.0"), rt()))
    asyncio.run(runtime.check_network_list(network("1.0.0", disableCheck=True), rt()))
    assert plugins.calls == []


@pytest.mark.req("RT-LIST")
def test_add_failure_stops_the_chain_and_a_rollback_deletes_every_plugin(
    tmp_path: Path,
) -> None:
    plugins = FakePlugins(tmp_path / "bin", ["bridge", "tuning", "sbr"])
    runtime = chain.Runtime(
        path=[str(plugins.directory)], cache_dir=tmp_path / "c", executor=plugins
    )
    plugins.behaviour["tuning"] = lambda c: (
        fail(7, "invalid sysctl", "net.bogus") if c.command == "ADD" else ok()
    )
    net = conf.parse_config_list(
        {
            "cniVersion": "1.0.0",
            "name": "n",
            "plugins": [{"type": "bridge"}, {"type": "tuning"}, {"type": "sbr"}],
        }
    )

    with pytest.raises(errors.PluginError) as caught:
        asyncio.run(runtime.add_network_list(net, rt()))
    assert caught.value.code == 7
    assert caught.value.msg == "plugin tuning failed (add): invalid sysctl"
    assert caught.value.details == "net.bogus"
    assert plugins.commands() == [("bridge", "ADD"), ("tuning", "ADD")]
    # the record written before the ADD is still there for the rollback (and for GC)
    key = cache.AttachmentKey(network_name="n", container_id="ctr1", ifname="eth0")
    record = runtime.cache.load(key)
    assert record is not None
    assert record.result is None

    plugins.calls.clear()
    asyncio.run(runtime.del_network_list(net, rt()))
    assert plugins.commands() == [("sbr", "DEL"), ("tuning", "DEL"), ("bridge", "DEL")]
    assert runtime.cache.load(key) is None


@pytest.mark.req("CNI-CACHE")
def test_a_corrupt_record_does_not_stop_del(runtime: chain.Runtime, plugins: FakePlugins) -> None:
    net = network("1.0.0")
    asyncio.run(runtime.add_network_list(net, rt()))
    key = cache.AttachmentKey(network_name="dbnet", container_id="ctr1", ifname="eth0")
    runtime.cache.path_for(key).write_bytes(b'{"kind": "netattachCacheV1", "conf')
    with pytest.raises(cache.CorruptRecordError, match="corrupt attachment record"):
        runtime.cache.load(key)
    plugins.calls.clear()

    asyncio.run(runtime.del_network_list(net, rt()))

    assert plugins.commands() == [("tuning", "DEL"), ("bridge", "DEL")]
    assert all("prevResult" not in c.config for c in plugins.calls)
    assert not runtime.cache.path_for(key).exists()


@pytest.mark.req("CNI-CONVERT")
def test_a_result_in_another_version_is_converted_to_the_config_version(
    runtime: chain.Runtime, plugins: FakePlugins
) -> None:
    legacy = {"cniVersion": "0.2.0", "ip4": {"ip": "10.1.0.7/16", "gateway": "10.1.0.1"}}
    plugins.behaviour["bridge"] = lambda c: ok(legacy) if c.command == "ADD" else ok()
    net = conf.parse_config_list(
        {"cniVersion": "0.4.0", "name": "n", "plugins": [{"type": "bridge"}]}
    )
    got = asyncio.run(runtime.add_network_list(net, rt()))
    assert got.to_raw() == {
        "cniVersion": "0.4.0",
        "ips": [{"version": "4", "address": "10.1.0.7/16", "gateway": "10.1.0.1"}],
    }


@pytest.mark.req("CNI-VERSION")
def test_versions_are_asked_only_when_needed_and_once_per_executable(
    runtime: chain.Runtime, plugins: FakePlugins
) -> None:
    plugins.behaviour["tuning"] = lambda c: (
        ok({"cniVersion": "0.4.0", "supportedVersions": ["0.3.0", "0.3.1", "0.4.0"]})
        if c.command == "VERSION"
        else ok(c.config.get("prevResult"))
    )
    net = network("1.0.0")
    asyncio.run(runtime.add_network_list(net, rt()))
    assert ("tuning", "VERSION") not in plugins.commands()

    for _ in range(2):
        with pytest.raises(errors.IncompatibleVersionError) as caught:
            asyncio.run(runtime.validate_network_list(net))
        assert caught.value.code == 1
        assert "plugin tuning does not support config version 1.0.0" in caught.value.msg
        assert caught.value.details == "it supports 0.3.0, 0.3.1, 0.4.0"
    assert plugins.commands().count(("tuning", "VERSION")) == 1
    asyncio.run(runtime.validate_network_list(network("0.4.0")))


@pytest.mark.req("CNI-VERSION")
def test_a_plugin_refusing_the_version_is_explained_with_its_versions(
    runtime: chain.Runtime, plugins: FakePlugins
) -> None:
    def old_bridge(call: Call) -> Any:
        if call.command == "VERSION":
            return ok({"cniVersion": "0.2.0", "supportedVersions": ["0.1.0", "0.2.0"]})
        return fail(1, "incompatible CNI versions")

    plugins.behaviour["bridge"] = old_bridge
    with pytest.raises(errors.IncompatibleVersionError, match="plugin bridge does not support"):
        asyncio.run(runtime.add_network_list(network("1.0.0"), rt()))


@pytest.mark.req("CNI-11")
def test_gc_deletes_stale_attachments_and_passes_valid_attachments_to_plugins(
    runtime: chain.Runtime, plugins: FakePlugins
) -> None:
    net = network("1.1.0")
    for cid, ifname in [("a", "eth0"), ("b", "eth0"), ("c", "net1")]:
        asyncio.run(runtime.add_network_list(net, rt(container_id=cid, ifname=ifname)))
    plugins.calls.clear()

    asyncio.run(runtime.gc_network_list(net, [chain.GCAttachment(container_id="a", ifname="eth0")]))

    dels = [(c.env[spec.ENV_CONTAINERID], c.plugin) for c in plugins.calls if c.command == "DEL"]
    assert dels == [("b", "tuning"), ("b", "bridge"), ("c", "tuning"), ("c", "bridge")]
    gcs = [c for c in plugins.calls if c.command == "GC"]
    assert [c.plugin for c in gcs] == ["bridge", "tuning"]
    for call in gcs:
        assert call.config[spec.VALID_ATTACHMENTS_KEY] == [{"containerID": "a", "ifname": "eth0"}]
        assert call.env[spec.ENV_CONTAINERID] == ""
    remaining = [
        e.key.container_id for e in runtime.cache.entries() if isinstance(e, cache.CachedAttachment)
    ]
    assert remaining == ["a"]


@pytest.mark.req("CNI-11")
def test_gc_before_1_1_only_deletes_stale_records_and_disable_gc_does_nothing(
    runtime: chain.Runtime, plugins: FakePlugins
) -> None:
    net = network("1.0.0")
    asyncio.run(runtime.add_network_list(net, rt(container_id="b")))
    plugins.calls.clear()
    asyncio.run(runtime.gc_network_list(network("1.1.0", disableGC=True), []))
    assert plugins.calls == []
    asyncio.run(runtime.gc_network_list(net, []))
    assert plugins.commands() == [("tuning", "DEL"), ("bridge", "DEL")]


@pytest.mark.req("CNI-11")
def test_status_is_asked_of_1_1_plugins_and_their_code_passes_through(
    runtime: chain.Runtime, plugins: FakePlugins
) -> None:
    plugins.behaviour["tuning"] = lambda c: fail(50, "ipam pool exhausted")
    asyncio.run(runtime.get_status_network_list(network("1.0.0")))
    assert plugins.calls == []
    with pytest.raises(errors.PluginError) as caught:
        asyncio.run(runtime.get_status_network_list(network("1.1.0")))
    assert caught.value.code == 50
    assert plugins.commands() == [("bridge", "STATUS"), ("tuning", "STATUS")]
    assert plugins.calls[0].env[spec.ENV_COMMAND] == "STATUS"


@pytest.mark.req("CNI-FIND")
@pytest.mark.parametrize("bad", ["../../bin/sh", "/bin/sh", "a\\b", "bri..dge", "x\0y"])
def test_a_type_with_a_path_is_refused_and_nothing_runs(
    runtime: chain.Runtime, plugins: FakePlugins, bad: str
) -> None:
    net = unparsed_list({"type": bad})
    with pytest.raises(errors.InvalidNetworkConfigError) as caught:
        asyncio.run(runtime.add_network_list(net, rt()))
    assert caught.value.code == 7
    assert repr(bad) in caught.value.msg
    assert plugins.calls == []


@pytest.mark.req("CNI-FIND")
def test_a_missing_plugin_is_named_with_the_directories_searched(
    runtime: chain.Runtime, plugins: FakePlugins
) -> None:
    net = conf.parse_config_list(
        {"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "nosuch"}]}
    )
    with pytest.raises(errors.InvalidNetworkConfigError) as caught:
        asyncio.run(runtime.add_network_list(net, rt()))
    assert caught.value.code == 7
    assert "'nosuch'" in caught.value.msg
    assert str(plugins.directory) in caught.value.msg


@pytest.mark.req("CNI-ERR")
def test_a_delegate_error_code_passes_through_even_when_it_is_one_of_ours(
    runtime: chain.Runtime, plugins: FakePlugins
) -> None:
    plugins.behaviour["bridge"] = lambda c: fail(101, "vendor-specific trouble", "d")
    with pytest.raises(errors.PluginError) as caught:
        asyncio.run(runtime.add_network_list(network(), rt()))
    assert type(caught.value) is errors.PluginError
    assert caught.value.code == 101
    assert caught.value.to_raw("1.0.0") == {
        "cniVersion": "1.0.0",
        "code": 101,
        "msg": "plugin bridge failed (add): vendor-specific trouble",
        "details": "d",
    }


@pytest.mark.req("CNI-ERR")
def test_garbage_output_is_code_103_with_the_stderr_tail(
    runtime: chain.Runtime, plugins: FakePlugins
) -> None:
    noise = b"x" * 5000 + b"\npanic: runtime error: index out of range\n"
    plugins.behaviour["bridge"] = lambda c: execute.ExecOutcome(
        returncode=2, stdout=b"<html>not json", stderr=noise
    )
    with pytest.raises(errors.DelegateFailedError) as caught:
        asyncio.run(runtime.add_network_list(network(), rt()))
    assert caught.value.code == 103
    assert "plugin bridge failed (add): exit status 2" in caught.value.msg
    assert caught.value.details.endswith("panic: runtime error: index out of range")
    assert len(caught.value.details) <= 2048


@pytest.mark.req("CNI-ERR")
def test_an_unparseable_success_result_is_code_103_quoting_it(
    runtime: chain.Runtime, plugins: FakePlugins
) -> None:
    plugins.behaviour["bridge"] = lambda c: execute.ExecOutcome(
        returncode=0, stdout=b"hello", stderr=b"warn: something"
    )
    with pytest.raises(errors.DelegateFailedError, match="its result is not JSON") as caught:
        asyncio.run(runtime.add_network_list(network(), rt()))
    assert "b'hello'" in caught.value.msg
    assert caught.value.details == "warn: something"


@pytest.mark.req("CNI-CONVERT")
def test_a_malformed_success_result_names_the_plugin_and_field(
    runtime: chain.Runtime, plugins: FakePlugins
) -> None:
    plugins.behaviour["bridge"] = lambda c: ok(
        {"cniVersion": "1.0.0", "ips": [{"address": "not-an-ip"}]}
    )
    with pytest.raises(errors.DecodingFailureError) as caught:
        asyncio.run(runtime.add_network_list(network(), rt()))
    assert caught.value.code == 6
    assert caught.value.msg.startswith("plugin bridge failed (add): ")
    assert "not-an-ip" in str(caught.value)


def test_results_are_json_serialisable_in_the_record(
    runtime: chain.Runtime, plugins: FakePlugins
) -> None:
    asyncio.run(runtime.add_network_list(network(), rt()))
    key = cache.AttachmentKey(network_name="dbnet", container_id="ctr1", ifname="eth0")
    raw = json.loads(runtime.cache.path_for(key).read_text())
    assert raw["kind"] == "netattachCacheV1"
    assert raw["result"]["interfaces"][0]["name"] == "eth0"
    assert raw["config"]["plugins"][0]["x-vendor"] == {"keep": [1, 2, 3]}


@pytest.mark.req("RT-DEL")
def test_keep_going_runs_every_del_and_still_reports_the_failure(
    runtime: chain.Runtime, plugins: FakePlugins
) -> None:
    net = network("1.0.0")
    asyncio.run(runtime.add_network_list(net, rt()))
    plugins.behaviour["tuning"] = lambda c: fail(11, "busy") if c.command == "DEL" else ok()
    plugins.calls.clear()

    with pytest.raises(errors.PluginError) as caught:
        asyncio.run(runtime.del_network_list(net, rt(), keep_going=True))

    assert caught.value.code == 11
    assert plugins.commands() == [("tuning", "DEL"), ("bridge", "DEL")]
    key = cache.AttachmentKey(network_name="dbnet", container_id="ctr1", ifname="eth0")
    assert runtime.cache.load(key) is not None  # kept for the retry
    plugins.calls.clear()
    with pytest.raises(errors.PluginError):
        asyncio.run(runtime.del_network_list(net, rt()))
    assert plugins.commands() == [("tuning", "DEL")]  # the spec's default: stop the list
