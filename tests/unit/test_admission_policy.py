"""The ValidatingAdmissionPolicy generated from the delegate policy decides what the daemon
decides (SEC-ADMISSION): its CEL, evaluated by cel-python with the three Kubernetes library
functions it uses (`findAll`, `join`, and RE2's `matches`), against the Python matcher on the
same NADs; and deploy/ ships what the command generates from deploy/configmap.yaml.

Differential on a corpus of configs written the plain way (each key where its plugin reads it,
no duplicate keys, no escapes): the two must agree exactly. On configs written to slip past a
text reading (escapes, duplicate keys, nested sysctl objects), admission must refuse whatever the
daemon refuses.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import re2
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from netattach.cli import admission as admission_cmd
from netattach.cli import main as cli_main
from netattach.cluster import model
from netattach.guard import admission, check, delegate_policy
from netattach.settings import settings as settings_mod
from tests.unit.admission_fixtures import CompiledPolicy, nad, policy_of
from tests.unit.key_spellings import SPELLINGS

ROOT = Path(__file__).resolve().parents[2]


# The policies the corpus is judged under: the defaults, and one narrowed and widened per
# namespace with every kind of list and selector.
POLICIES = {
    "defaults": {},
    "narrow": {
        "types": ["bridge", "macvlan", "vlan", "host-local", "tuning", "na-*"],
        "master": ["eth1", "ens5f*", "!ens5f9"],
        "bridge": ["br-?", "na-*"],
        "dataDir": ["/var/lib/cni", "/run/cni", "!/run/cni/secret"],
        "sysctl": ["net.ipv4.*", "!net.ipv4.ip_forward"],
        "namespaces": [
            {
                "namespaceSelector": {"matchLabels": {"team": "radio"}},
                "types": ["host-device", "macvlan", "ipvlan", "host-local"],
                "master": ["*"],
                "device": ["eth2", "na-*"],
                "pciBusID": ["0000:3b:00.*"],
            },
            {
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": "tier", "operator": "In", "values": ["lab", "dev"]},
                        {"key": "locked", "operator": "DoesNotExist"},
                    ]
                },
                "types": ["*", "!host-device"],
                "bridge": ["*"],
                "sysctl": ["*"],
            },
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "infra"}},
                "dataDir": ["/"],
            },
        ],
    },
}
COMPILED = {
    key: (policy_of(raw), CompiledPolicy(admission.build_policy(policy_of(raw))[0]))
    for key, raw in POLICIES.items()
}

NAMESPACES = st.sampled_from(
    [
        ("blue", {}),
        ("radio", {"team": "radio"}),
        ("lab", {"tier": "lab"}),
        ("locked-lab", {"tier": "lab", "locked": "yes"}),
        ("infra", {}),
    ]
)
INTERFACES = st.sampled_from(["eth0", "eth1", "eth2", "ens5f1", "ens5f9", "na-x", "", "cni0"])
BRIDGES = st.sampled_from(["cni0", "br-1", "br-12", "na-b", "docker0", "team", ""])
DATA_DIRS = st.sampled_from(
    [
        "/var/lib/cni",
        "/var/lib/cni/networks",
        "/var/lib/cnix",
        "/run/cni/secret/x",
        "/run/cni/../../etc",
        "/etc/cni/net.d",
        "/host/etc",
        "/tmp/x",
        "relative/dir",
        "/",
    ]
)
SYSCTLS = st.sampled_from(
    ["net.ipv4.conf.all.arp_notify", "net.ipv4.ip_forward", "net.core.somaxconn", "kernel.x"]
)
IPAM_TYPES = st.sampled_from(["host-local", "static", "dhcp", "whereabouts"])


@st.composite
def ipams(draw: st.DrawFn) -> dict[str, Any]:
    ipam: dict[str, Any] = {"type": draw(IPAM_TYPES)}
    if ipam["type"] == "host-local":
        ipam["subnet"] = "10.1.0.0/24"
        if draw(st.booleans()):
            ipam["dataDir"] = draw(DATA_DIRS)
    return ipam


@st.composite
def plugins(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(
        st.sampled_from(
            ["bridge", "macvlan", "ipvlan", "vlan", "host-device", "tuning", "portmap", "na-x"]
        )
    )
    plugin: dict[str, Any] = {"type": kind}
    if kind in ("macvlan", "ipvlan") and draw(st.booleans()):
        plugin["master"] = draw(INTERFACES)
    if kind == "vlan":
        plugin["master"], plugin["vlanId"] = draw(INTERFACES), 10
    if kind == "bridge" and draw(st.booleans()):
        plugin["bridge"] = draw(BRIDGES)
    if kind == "host-device":
        how = draw(st.sampled_from(["device", "pciBusID", "hwaddr", "runtimeConfig"]))
        if how == "device":
            plugin["device"] = draw(INTERFACES)
        elif how == "pciBusID":
            plugin["pciBusID"] = draw(st.sampled_from(["0000:3b:00.1", "0000:af:00.0"]))
        elif how == "hwaddr":
            plugin["hwaddr"] = "02:00:00:00:00:01"
        else:
            plugin["runtimeConfig"] = {"deviceID": "0000:3b:00.2"}
    if kind == "tuning":
        plugin["sysctl"] = {s: "1" for s in draw(st.lists(SYSCTLS, max_size=3, unique=True))}
        if draw(st.booleans()):
            plugin["dataDir"] = draw(DATA_DIRS)
    if kind in ("bridge", "macvlan", "ipvlan", "vlan", "host-device") and draw(st.booleans()):
        plugin["ipam"] = draw(ipams())
    return plugin


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    chain = draw(st.lists(plugins(), min_size=1, max_size=3))
    if len(chain) == 1 and draw(st.booleans()):
        return {"cniVersion": "1.0.0", "name": "net-a", **chain[0]}
    return {"cniVersion": "1.0.0", "name": "net-a", "plugins": chain}


def text_of(config: dict[str, Any], style: int) -> str:
    """One config written three ways: compact, spaced, indented over lines."""
    if style == 0:
        return json.dumps(config, separators=(",", ":"))
    if style == 1:
        return json.dumps(config)
    return json.dumps(config, indent=2)


def daemon_refuses(
    policy: delegate_policy.DelegatePolicy, namespace: str, labels: Any, raw: Any
) -> bool:
    return bool(check.check_config(raw, policy.rules_for(namespace, labels)))


@pytest.mark.req("SEC-ADMISSION")
@pytest.mark.parametrize("which", sorted(POLICIES))
@settings(max_examples=150, deadline=None)
@given(config=configs(), where=NAMESPACES, style=st.integers(0, 2))
def test_admission_decides_what_the_daemon_decides(
    which: str, config: dict[str, Any], where: tuple[str, dict[str, str]], style: int
) -> None:
    policy, compiled = COMPILED[which]
    namespace, labels = where
    refused_at_add = daemon_refuses(policy, namespace, labels, config)

    messages = compiled.messages(nad(namespace, text_of(config, style)), labels)

    assert bool(messages) == refused_at_add, (messages, config)


SLIPPERY = [
    pytest.param('{"type": "host\\u002ddevice", "device": "eth0"}', id="unicode-escape"),
    pytest.param('{"type": "bridge", "type": "host-device"}', id="duplicate-key-last-wins"),
    pytest.param('{"type": "host-device", "type": "bridge"}', id="duplicate-key-first"),
    pytest.param('{"type": "tuning", "sysctl": {"kernel": {"x": "1"}}}', id="nested-sysctl"),
    pytest.param('{"type": "macvlan", "master": null}', id="null-master"),
    pytest.param('{"type": "bridge", "bridge": ["cni0"]}', id="list-bridge"),
    pytest.param('{"type": "macvlan", "master"  :  "eth0" }', id="spacing"),
    pytest.param('{"type":"tuning","sysctl":{"net.x":"a,\\"b\\":"}}', id="escaped-quote"),
]


@pytest.mark.req("SEC-ADMISSION")
@pytest.mark.parametrize("text", SLIPPERY)
@pytest.mark.parametrize("which", sorted(POLICIES))
def test_admission_refuses_whatever_the_daemon_refuses_however_it_is_written(
    which: str, text: str
) -> None:
    policy, compiled = COMPILED[which]
    raw = json.loads(text)
    raw.setdefault("cniVersion", "1.0.0")

    messages = compiled.messages(nad("blue", text), {})

    if daemon_refuses(policy, "blue", {}, raw):
        assert messages
    if "\\" in text:
        assert any("JSON escape" in m for m in messages)


@pytest.mark.req("SEC-ADMISSION")
def test_the_message_names_the_nad_the_value_and_the_rule() -> None:
    policy, compiled = COMPILED["narrow"]
    config = {"cniVersion": "1.0.0", "type": "macvlan", "master": "eth0"}

    (message,) = compiled.messages(nad("blue", json.dumps(config)), {})

    assert message == (
        'NetworkAttachmentDefinition blue/net-a: master interface "master": "eth0" is not '
        "allowed by delegatePolicy.master [eth1, ens5f*, !ens5f9]"
    )
    (radio,) = compiled.messages(
        nad("radio", json.dumps({"type": "bridge", "bridge": "na-b"})), {"team": "radio"}
    )
    assert radio == (
        'NetworkAttachmentDefinition radio/net-a: plugin type "type": "bridge" is not allowed '
        "by delegatePolicy.namespaces[0].types [host-device, macvlan, ipvlan, host-local]"
    )
    assert policy.enabled


@pytest.mark.req("SEC-ADMISSION")
def test_a_nad_without_config_is_admitted() -> None:
    _, compiled = COMPILED["narrow"]
    assert compiled.messages(nad("blue", None), {}) == []


# --- DEV-RESOURCE: the resourceName annotation ----------------------------------------------------

RESOURCE_POLICY = {
    "types": ["host-device"],
    "resourceName": ["intel.com/sriov_*", "!intel.com/sriov_mgmt"],
    "namespaces": [
        {"namespaceSelector": {"matchLabels": {"team": "radio"}}, "resourceName": ["*"]},
        {
            "namespaceSelector": {"matchLabels": {"tier": "lab"}},
            "resourceName": ["intel.com/sriov_lab"],
        },
    ],
}
RESOURCE_COMPILED = CompiledPolicy(admission.build_policy(policy_of(RESOURCE_POLICY))[0])
RADIO = {"team": "radio"}
LAB = {"tier": "lab"}
PLAIN_CONFIG = json.dumps({"cniVersion": "1.0.0", "type": "host-device"})


def resource_messages(namespace: str, labels: dict[str, str], value: str | None) -> list[str]:
    annotations = None if value is None else {model.RESOURCE_ANNOTATION: value}
    return RESOURCE_COMPILED.messages(nad(namespace, PLAIN_CONFIG, annotations), labels)


def daemon_refuses_resource(
    policy: delegate_policy.DelegatePolicy, namespace: str, labels: dict[str, str], value: str
) -> bool:
    # As the daemon reads and checks it: pods/plan.py resource_of strips the annotation
    # ("" names no resource), pods/delegate_guard.py check_nad judges it by the NAD's namespace.
    stripped = value.strip()
    rules = policy.rules_for(namespace, labels)
    return bool(stripped) and not rules.resource_name.allows(stripped)


@pytest.mark.req("DEV-RESOURCE")
@pytest.mark.req("SEC-ADMISSION")
def test_admission_admits_a_resource_name_the_namespace_is_granted() -> None:
    assert resource_messages("blue", {}, "intel.com/sriov_netdevice") == []
    assert resource_messages("radio", RADIO, "nvidia.com/gpu") == []


@pytest.mark.req("DEV-RESOURCE")
@pytest.mark.req("SEC-ADMISSION")
def test_admission_refuses_a_resource_name_the_namespace_is_not_granted() -> None:
    (message,) = resource_messages("blue", {}, "intel.com/sriov_mgmt")

    assert message == (
        "NetworkAttachmentDefinition blue/net-a: resourceName 'intel.com/sriov_mgmt' is not "
        "allowed by delegatePolicy.resourceName [intel.com/sriov_*, !intel.com/sriov_mgmt]"
    )
    assert resource_messages("blue", {}, "nvidia.com/gpu")


@pytest.mark.req("DEV-RESOURCE")
@pytest.mark.req("SEC-ADMISSION")
def test_a_namespace_entry_narrows_the_resource_names_its_nads_may_name() -> None:
    assert resource_messages("lab", LAB, "intel.com/sriov_lab") == []

    (message,) = resource_messages("lab", LAB, "intel.com/sriov_netdevice")

    assert message == (
        "NetworkAttachmentDefinition lab/net-a: resourceName 'intel.com/sriov_netdevice' is not "
        "allowed by delegatePolicy.namespaces[1].resourceName [intel.com/sriov_lab]"
    )


@pytest.mark.req("DEV-RESOURCE")
@pytest.mark.req("SEC-ADMISSION")
@pytest.mark.parametrize("value", [None, "", "  ", "\n"])
def test_a_nad_naming_no_resource_is_admitted(value: str | None) -> None:
    assert resource_messages("lab", LAB, value) == []
    other = {"k8s.v1.cni.cncf.io/other": "intel.com/sriov_mgmt"}
    assert RESOURCE_COMPILED.messages(nad("lab", PLAIN_CONFIG, other), LAB) == []


@pytest.mark.req("DEV-RESOURCE")
@pytest.mark.req("SEC-ADMISSION")
def test_a_policy_granting_any_resource_generates_no_resource_name_check() -> None:
    every = {"namespaceSelector": {}, "resourceName": ["*"]}
    for raw in ({}, {"resourceName": ["*"], "namespaces": [every]}):
        (vap, _) = admission.build_policy(policy_of(raw))
        text = json.dumps(vap)
        assert "resourceName" not in text, raw
        assert model.RESOURCE_ANNOTATION not in text, raw


def test_the_white_space_admission_strips_is_what_python_strips() -> None:
    stripped = re2.compile(f"[{admission.WHITE_SPACE}]")
    # Every character str.isspace() takes is in the Basic Multilingual Plane.
    assert all(not chr(c).isspace() for c in range(0x10000, 0x110000))
    for code in (c for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF):
        assert (stripped.fullmatch(chr(code)) is not None) == chr(code).isspace(), hex(code)


RESOURCE_VALUES = st.sampled_from(
    [
        "intel.com/sriov_netdevice",
        "intel.com/sriov_mgmt",
        "intel.com/sriov_lab",
        "nvidia.com/gpu",
        "intel.com/sriov_",
        "intel.com/sriov_mgmt\nx",
        "x\nintel.com/sriov_mgmt",
        "intel.comXsriov_lab",
        "",
    ]
)
PADDING = st.sampled_from(["", " ", "\t", "\n", "\xa0", "\u2003", "\x1f", "\u200b"])


@pytest.mark.req("DEV-RESOURCE")
@pytest.mark.req("SEC-ADMISSION")
@settings(max_examples=200, deadline=None)
@given(
    value=st.tuples(PADDING, RESOURCE_VALUES, PADDING).map("".join),
    where=st.sampled_from([("blue", {}), ("radio", RADIO), ("lab", LAB)]),
)
def test_admission_decides_the_resource_name_as_the_daemon_does(
    value: str, where: tuple[str, dict[str, str]]
) -> None:
    namespace, labels = where
    policy = policy_of(RESOURCE_POLICY)

    refused = bool(resource_messages(namespace, labels, value))

    assert refused == daemon_refuses_resource(policy, namespace, labels, value), repr(value)


# --- the command and deploy/ -------------------------------------------------------------------


def deploy_settings() -> settings_mod.Settings:
    configmap = yaml.safe_load((ROOT / "deploy" / "configmap.yaml").read_text())
    raw = yaml.safe_load(configmap["data"]["settings.yaml"])
    return settings_mod.parse_settings(raw, source="deploy/configmap.yaml")


@pytest.mark.req("SEC-ADMISSION")
def test_deploy_ships_what_the_command_generates_from_the_deploy_settings(tmp_path: Path) -> None:
    configmap = yaml.safe_load((ROOT / "deploy" / "configmap.yaml").read_text())
    settings_file = tmp_path / "settings.yaml"
    settings_file.write_text(configmap["data"]["settings.yaml"])
    out = tmp_path / "policy.yaml"

    assert cli_main.main(["admission-policy", "--config", str(settings_file), "-o", str(out)]) == 0

    shipped = (ROOT / "deploy" / "admission-policy.yaml").read_text()
    assert out.read_text() == shipped == admission_cmd.render(deploy_settings())
    vap, binding = yaml.safe_load_all(shipped)
    assert binding["spec"] == {"policyName": vap["metadata"]["name"], "validationActions": ["Deny"]}


@pytest.mark.req("SEC-ADMISSION")
def test_the_shipped_policy_refuses_the_attacks_and_admits_the_plain_uses() -> None:
    vap, _ = yaml.safe_load_all((ROOT / "deploy" / "admission-policy.yaml").read_text())
    compiled = CompiledPolicy(vap)
    attacks = [
        {"type": "host-device", "device": "eth0"},
        {"type": "bridge", "bridge": "cni0"},
        {"type": "bridge", "bridge": "b", "ipam": {"type": "host-local", "dataDir": "/host/etc"}},
        {"type": "tuning", "sysctl": {"kernel.core_pattern": "|/x"}},
    ]
    plain = [
        {
            "type": "macvlan",
            "master": "eth1",
            "ipam": {"type": "host-local", "subnet": "10.0.0.0/8"},
        },
        {"type": "bridge", "bridge": "br-team", "ipam": {"type": "dhcp"}},
    ]
    for config in attacks:
        assert compiled.messages(nad("blue", json.dumps(config)), {}), config
    for config in plain:
        assert compiled.messages(nad("blue", json.dumps(config)), {}) == [], config


def test_a_disabled_policy_generates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "clusterNetwork": "x",
                "feed": {"directory": "/m"},
                "delegatePolicy": {"enabled": False},
            }
        )
    )
    assert cli_main.main(["admission-policy", "--config", str(path)]) == 1
    assert "delegatePolicy.enabled is false" in capsys.readouterr().err


NAME_GLOBS = st.sampled_from(["*", "eth?", "ens5f*", "na-*", "cni0", "br-1", "*0", "e*1"])
TYPE_GLOBS = st.sampled_from(["*", "bridge", "macvlan", "host-*", "*vlan", "tuning", "na-?"])
DIRS = st.sampled_from(["/", "/var/lib/cni", "/run/cni", "/tmp", "/run/cni/secret", "/host"])


def entries(draw: st.DrawFn, pool: st.SearchStrategy[str]) -> list[str]:
    chosen = draw(st.lists(st.tuples(st.booleans(), pool), max_size=3, unique_by=lambda t: t[1]))
    return [("!" if excluded else "") + entry for excluded, entry in chosen]


@st.composite
def rule_lists(draw: st.DrawFn) -> dict[str, list[str]]:
    pools = {
        "types": TYPE_GLOBS,
        "master": NAME_GLOBS,
        "bridge": NAME_GLOBS,
        "device": NAME_GLOBS,
        "pciBusID": st.sampled_from(["*", "0000:3b:00.*", "0000:af:??.0"]),
        "dataDir": DIRS,
        "sysctl": st.sampled_from(["*", "net.*", "net.ipv4.*", "kernel.x"]),
    }
    return {key: entries(draw, pool) for key, pool in pools.items() if draw(st.booleans())}


@st.composite
def random_policies(draw: st.DrawFn) -> dict[str, Any]:
    raw: dict[str, Any] = draw(rule_lists())
    selectors = [
        {"matchLabels": {"team": "radio"}},
        {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["prod"]}]},
        {"matchExpressions": [{"key": "locked", "operator": "Exists"}]},
        {},
    ]
    chosen = draw(st.lists(st.sampled_from(selectors), max_size=2))
    raw["namespaces"] = [{"namespaceSelector": s, **draw(rule_lists())} for s in chosen]
    return raw


@pytest.mark.req("SEC-ADMISSION")
@settings(max_examples=60, deadline=None)
@given(
    raw=random_policies(),
    configs_=st.lists(configs(), min_size=1, max_size=4),
    where=NAMESPACES,
)
def test_any_policy_decides_the_same_at_admission_and_at_add(
    raw: dict[str, Any], configs_: list[dict[str, Any]], where: tuple[str, dict[str, str]]
) -> None:
    policy = policy_of(raw)
    compiled = CompiledPolicy(admission.build_policy(policy)[0])
    namespace, labels = where
    for config in configs_:
        refused_at_add = daemon_refuses(policy, namespace, labels, config)
        messages = compiled.messages(nad(namespace, json.dumps(config)), labels)
        assert bool(messages) == refused_at_add, (raw, config, messages)


# --- SEC-KEYS and the paths, at admission ------------------------------------------------------


def _written(config: dict[str, Any]) -> str:
    # ensure_ascii off: an escape would be refused for itself, and the spelling is what is tested.
    return json.dumps({"cniVersion": "1.0.0", **config}, ensure_ascii=False)


@pytest.mark.req("SEC-KEYS")
@pytest.mark.req("SEC-ADMISSION")
@pytest.mark.parametrize(
    ("config", "lists"),
    [(config, lists) for config, lists, _ in SPELLINGS.values()],
    ids=list(SPELLINGS),
)
def test_admission_refuses_a_variant_spelling_of_a_checked_key(
    config: dict[str, Any], lists: dict[str, Any]
) -> None:
    compiled = CompiledPolicy(admission.build_policy(policy_of(lists))[0])
    text = _written(config)
    assert "\\" not in text

    messages = compiled.messages(nad("blue", text), {})

    assert any("is read as a checked key by a Go plugin" in m for m in messages), messages


@pytest.mark.req("SEC-KEYS")
@pytest.mark.req("SEC-ADMISSION")
def test_admission_names_the_misspelt_key_and_admits_the_canonical_one() -> None:
    compiled = CompiledPolicy(admission.build_policy(policy_of({"master": ["ok"]}))[0])
    canonical = {"type": "macvlan", "master": "ok", "mtu": 1400, "MTU": 1400}
    assert compiled.messages(nad("blue", _written(canonical)), {}) == []
    # The first message names the key; the macvlan then has no `master` the lists can read.
    message, *_ = compiled.messages(nad("blue", _written({"type": "macvlan", "Master": "ok"})), {})
    assert message.startswith('NetworkAttachmentDefinition blue/net-a: the key "Master": is read')


@pytest.mark.req("SEC-NODE")
@pytest.mark.req("SEC-ADMISSION")
@pytest.mark.parametrize(
    "data_dir",
    ["//etc/na", "/./etc/na", "/var/lib/cni/", "/var/lib/cni/.", "/var/lib/cni//x", "/."],
)
def test_admission_refuses_a_data_dir_it_cannot_read_as_the_kernel_would(data_dir: str) -> None:
    compiled = CompiledPolicy(admission.build_policy(policy_of({"dataDir": ["/var/lib/cni"]}))[0])
    ipam = {"type": "host-local", "subnet": "10.1.0.0/24", "dataDir": data_dir}
    messages = compiled.messages(nad("blue", _written({"type": "bridge", "ipam": ipam})), {})
    assert any("dataDir" in m for m in messages), messages


@pytest.mark.req("SEC-NODE")
@pytest.mark.req("SEC-ADMISSION")
def test_admission_refuses_netattachs_directories_whatever_the_lists_allow() -> None:
    policy = policy_of({"dataDir": ["/"]}).with_protected(("/srv/na-state",))
    compiled = CompiledPolicy(admission.build_policy(policy)[0])

    def messages(data_dir: str) -> list[str]:
        ipam = {"type": "host-local", "subnet": "10.1.0.0/24", "dataDir": data_dir}
        return compiled.messages(nad("blue", _written({"type": "bridge", "ipam": ipam})), {})

    for data_dir in ("/srv/na-state", "/srv/na-state/records", "/etc/cni/net.d", "/opt/cni/bin/x"):
        (message,) = messages(data_dir)
        assert "lies in a directory of netattach or the runtime" in message, data_dir
        assert "/srv/na-state" in message
    assert messages("/srv/na-statex") == []
    assert messages("/var/lib/cni/networks") == []


@pytest.mark.req("SEC-NODE")
@pytest.mark.req("SEC-ADMISSION")
@pytest.mark.parametrize("kind", ["../x", "/usr/bin/x", "a/b", ".."])
def test_admission_refuses_a_type_that_is_a_path_whatever_types_allows(kind: str) -> None:
    compiled = CompiledPolicy(admission.build_policy(policy_of({"types": ["*"]}))[0])
    config = {"type": "bridge", "ipam": {"type": kind}}
    messages = compiled.messages(nad("blue", _written(config)), {})
    assert any("plugin type" in m and json.dumps(kind) in m for m in messages), messages
