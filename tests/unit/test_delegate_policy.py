"""The delegate policy (SEC-DELEGATE) as pure code: the glob matcher against a plain
re-implementation, what each rule refuses and allows, the settings that write it, and the
orchestrator refusing before any plugin runs (through the exec seam, no root needed)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netattach.cni import env, errors
from netattach.guard import delegate_policy, globs
from netattach.pods import delegate_guard
from netattach.settings import settings
from tests.builders import call, delegate_policy_of, nad, namespace, orchestrated, pod, view_of
from tests.unit.delegate_checks import refusals
from tests.unit.orchestrator_harness import refused_add

# --- the glob matcher --------------------------------------------------------------------------


def plain_glob(pattern: str, value: str) -> bool:
    """The glob rules re-implemented the obvious way: a regular expression."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.DOTALL) is not None


_ALPHABET = st.sampled_from("ab*?.-/!\n")
_TEXT = st.text(alphabet=st.sampled_from("ab.-/!\n"), max_size=12)


@pytest.mark.req("SEC-DELEGATE")
@given(pattern=st.text(alphabet=_ALPHABET, max_size=10), value=_TEXT)
def test_the_glob_matcher_agrees_with_a_plain_regex(pattern: str, value: str) -> None:
    assert globs.glob_matches(pattern, value) == plain_glob(pattern, value)


@pytest.mark.req("SEC-DELEGATE")
@given(pattern=st.text(alphabet=_ALPHABET, max_size=10), value=_TEXT)
def test_the_glob_regex_for_cel_agrees_with_the_matcher(pattern: str, value: str) -> None:
    regex = globs.glob_regex(pattern)
    assert (re.fullmatch(regex, value, re.DOTALL) is not None) == globs.glob_matches(pattern, value)


@pytest.mark.req("SEC-DELEGATE")
@given(
    entries=st.lists(
        st.tuples(st.booleans(), st.text(alphabet=st.sampled_from("ab*?"), max_size=4)),
        max_size=4,
    ),
    value=st.text(alphabet=st.sampled_from("ab"), max_size=5),
)
def test_a_list_allows_what_some_entry_takes_and_no_exclusion_does(
    entries: list[tuple[bool, str]], value: str
) -> None:
    written = tuple(("!" if excluded else "") + p for excluded, p in entries if p)
    included = [p for excluded, p in entries if p and not excluded]
    excluded = [p for is_excluded, p in entries if p and is_excluded]
    expected = any(plain_glob(p, value) for p in included) and not any(
        plain_glob(p, value) for p in excluded
    )
    assert globs.Patterns(written).allows(value) == expected


_SEGMENT = st.sampled_from(["a", "b", "..", ".", "ab"])


@pytest.mark.req("SEC-DELEGATE")
@given(
    directory=st.lists(_SEGMENT.filter(lambda s: s not in ("..", ".")), max_size=3),
    path=st.lists(_SEGMENT, max_size=4),
)
def test_a_prefix_takes_its_directory_and_what_is_below_it_never_dotdot(
    directory: list[str], path: list[str]
) -> None:
    top, value = "/" + "/".join(directory), "/" + "/".join(path)
    plain = (
        ".." not in path
        and path[: len(directory)] == directory
        and (len(path) >= len(directory) or value == top)
    )
    assert globs.Prefixes((top,)).allows(value) == plain


def test_a_relative_or_dotdot_path_is_in_no_list() -> None:
    everything = globs.Prefixes(("/",))
    assert everything.allows("/var/lib/cni/networks")
    assert not everything.allows("var/lib/cni")
    assert not everything.allows("/var/lib/cni/../../../etc")
    assert not globs.Prefixes(("/var/lib/cni",)).allows("/var/lib/cnifoo")


# --- what each rule refuses --------------------------------------------------------------------


def conflist(*plugins: dict[str, Any]) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "n", "plugins": list(plugins)}


