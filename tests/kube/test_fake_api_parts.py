"""The fake's pure parts: selectors, the three patch formats, CRD schema handling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kube.api import Obj
from tests.kube.crds import load_crd_schemas
from tests.kube.patches import PatchError, json_patch, merge_patch, strategic_merge_patch
from tests.kube.real_api import with_token_only
from tests.kube.schema import prune_and_default, validate
from tests.kube.selectors import (
    SelectorError,
    match_label_selector_object,
    parse_field_selector,
    parse_label_selector,
)

# -- label selectors ---------------------------------------------------------------------------

LABELS = {"app": "web", "tier": "front", "n": "5", "example.com/role": "x"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("", True),
        ("app=web", True),
        ("app==web", True),
        ("app = web", True),
        ("app!=web", False),
        ("app!=db", True),
        ("missing!=x", True),
        ("app in (db, web)", True),
        ("app in (db)", False),
        ("app notin (db)", True),
        ("missing notin (db)", True),
        ("tier", True),
        ("!tier", False),
        ("!missing", True),
        ("app=web,tier=front", True),
        ("app=web,tier=back", False),
        ("n>4", True),
        ("n<5", False),
        ("missing>1", False),
        ("example.com/role=x", True),
        ("app in (web),!missing,tier", True),
    ],
)
def test_label_selector_matching(selector: str, matches: bool) -> None:
    assert parse_label_selector(selector).matches(LABELS) is matches


@pytest.mark.parametrize(
    "selector",
    ["app in web", "app in ()", "=web", "app=web,", "app=(", "bad key=1", "app=a b", "n>x", "-a"],
)
def test_label_selector_errors(selector: str) -> None:
    with pytest.raises(SelectorError):
        parse_label_selector(selector)


def test_structured_label_selectors() -> None:
    selector: Obj = {
        "matchLabels": {"app": "web"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["front", "edge"]},
            {"key": "gone", "operator": "DoesNotExist"},
        ],
    }
    assert match_label_selector_object(selector, LABELS)
    assert not match_label_selector_object(selector, {"app": "web"})
    assert match_label_selector_object({}, {})


# -- field selectors ---------------------------------------------------------------------------


def test_field_selector_terms_and_escapes() -> None:
    values = {"metadata.name": "a,b", "spec.nodeName": "n1", "status.phase": ""}
    selector = parse_field_selector(r"metadata.name=a\,b,spec.nodeName==n1,status.phase!=Running")
    assert selector.fields() == {"metadata.name", "spec.nodeName", "status.phase"}
    assert selector.matches(lambda f: values.get(f, ""))
    assert not parse_field_selector("spec.nodeName!=n1").matches(lambda f: values.get(f, ""))
    assert parse_field_selector("status.phase=").matches(lambda f: values.get(f, ""))
    for bad in ("metadata.name", "metadata.name=a=b", r"metadata.name=a\x"):
        with pytest.raises(SelectorError):
            parse_field_selector(bad)


# -- RFC 7386 merge patch (its appendix A) -----------------------------------------------------

RFC7386 = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("target", "patch", "result"), RFC7386)
def test_merge_patch_rfc7386(target: Any, patch: Any, result: Any) -> None:
    before = repr(target)
    assert merge_patch(target, patch) == result
    assert repr(target) == before  # not modified


# -- RFC 6902 JSON patch -----------------------------------------------------------------------


def test_json_patch_rfc6902_operations() -> None:
    doc: Obj = {"foo": ["bar", "baz"], "a/b": 1, "m~n": 2, "q": {"x": 1}}
    ops = [
        {"op": "add", "path": "/foo/1", "value": "qux"},
        {"op": "add", "path": "/foo/-", "value": "end"},
        {"op": "replace", "path": "/a~1b", "value": 10},
        {"op": "remove", "path": "/m~0n"},
        {"op": "copy", "from": "/q/x", "path": "/copied"},
        {"op": "move", "from": "/q", "path": "/moved"},
        {"op": "test", "path": "/foo", "value": ["bar", "qux", "baz", "end"]},
    ]
    assert json_patch(doc, ops) == {
        "foo": ["bar", "qux", "baz", "end"],
        "a/b": 10,
        "copied": 1,
        "moved": {"x": 1},
    }
    assert doc["foo"] == ["bar", "baz"]


@pytest.mark.parametrize(
    ("ops", "bad_request"),
    [
        ([{"op": "test", "path": "/a", "value": 2}], False),
        ([{"op": "add", "path": "/missing/child", "value": 1}], False),
        ([{"op": "remove", "path": "/nope"}], False),
        ([{"op": "replace", "path": "/nope", "value": 1}], False),
        ([{"op": "add", "path": "/list/5", "value": 1}], False),
        ([{"op": "frobnicate", "path": "/a"}], True),
        ({"op": "add"}, True),
    ],
)
def test_json_patch_errors(ops: Any, bad_request: bool) -> None:
    with pytest.raises(PatchError) as raised:
        json_patch({"a": 1, "list": [0]}, ops)
    assert raised.value.bad_request is bad_request


# -- strategic merge patch ---------------------------------------------------------------------


def test_strategic_merge_merges_keyed_lists() -> None:
    pod: Obj = {
        "metadata": {"annotations": {"a": "1"}, "finalizers": ["x"]},
        "spec": {
            "containers": [
                {"name": "main", "image": "a:1", "env": [{"name": "A", "value": "1"}]},
                {"name": "side", "image": "b:1"},
            ],
            "tolerations": [{"key": "t1"}],
        },
        "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Init"}]},
    }
    patch: Obj = {
        "metadata": {"annotations": {"a": None, "b": "2"}, "finalizers": ["y", "x"]},
        "spec": {
            "containers": [
                {"name": "main", "env": [{"name": "B", "value": "2"}]},
                {"name": "side", "$patch": "delete"},
                {"name": "new", "image": "c:1"},
            ],
            "tolerations": [{"key": "t2"}],
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    assert strategic_merge_patch(pod, patch) == {
        "metadata": {"annotations": {"b": "2"}, "finalizers": ["x", "y"]},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "a:1",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                },
                {"name": "new", "image": "c:1"},
            ],
            "tolerations": [{"key": "t2"}],  # no merge key declared: replaced
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Init"}]},
    }


def test_strategic_merge_directives() -> None:
    obj: Obj = {"metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x", "y"]}}
    replaced = strategic_merge_patch(obj, {"metadata": {"labels": {"c": "3", "$patch": "replace"}}})
    assert replaced["metadata"]["labels"] == {"c": "3"}
    deleted = strategic_merge_patch(obj, {"metadata": {"labels": {"$patch": "delete"}}})
    assert "labels" not in deleted["metadata"]
    trimmed = strategic_merge_patch(
        obj,
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"], "$setElementOrder/x": []}},
    )
    assert trimmed["metadata"] == {"labels": {"a": "1", "b": "2"}, "finalizers": ["y"]}
    with pytest.raises(PatchError):
        strategic_merge_patch(obj, {"spec": {"containers": [{"image": "no-name"}]}})
    with pytest.raises(PatchError):
        strategic_merge_patch(obj, ["not", "a", "map"])


# -- CRD schemas -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def schemas() -> dict[str, Obj]:
    return load_crd_schemas()


def test_the_crds_of_deploy_are_loaded(schemas: dict[str, Obj]) -> None:
    assert set(schemas) == {
        "NetworkAttachmentDefinition", "MultiNetworkPolicy", "IPBlock", "IPAMClaim",
        "PolicyPeerGroup",
    }  # fmt: skip


def test_pruning_and_defaulting(schemas: dict[str, Obj]) -> None:
    policy: Obj = {
        "apiVersion": "k8s.cni.cncf.io/v1beta1",
        "kind": "MultiNetworkPolicy",
        "metadata": {"name": "p", "anything": "kept for the server's metadata handling"},
        "spec": {
            "podSelector": {"matchLabels": {"a": "b"}, "junk": 1},
            "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}], "ports": [{"port": "dns"}]}],
        },
        "status": {"dropped": True},
    }
    result = prune_and_default(policy, schemas["MultiNetworkPolicy"])
    assert result["metadata"] == policy["metadata"]
    assert "status" not in result
    assert result["spec"]["podSelector"] == {"matchLabels": {"a": "b"}}
    assert result["spec"]["egress"][0]["ports"] == [{"port": "dns", "protocol": "TCP"}]
    assert validate(result, schemas["MultiNetworkPolicy"]) == []


def test_validation_causes(schemas: dict[str, Obj]) -> None:
    policy: Obj = {
        "spec": {
            "policyTypes": ["Sideways"],
            "ingress": [{"ports": [{"port": 1.5, "protocol": "TCP"}], "from": [{"ipBlock": {}}]}],
            "podSelector": {"matchLabels": {"a": 1}},
        }
    }
    causes = {(c.reason, c.field) for c in validate(policy, schemas["MultiNetworkPolicy"])}
    assert causes == {
        ("FieldValueNotSupported", "spec.policyTypes[0]"),
        ("FieldValueInvalid", "spec.ingress[0].ports[0].port"),
        ("FieldValueRequired", "spec.ingress[0].from[0].ipBlock.cidr"),
        ("FieldValueInvalid", "spec.podSelector.matchLabels.a"),
    }
    missing = {(c.reason, c.field) for c in validate({"spec": {}}, schemas["MultiNetworkPolicy"])}
    assert missing == {("FieldValueRequired", "spec.podSelector")}


# -- kubeconfig rewriting (the tests' own, for a real server too) -------------------------------


def test_with_token_only_keeps_the_trust_and_drops_every_other_credential(tmp_path: Path) -> None:
    source = tmp_path / "home" / "kubeconfig"
    source.parent.mkdir()
    source.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {"server": "https://k:6443", "certificate-authority": "ca.crt"},
                    }
                ],
                "users": [
                    {
                        "name": "admin",
                        "user": {"client-certificate": "a.crt", "client-key": "a.key", "token": ""},
                    }
                ],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "admin"}}],
                "current-context": "x",
            }
        )
    )
    written = with_token_only(source, tmp_path / "copy", "not-the-token")
    config = yaml.safe_load(written.read_text())
    assert config["users"] == [{"name": "admin", "user": {"token": "not-the-token"}}]
    assert config["clusters"][0]["cluster"] == {
        "server": "https://k:6443",
        "certificate-authority": str(source.parent / "ca.crt"),
    }
