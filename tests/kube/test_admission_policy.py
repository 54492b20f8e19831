"""The generated ValidatingAdmissionPolicy on a real API server (SEC-ADMISSION): accepted as
shipped (server-side dry run), and, bound to one test namespace, refusing the attacks when a NAD
is created while admitting the plain uses.

The in-repo fake cannot evaluate CEL, so these tests need a real API server (Kubernetes 1.30 or
later, deploy/crds applied): set NETATTACH_TEST_KUBECONFIG.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from netattach.attach import admission, delegate_rules
from tests.kube import objects
from tests.kube.kube_http import HttpResponse, KubeHttp
from tests.kube.real_api import RealKubeApi, kubeconfig_from_env

ROOT = Path(__file__).resolve().parents[2]
POLICIES = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
# A policy takes effect once the API server's informers have it: wait this long at most.
EFFECT_TIMEOUT = 30.0


@pytest.fixture
def real_api() -> Iterator[RealKubeApi]:
    path = kubeconfig_from_env()
    if path is None:
        pytest.skip("needs a real API server")
    api = RealKubeApi(path)
    try:
        yield api
    finally:
        api.cleanup()


def shipped() -> list[dict[str, Any]]:
    text = (ROOT / "deploy" / "admission-policy.yaml").read_text()
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


def accepted(response: HttpResponse) -> bool:
    return response.status in (200, 201)


@pytest.mark.req("SEC-ADMISSION")
def test_the_shipped_policy_and_binding_are_accepted(real_api: RealKubeApi) -> None:
    vap, binding = shipped()
    http = real_api.http

    for path, obj in ((POLICIES, vap), (BINDINGS, binding)):
        response = http.request("POST", path, query={"dryRun": "All"}, body=obj)
        assert accepted(response), response.body


def nad_dry_run(http: KubeHttp, namespace: str, config: dict[str, Any]) -> HttpResponse:
    name = f"na-{secrets.token_hex(4)}"
    nad = objects.nad(name, namespace, config=json.dumps(config))
    path = f"/apis/k8s.cni.cncf.io/v1/namespaces/{namespace}/network-attachment-definitions"
    return http.request("POST", path, query={"dryRun": "All"}, body=nad)


@pytest.fixture
def bound_policy(real_api: RealKubeApi) -> Iterator[tuple[KubeHttp, str]]:
    """The default delegate policy, created for real and bound to one fresh namespace only."""
    namespace = f"netattach-test-{secrets.token_hex(4)}"
    real_api.create(objects.namespace(namespace))
    name = f"netattach-test-{secrets.token_hex(4)}"
    vap, binding = admission.build_policy(delegate_rules.DEFAULT_POLICY, name=name)
    binding["spec"]["matchResources"] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    }
    http = real_api.http
    for path, obj in ((POLICIES, vap), (BINDINGS, binding)):
        response = http.request("POST", path, body=obj)
        assert accepted(response), response.body
    try:
        yield http, namespace
    finally:
        http.request("DELETE", f"{BINDINGS}/{name}")
        http.request("DELETE", f"{POLICIES}/{name}")


@pytest.mark.req("SEC-ADMISSION")
def test_a_bound_policy_refuses_the_attacks_and_admits_the_plain_uses(
    bound_policy: tuple[KubeHttp, str],
) -> None:
    http, namespace = bound_policy
    host_device = {"cniVersion": "1.0.0", "type": "host-device", "device": "eth0"}
    deadline = time.monotonic() + EFFECT_TIMEOUT
    while accepted(response := nad_dry_run(http, namespace, host_device)):
        assert time.monotonic() < deadline, "the policy never took effect"
        time.sleep(1.0)
    assert response.status == 422, response.body
    assert f"NetworkAttachmentDefinition {namespace}/" in response.json()["message"]
    assert "plugin type" in response.json()["message"]

    attacks: list[dict[str, Any]] = [
        {"type": "bridge", "bridge": "cni0"},
        {"type": "macvlan", "ipam": {"type": "host-local", "dataDir": "/etc/cni/net.d"}},
        {"type": "tuning", "sysctl": {"kernel.core_pattern": "|/x"}},
    ]
    for config in attacks:
        response = nad_dry_run(http, namespace, {"cniVersion": "1.0.0", **config})
        assert response.status == 422, (config, response.body)
    plain = {"cniVersion": "1.0.0", "type": "macvlan", "master": "eth1"}
    response = nad_dry_run(http, namespace, plain)
    assert accepted(response), response.body