@pytest.mark.req("SEC-DELEGATE")
def test_the_default_types_are_the_reference_plugins_that_make_pod_interfaces() -> None:
    assert refusals(conflist({"type": "host-device", "device": "eth0"})) == [
        'plugins[0].type "host-device" is not allowed by delegatePolicy.types '
        "[bridge, macvlan, ipvlan, ptp, vlan, host-local, static, dhcp, tuning, "
        "bandwidth, sbr, vrf, netattach]",
        'plugins[0].device "eth0" is not allowed by delegatePolicy.device []',
    ]
    allowed = conflist(
        {"type": "macvlan", "master": "eth1", "ipam": {"type": "host-local"}},
        {"type": "tuning", "sysctl": {"net.core.somaxconn": "500"}},
        {"type": "bandwidth", "capabilities": {"bandwidth": True}},
    )
    assert refusals(allowed) == []


@pytest.mark.req("SEC-DELEGATE")
def test_every_type_is_checked_a_chained_plugin_and_a_nested_ipam_too() -> None:
    config = conflist(
        {"type": "macvlan", "master": "eth1", "ipam": {"type": "whereabouts"}},
        {"type": "na-custom"},
    )
    assert [r.split(" is ")[0] for r in refusals(config)] == [
        'plugins[0].ipam.type "whereabouts"',
        'plugins[1].type "na-custom"',
    ]
    assert refusals(config, types=["macvlan", "whereabouts", "na-*"]) == []


@pytest.mark.req("SEC-DELEGATE")
@pytest.mark.parametrize(
    ("plugin", "key", "value"),
    [
        ({"type": "macvlan", "master": "eth0"}, "master", '"eth0"'),
        ({"type": "ipvlan", "master": "eth0"}, "master", '"eth0"'),
        ({"type": "vlan", "master": "eth0", "vlanId": 5}, "master", '"eth0"'),
        ({"type": "macvlan"}, "master", "unset (the node's default-route interface)"),
        ({"type": "macvlan", "master": ""}, "master", "unset (the node's default-route interface)"),
    ],
    ids=["macvlan", "ipvlan", "vlan", "macvlan-unset", "macvlan-empty"],
)
def test_a_master_outside_the_list_is_refused(plugin: dict[str, Any], key: str, value: str) -> None:
    (refusal,) = refusals(conflist(plugin), master=["ens5f*"])
    assert refusal.startswith(f"plugins[0].{key} {value} ")
    assert refusal.endswith("delegatePolicy.master [ens5f*]")
    assert refusals(conflist({**plugin, "master": "ens5f1"}), master=["ens5f*"]) == []


@pytest.mark.req("SEC-DELEGATE")
def test_a_bridge_outside_the_list_is_refused_and_an_unset_one_is_cni0() -> None:
    cluster = ["*", "!cni0"]
    assert refusals(conflist({"type": "bridge"})) == []  # the built-in default: any bridge
    assert refusals(conflist({"type": "bridge", "bridge": "na-br1"}), bridge=cluster) == []
    (named,) = refusals(conflist({"type": "bridge", "bridge": "cni0"}), bridge=cluster)
    assert named == 'plugins[0].bridge "cni0" is not allowed by delegatePolicy.bridge [*, !cni0]'
    (unset,) = refusals(conflist({"type": "bridge"}), bridge=cluster)
    assert unset.startswith("plugins[0].bridge unset (bridge CNI's default, 'cni0')")
    (empty,) = refusals(conflist({"type": "bridge", "bridge": ""}), bridge=cluster)
    assert empty == unset
    assert refusals(conflist({"type": "bridge", "bridge": "br-team"}), bridge=["br-team"]) == []
    assert len(refusals(conflist({"type": "bridge", "bridge": "br-other"}), bridge=["br-team"]))


