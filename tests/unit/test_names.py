"""Kubernetes names, DNS-1123 (netattach.names): the rules are written once, and every reader of
a name refuses what they refuse. `a..b` is the spelling one of the old copies let through (the
policy model's), so each reader is shown it: NAD names and namespaces, the selection's elements,
the directory feed's manifests, the settings, `netattach validate`, and the policy's fields."""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netattach import names
from netattach.attach import selection
from netattach.cli import validate
from netattach.cluster import manifests
from netattach.cluster.model import KubeObject
from netattach.cni import errors
from netattach.policy import model as policy_model
from netattach.settings import settings

# Kubernetes' own (k8s.io/apimachinery/pkg/util/validation), as an independent statement.
K8S_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
K8S_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

NOT_NAMES = ["a..b", "a.-b", "a-.b", ".a", "a.", "-a", "a-", "A", "a_b", "a b", "", "a\n", "ü"]


@pytest.mark.parametrize("text", ["a", "a-b", "0", "net-a", "a" * 63])
def test_labels(text: str) -> None:
    assert names.is_label(text)
    assert names.is_subdomain(text)


@pytest.mark.parametrize("text", ["a.b", "a.b-c.d", "pod.ns.svc", ("a" * 63 + ".") * 3 + "a" * 61])
def test_subdomains_that_are_no_labels(text: str) -> None:
    assert names.is_subdomain(text)
    assert not names.is_label(text)


@pytest.mark.parametrize("text", NOT_NAMES)
def test_neither(text: str) -> None:
    assert not names.is_label(text)
    assert not names.is_subdomain(text)


def test_the_lengths() -> None:
    assert not names.is_label("a" * 64)
    # A subdomain's labels are not capped at 63 (Kubernetes' own rule): only the whole is.
    assert names.is_subdomain("a" * 253)
    assert not names.is_subdomain("a" * 254)


@pytest.mark.parametrize("value", [None, 5, b"a", ["a"]])
def test_no_string_is_no_name(value: object) -> None:
    assert not names.is_label(value)
    assert not names.is_subdomain(value)


@given(st.text(alphabet="ab0-.\nA_", max_size=20))
def test_the_rules_are_kubernetes_own(text: str) -> None:
    assert names.is_label(text) == (len(text) <= 63 and K8S_LABEL.fullmatch(text) is not None)
    assert names.is_subdomain(text) == (
        len(text) <= 253 and K8S_SUBDOMAIN.fullmatch(text) is not None
    )


# -- every reader of a name refuses a..b ---------------------------------------------------------

BAD = "a..b"


@pytest.mark.req("NAD-NAME")
@pytest.mark.parametrize(
    "element",
    [
        {"name": BAD},
        {"name": "net-a", "namespace": BAD},
        {"name": "net-a", "ipam-claim-reference": BAD},
    ],
    ids=["name", "namespace", "ipam-claim-reference"],
)
def test_a_selection_element_named_a_dot_dot_b_is_refused(element: dict[str, str]) -> None:
    with pytest.raises(errors.InvalidSelectionError, match=re.escape(repr(BAD)[1:-1])):
        selection.parse_selections(json.dumps([element]), pod_namespace="ns1", pod="p")


@pytest.mark.parametrize("text", [f"{BAD}", f"ns1/{BAD}", f"{BAD}/net-a"])
def test_a_comma_selection_naming_a_dot_dot_b_is_refused(text: str) -> None:
    with pytest.raises(errors.InvalidSelectionError):
        selection.parse_selections(text, pod_namespace="ns1", pod="p")


def manifest(kind: str, name: str, namespace: str = "ns1") -> dict[str, Any]:
    versions = {"Namespace": "v1", "Pod": "v1", "NetworkAttachmentDefinition": "k8s.cni.cncf.io/v1"}
    metadata = {"name": name} if kind == "Namespace" else {"name": name, "namespace": namespace}
    return {"apiVersion": versions[kind], "kind": kind, "metadata": metadata}


