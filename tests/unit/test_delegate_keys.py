"""The delegate policy reads a config as a Go plugin does (SEC-KEYS), normalises paths and
protects netattach's directories (SEC-NODE), and bounds a config's depth: pure code, each attack
of issue 27 by name. `tests/unit/test_delegate_decoder.py` proves the same against the plugins'
own Go decoder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netattach.attach import delegate
from netattach.cni import conf, errors
from netattach.guard import check, keys
from netattach.settings import settings
from tests.unit.delegate_checks import refusals
from tests.unit.key_spellings import SPELLINGS

# --- Go's folding ------------------------------------------------------------------------------


@pytest.mark.req("SEC-KEYS")
@pytest.mark.parametrize(
    ("key", "folded"),
    [
        ("master", "MASTER"),
        ("Master", "MASTER"),
        ("ma\u017fter", "MASTER"),  # LONG S folds to s
        ("\u212aernelpath", "KERNELPATH"),  # KELVIN SIGN folds to k
        ("dataDir", "DATADIR"),
        ("pci_bus_id", "PCI_BUS_ID"),  # '_' is not a letter: no field named pciBusID matches it
        ("\u00e9", "\u00c9"),  # outside ASCII: the orbit's smallest character
    ],
)
def test_go_fold_matches_encoding_json(key: str, folded: str) -> None:
    assert keys.go_fold(key) == folded


@pytest.mark.req("SEC-KEYS")
@given(st.text(alphabet=st.sampled_from("mastkerMASTKER\u017f\u212a_"), min_size=5, max_size=7))
def test_a_key_folds_to_a_field_exactly_when_go_would_take_it_for_that_field(key: str) -> None:
    """ASCII case, LONG S for s and KELVIN SIGN for k: nothing else makes `master` or
    `marker`-like keys the same field (Unicode's CaseFolding.txt, which Go's tables follow)."""
    plain = key.replace("\u017f", "s").replace("\u212a", "k").lower()
    for field in ("master", "kernelpath"[:6], "tasker"):
        assert (keys.go_fold(key) == keys.go_fold(field)) == (plain == field)


# --- spellings ---------------------------------------------------------------------------------


@pytest.mark.req("SEC-KEYS")
@pytest.mark.parametrize(("config", "lists", "expected"), SPELLINGS.values(), ids=SPELLINGS)
def test_a_variant_spelling_of_a_checked_key_is_refused_naming_it(
    config: dict[str, Any], lists: dict[str, Any], expected: str
) -> None:
    found = refusals({"cniVersion": "1.0.0", "name": "n", **config}, **lists)
    assert found, config
    assert any(expected in line for line in found), found


@pytest.mark.req("SEC-KEYS")
def test_a_variant_spelling_is_refused_at_any_depth_and_in_a_conflist() -> None:
    config = {
        "cniVersion": "1.0.0",
        "name": "n",
        "plugins": [
            {"type": "bridge", "bridge": "b"},
            {"type": "tuning", "args": {"cni": {"SYSCTL": {"kernel.x": "1"}}}},
        ],
    }
    (line,) = refusals(config)
    assert line.startswith("plugins[1].args.cni.SYSCTL ")
    assert "is read as 'sysctl' by a Go plugin" in line


@pytest.mark.req("SEC-KEYS")
def test_a_pod_authors_cni_args_are_judged_as_merged() -> None:
    """`cni-args` reach the plugin in `args.cni`: the config the policy judges at ADD is the one
    with them merged (as `build_plan` makes it)."""
    network = conf.parse_any(
        {"cniVersion": "1.0.0", "name": "n", "type": "tuning", "sysctl": {"net.core.x": "1"}}
    )
    for cni_args, expected in (
        ({"Sysctl": {"kernel.core_pattern": "|/x"}}, "plugins[0].args.cni.Sysctl "),
        (
            {"sysctl": {"kernel.core_pattern": "|/x"}},
            'plugins[0].args.cni.sysctl["kernel.core_pattern"]',
        ),
    ):
        applied, _ = delegate.apply_selection(network, cni_args=cni_args, runtime_requests={})
        (line,) = refusals(applied.raw)
        assert line.startswith(expected), line


@pytest.mark.req("SEC-KEYS")
def test_an_escaped_key_is_judged_as_it_decodes() -> None:
    """`\\u004dASTER` is `MASTER` once decoded, for Go and for us alike."""
    text = '{"cniVersion": "1.0.0", "name": "n", "type": "macvlan", "\\u004daster": "eth0"}'
    (line,) = refusals(json.loads(text), master=["ok"])
    assert line.startswith('Master "eth0" is read as')


@pytest.mark.req("SEC-KEYS")
def test_unchecked_keys_keep_their_spelling_and_sysctl_names_are_not_fields() -> None:
    config = {
        "cniVersion": "1.0.0",
        "name": "n",
        "type": "tuning",
        "MTU": 1400,  # not a checked key: a third-party plugin may spell its own keys so
        "sysctl": {"net.ipv4.conf.eth0.x": "1", "net.ipv4.conf.ETH0.x": "1"},
    }
    assert refusals(config) == []


@pytest.mark.req("SEC-KEYS")
def test_two_unchecked_keys_folding_alike_are_refused_too() -> None:
    config = {"cniVersion": "1.0.0", "name": "n", "type": "bridge", "mtu": 1400, "Mtu": 9000}
    (line,) = refusals(config)
    assert line == (
        "Mtu 9000 is the same key as 'mtu' to a Go plugin (keys match ignoring case, and the "
        "last one wins); write it once"
    )


# --- dataDir as the plugin writes it -----------------------------------------------------------


def host_local(data_dir: str) -> dict[str, Any]:
    ipam = {"type": "host-local", "subnet": "10.1.0.0/24", "dataDir": data_dir}
    return {"cniVersion": "1.0.0", "name": "n", "type": "bridge", "bridge": "b", "ipam": ipam}


@pytest.mark.req("SEC-NODE")
@pytest.mark.parametrize("spelled", ["//etc/na", "/./etc/na", "/etc/./na/", "/etc//na"])
def test_a_data_dir_is_normalised_before_it_is_judged(spelled: str) -> None:
    (line,) = refusals(host_local(spelled))
    assert line.startswith(f"ipam.dataDir {json.dumps(spelled)} ")
    assert "is not allowed by delegatePolicy.dataDir" in line


@pytest.mark.req("SEC-NODE")
def test_a_data_dir_through_a_symlink_is_judged_where_it_leads(tmp_path: Path) -> None:
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    (allowed / "link").symlink_to(outside)
    assert refusals(host_local(str(allowed / "ok")), dataDir=[str(allowed)]) == []
    (line,) = refusals(host_local(str(allowed / "link" / "x")), dataDir=[str(allowed)])
    assert f"(written to {str(outside / 'x')!r})" in line
    assert "is not allowed by" in line


@pytest.mark.req("SEC-NODE")
def test_netattachs_directories_are_refused_whatever_the_lists_allow(tmp_path: Path) -> None:
    state = tmp_path / "state"
    cfg = settings.parse_settings(
        {
            "clusterNetwork": "x",
            "feed": {"directory": str(tmp_path / "m")},
            "stateDir": str(state),
            "delegatePolicy": {"dataDir": ["/"]},
        },
        source="t",
    )
    policy = cfg.networks.delegate_policy
    for directory in (
        str(state),
        f"{state}/",
        f"{state}/records",
        "/etc/cni/net.d",
        "/opt/cni/bin",
    ):
        found = check.check_config(host_local(directory), policy.rules, policy.protected)
        assert [r.why for r in found] == [
            "lies in a directory of netattach or the runtime, which no list grants:"
        ], directory
        assert str(state) in found[0].rule
    ok = check.check_config(host_local(str(tmp_path / "ipam")), policy.rules, policy.protected)
    assert ok == []


# --- types and limits --------------------------------------------------------------------------


@pytest.mark.req("SEC-NODE")
@pytest.mark.parametrize("kind", ["../x", "/usr/bin/x", "a/b", "..", "x\\y"])
def test_a_type_is_never_a_path_whatever_types_allows(kind: str) -> None:
    config = {"cniVersion": "1.0.0", "name": "n", "type": "bridge", "ipam": {"type": kind}}
    (line,) = refusals(config, types=["*"])
    assert line.startswith(f"ipam.type {json.dumps(kind)} is not a plain file name")


@pytest.mark.req("SEC-KEYS")
@pytest.mark.parametrize("depth", [conf.MAX_DEPTH + 1, 900, 20_000])
def test_a_config_nested_past_the_limit_is_code_7_naming_the_limit(depth: int) -> None:
    text = '{"type": "bridge", "a": ' + "[" * depth + "]" * depth + "}"
    with pytest.raises(errors.InvalidNetworkConfigError) as info:
        delegate.resolve_delegate(
            namespace="ns", name="deep", spec_config=text, has_spec=True, networks_dir=Path("/")
        )
    assert info.value.code == 7
    assert f"nest more than {conf.MAX_DEPTH} deep" in info.value.msg
    assert "NetworkAttachmentDefinition ns/deep" in info.value.msg


def test_a_config_at_the_limit_is_read() -> None:
    inner = conf.MAX_DEPTH - 1  # the config object is level 1
    text = '{"type": "bridge", "a": ' + "[" * inner + "]" * inner + "}"
    found = delegate.resolve_delegate(
        namespace="ns", name="deep", spec_config=text, has_spec=True, networks_dir=Path("/")
    )
    assert found.network.plugins[0].type == "bridge"