@pytest.mark.req("SEC-DELEGATE")
def test_host_device_needs_its_type_and_its_device_listed() -> None:
    config = {"cniVersion": "1.0.0", "name": "n", "type": "host-device", "device": "eth1"}
    assert refusals(config, types=["host-device"], device=["eth1"]) == []
    assert refusals(config, types=["host-device"], device=["eth2"]) == [
        'device "eth1" is not allowed by delegatePolicy.device [eth2]'
    ]
    pci = {**config, "device": None}
    del pci["device"]
    pci["pciBusID"] = "0000:3b:00.1"
    assert refusals(pci, types=["host-device"], pciBusID=["0000:3b:00.*"]) == []
    assert len(refusals(pci, types=["host-device"], pciBusID=["0000:af:*"])) == 1
    by_mac = {"cniVersion": "1.0.0", "name": "n", "type": "host-device", "hwaddr": "aa:bb"}
    assert refusals(by_mac, types=["host-device"], device=["eth1"]) == [
        'hwaddr "aa:bb" names a host device that only delegatePolicy.device [eth1]'
    ]
    via_runtime = {**pci, "runtimeConfig": {"deviceID": "0000:af:00.1"}}
    assert refusals(via_runtime, types=["host-device"], pciBusID=["0000:3b:00.*"]) == [
        'runtimeConfig.deviceID "0000:af:00.1" is not allowed by delegatePolicy.pciBusID '
        "[0000:3b:00.*]"
    ]


@pytest.mark.req("SEC-DELEGATE")
def test_a_data_dir_outside_the_prefixes_is_refused_wherever_it_is_written() -> None:
    ipam = {"type": "host-local", "subnet": "10.1.0.0/24"}
    inside = conflist({"type": "bridge", "bridge": "b", "ipam": {**ipam, "dataDir": "/run/a/x"}})
    assert refusals(inside, dataDir=["/run/a"]) == []
    for bad in ("/etc/cni/net.d", "/run/a/../../etc", "run/a", "/run/ab"):
        config = conflist({"type": "bridge", "bridge": "b", "ipam": {**ipam, "dataDir": bad}})
        (refusal,) = refusals(config, dataDir=["/run/a"])
        assert refusal == (
            f"plugins[0].ipam.dataDir {json.dumps(bad)} is not allowed by delegatePolicy.dataDir "
            "[/run/a]"
        )
    tuning = conflist({"type": "tuning", "dataDir": "/etc/x"})
    assert len(refusals(tuning)) == 1  # the default keeps /etc out


@pytest.mark.req("SEC-DELEGATE")
def test_a_sysctl_outside_the_list_is_refused() -> None:
    config = conflist({"type": "tuning", "sysctl": {"net.core.somaxconn": "5", "kernel.x": "1"}})
    assert refusals(config) == [
        'plugins[0].sysctl["kernel.x"] "kernel.x" is not allowed by delegatePolicy.sysctl [net.*]'
    ]
    assert len(refusals(config, sysctl=["net.ipv4.*"])) == 2


@pytest.mark.req("SEC-DELEGATE")
def test_a_value_of_the_wrong_kind_is_refused() -> None:
    assert [
        r.split(" refused")[0] for r in refusals(conflist({"type": "macvlan", "master": 5}))
    ] == ["plugins[0].master 5 is not a string,"]
    assert len(refusals(conflist({"type": None}))) == 1
    assert len(refusals(conflist({"type": "tuning", "sysctl": ["net.x"]}))) == 1


# --- namespaces and settings -------------------------------------------------------------------


POLICY = {
    "types": ["bridge", "host-local"],
    "namespaces": [
        {
            "namespaceSelector": {"matchLabels": {"team": "radio"}},
            "types": ["macvlan", "host-local"],
            "master": ["ens5f1"],
        },
        {
            "namespaceSelector": {
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["lab"]}]
            },
            "types": ["*"],
        },
    ],
}