@pytest.mark.parametrize(
    "raw",
    [
        manifest("NetworkAttachmentDefinition", BAD),
        manifest("NetworkAttachmentDefinition", "net-a", namespace=BAD),
        manifest("Namespace", BAD),
        manifest("Pod", BAD),
        manifest("Pod", "web", namespace=BAD),
    ],
    ids=["nad", "nad-namespace", "namespace", "pod", "pod-namespace"],
)
def test_the_directory_feed_refuses_a_manifest_named_a_dot_dot_b(raw: dict[str, Any]) -> None:
    (found,) = manifests.objects_of(raw)
    assert isinstance(found, str), found  # a problem, not an object
    assert BAD in found


def test_the_directory_feed_takes_a_pod_named_as_a_subdomain() -> None:
    (found,) = manifests.objects_of(manifest("Pod", "web.a"))
    assert not isinstance(found, str), found


@pytest.mark.parametrize(
    "nad",
    [{"name": BAD, "namespace": "ns1"}, {"name": "net-a", "namespace": BAD}],
    ids=["name", "namespace"],
)
def test_netattach_validate_refuses_a_nad_named_a_dot_dot_b(nad: dict[str, str]) -> None:
    document = {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": nad,
        "spec": {"config": json.dumps({"cniVersion": "1.0.0", "type": "bridge"})},
    }
    out = io.StringIO()
    assert validate.run(["-"], stdin=io.StringIO(json.dumps(document)), stdout=out) != 0
    assert f"must be a DNS-1123 label ({names.LABEL_RULE}), got '{BAD}'" in out.getvalue()


@pytest.mark.parametrize(
    "extra",
    [
        {"clusterNetwork": f"kube-system/{BAD}"},
        {"clusterNetwork": f"{BAD}/flannel"},
        {"globalNamespaces": [BAD]},
        {"nodeName": BAD},
    ],
    ids=["cluster-network-name", "cluster-network-namespace", "global-namespaces", "node-name"],
)
def test_the_settings_refuse_a_name_a_dot_dot_b(
    extra: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODE_NAME", "node-1")
    raw = {"clusterNetwork": "flannel", "feed": {"directory": "/etc/netattach/cluster"}, **extra}
    with pytest.raises(errors.InvalidNetworkConfigError) as raised:
        settings.parse_settings(raw, source="test")
    assert BAD in raised.value.details


POLICY_FOR = "k8s.v1.cni.cncf.io/policy-for"


def policy(**fields: Any) -> KubeObject:
    """A MultiNetworkPolicy of namespace ns1 named p for net-a; `fields` replace its metadata's
    (`spec` its spec)."""
    spec = fields.pop("spec", {"podSelector": {}})
    metadata: dict[str, Any] = {
        "namespace": "ns1",
        "name": "p",
        "uid": "uid-1",
        "annotations": {POLICY_FOR: "net-a"},
    }
    metadata.update(fields)
    obj: KubeObject = {
        "apiVersion": "k8s.cni.cncf.io/v1beta1",
        "kind": "MultiNetworkPolicy",
        "metadata": metadata,  # type: ignore[typeddict-item]
        "spec": spec,
    }
    return obj


EXISTS = {"key": f"{BAD}/app", "operator": "Exists"}


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(policy(name=BAD), id="name"),
        pytest.param(policy(namespace=BAD), id="namespace"),
        pytest.param(policy(annotations={POLICY_FOR: BAD}), id="policy-for"),
        pytest.param(policy(annotations={POLICY_FOR: f"{BAD}/net-a"}), id="policy-for-namespace"),
        pytest.param(policy(annotations={POLICY_FOR: f"ns1/{BAD}"}), id="policy-for-name"),
        pytest.param(
            policy(spec={"podSelector": {"matchLabels": {f"{BAD}/app": "db"}}}), id="label-key"
        ),
        pytest.param(
            policy(spec={"podSelector": {"matchExpressions": [EXISTS]}}), id="expression-key"
        ),
    ],
)
def test_a_policy_refuses_a_name_a_dot_dot_b(obj: KubeObject) -> None:
    with pytest.raises(errors.InvalidNetworkConfigError, match=re.escape(BAD)):
        policy_model.parse_policy(obj)


def test_a_policy_takes_names_that_are_subdomains() -> None:
    parsed = policy_model.parse_policy(
        policy(
            name="p.v2",
            annotations={POLICY_FOR: "net.a"},
            spec={"podSelector": {"matchLabels": {"example.com/app": "db"}}},
        )
    )
    assert parsed.networks == ("ns1/net.a",)