@pytest.mark.req("SEC-DELEGATE")
def test_the_first_namespace_entry_that_selects_decides_and_keys_it_omits_are_inherited() -> None:
    policy = delegate_policy_of(POLICY)
    radio = policy.rules_for("radio", {"team": "radio", "tier": "lab"})
    assert radio.source == "delegatePolicy.namespaces[0]"
    assert radio.types.allows("macvlan")
    assert not radio.types.allows("bridge")
    assert radio.master.allows("ens5f1")
    assert not radio.master.allows("eth0")
    assert radio.bridge == policy.rules.bridge  # not named: the cluster-wide list
    lab = policy.rules_for("lab", {"tier": "lab"})
    assert lab.types.allows("host-device")
    assert not lab.device.allows("eth0")
    other = policy.rules_for("other", {})
    assert other.source == "delegatePolicy"
    assert not other.types.allows("macvlan")


def test_a_selector_on_the_namespace_name_works_without_labels() -> None:
    problems: list[str] = []
    raw = {
        "namespaces": [
            {
                "namespaceSelector": {
                    "matchLabels": {delegate_policy.NAMESPACE_NAME_LABEL: "radio"}
                },
                "types": ["macvlan"],
            }
        ]
    }
    policy = delegate_policy.parse_policy(raw, "delegatePolicy", problems)
    assert policy is not None
    assert policy.rules_for("radio", {}).types.entries == ("macvlan",)
    assert policy.rules_for("blue", {}).types == delegate_policy.DelegateRules().types


@pytest.mark.req("SEC-DELEGATE")
def test_bad_policy_settings_name_the_key_and_quote_the_value() -> None:
    raw = {
        "clusterNetwork": "x",
        "feed": {"directory": "/m"},
        "delegatePolicy": {
            "types": "bridge",
            "master": ["eth1", 7, ""],
            "dataDir": ["relative", "/a/../b", "/x/*"],
            "namespaces": [
                {"types": ["macvlan"]},
                {"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Is"}]}},
            ],
            "enabld": True,
        },
    }
    problems = settings.settings_problems(raw)
    assert problems == (
        "delegatePolicy.enabld: unknown key (known: enabled, types, master, bridge, device, "
        "pciBusID, resourceName, dataDir, sysctl, passthruMaster, gatewayBridge, reservedRanges, "
        "nodeChanges, namespaces), "
        "got True",
        "delegatePolicy.types: must be a list of names or globs ('*' any run, '?' one character, "
        "'!' in front excludes), got 'bridge'",
        "delegatePolicy.master[1]: must be a string, got 7",
        "delegatePolicy.master[2]: must be a non-empty printable name without '\"' or '\\', got ''",
        "delegatePolicy.dataDir[0]: must be an absolute directory without '..' or globs, "
        "got 'relative'",
        "delegatePolicy.dataDir[1]: must be an absolute directory without '..' or globs, "
        "got '/a/../b'",
        "delegatePolicy.dataDir[2]: must be an absolute directory without '..' or globs, "
        "got '/x/*'",
        "delegatePolicy.namespaces[0].namespaceSelector: required ({} takes every namespace), "
        "got nothing",
        "delegatePolicy.namespaces[1].namespaceSelector.matchExpressions[0].operator: must be "
        "one of In, NotIn, Exists, DoesNotExist, got 'Is'",
    )
    with pytest.raises(errors.InvalidNetworkConfigError):
        settings.parse_settings(raw, source="test")


def test_settings_without_a_policy_get_the_defaults() -> None:
    cfg = settings.parse_settings({"clusterNetwork": "x", "feed": {"directory": "/m"}}, source="t")
    assert cfg.networks.delegate_policy == delegate_policy.DEFAULT_POLICY
    assert cfg.networks.delegate_policy.enabled


# --- at ADD: refused before any plugin runs ----------------------------------------------------


@pytest.mark.req("SEC-DELEGATE")
def test_a_refused_nad_fails_the_add_before_any_plugin_runs_with_an_event(tmp_path: Path) -> None:
    view = view_of(
        pod("net-a,net-b"),
        nad("net-a", {"type": "macvlan", "master": "eth1"}),
        nad("net-b", {"type": "host-device", "device": "eth0"}),
    )
    orch, sink, plugins = orchestrated(tmp_path, view)

    refused = refused_add(orch)

    assert refused.msg == (
        "[blue/web/u1] NetworkAttachmentDefinition blue/net-b refused by the delegate policy: "
        'plugins[0].type "host-device" is not allowed by delegatePolicy.types [bridge, macvlan, '
        "ipvlan, ptp, vlan, host-local, static, dhcp, tuning, bandwidth, sbr, vrf, netattach] "
        "(and 1 more)"
    )
    assert 'plugins[0].device "eth0" is not allowed by delegatePolicy.device []' in (
        refused.details
    )
    assert plugins.commands() == []  # not even the default network ran
    assert list(orch.records.container_ids()) == []  # no record: nothing to undo
    (event,) = sink.events
    assert event[:3] == ("blue/web", "Warning", delegate_guard.DelegateRefusedError.event_reason)
    assert "blue/net-b" in event[3]
    assert '"host-device"' in event[3]


@pytest.mark.req("SEC-DELEGATE")
def test_a_namespace_granted_more_attaches_what_another_may_not(tmp_path: Path) -> None:
    grant = {
        "namespaces": [
            {
                "namespaceSelector": {"matchLabels": {"netattach.io/host-devices": "yes"}},
                "types": ["host-device"],
                "device": ["na-dev*"],
            }
        ]
    }
    view = view_of(
        namespace("radio", {"netattach.io/host-devices": "yes"}),
        namespace("blue", {}),
        pod("net-d", namespace="radio"),
        nad("net-d", namespace="radio", config={"type": "host-device", "device": "na-dev1"}),
        nad("net-d", {"type": "host-device", "device": "na-dev1"}),
    )
    orch, _, plugins = orchestrated(tmp_path, view, policy=grant)

    asyncio.run(orch.add(call(namespace="radio"), {"cniVersion": "1.0.0"}))

    assert ("host-device", "ADD") in plugins.commands()
    # The same NAD in a namespace without the label is refused (a pod there selects it).
    view.upsert(pod("net-d"))
    plugins.calls.clear()
    blue = call(container_id="c2")
    with pytest.raises(delegate_guard.DelegateRefusedError, match=r"delegatePolicy\.types"):
        asyncio.run(orch.add(blue, {"cniVersion": "1.0.0"}))
    assert plugins.commands() == []


@pytest.mark.req("SEC-DELEGATE")
def test_a_disabled_policy_trusts_every_nad(tmp_path: Path) -> None:
    view = view_of(pod("net-b"), nad("net-b", {"type": "host-device", "device": "eth9"}))
    orch, _, plugins = orchestrated(tmp_path, view, policy={"enabled": False})

    asyncio.run(orch.add(call(), {"cniVersion": "1.0.0"}))

    assert ("host-device", "ADD") in plugins.commands()


@pytest.mark.req("SEC-DELEGATE")
def test_a_hot_plugged_refused_nad_changes_nothing(tmp_path: Path) -> None:
    sandbox = tmp_path / "netns"  # the sandbox must exist for a pod to be hot-plugged
    sandbox.write_text("")
    view = view_of(
        pod("net-a"),
        nad("net-a", {"type": "macvlan", "master": "eth1"}),
        nad("net-b", {"type": "tuning", "sysctl": {"kernel.x": "1"}}),
    )
    orch, sink, plugins = orchestrated(tmp_path, view)
    added = env.Environment(
        command="ADD",
        container_id="c1",
        netns=str(sandbox),
        ifname="eth0",
        args=call().args,
    )
    asyncio.run(orch.add(added, {"cniVersion": "1.0.0"}))
    before = orch.records.load("c1")
    plugins.calls.clear()
    sink.events.clear()
    view.upsert(pod("net-a,net-b"))

    with pytest.raises(delegate_guard.DelegateRefusedError, match=r"blue/net-b"):
        asyncio.run(orch.replug("c1"))

    assert plugins.commands() == []
    assert orch.records.load("c1") == before
    (event,) = sink.events
    assert event[2] == delegate_guard.DelegateRefusedError.event_reason
    assert 'plugins[0].sysctl["kernel.x"]' in event[3]
