"""The generated ValidatingAdmissionPolicy on a real API server (SEC-ADMISSION): accepted as
shipped (server-side dry run), and, created for real and bound to the test's namespaces only,
refusing every attack of tests/attack_corpus.py that a NAD alone carries, while admitting the
plain uses, in each of its three forms:

- `build`: `admission.build_policy` of the corpus policy (deploy/configmap.yaml's lists plus
  namespace grants, `attack_corpus.corpus_policy()`);
- `cli`: `netattach admission-policy --config` of a settings file with that policy;
- `deploy`: deploy/admission-policy.yaml as shipped (no grants: the attacks judged by the
  cluster-wide lists, those without namespace labels).

The in-repo fake cannot evaluate CEL: these run on the tier's real server (tests/kube/cluster.py)
or NETATTACH_TEST_KUBECONFIG's, and skip on a server without admissionregistration.k8s.io/v1
ValidatingAdmissionPolicy (Kubernetes before 1.30).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from netattach.cluster import model
from netattach.guard import admission, delegate_policy
from tests import attack_corpus
from tests.attack_corpus import ALLOWED, ATTACKS, Attack
from tests.kube import objects
from tests.kube.conftest import real_kubeconfig
from tests.kube.kube_http import HttpResponse, KubeHttp
from tests.kube.real_api import RealKubeApi

ROOT = Path(__file__).resolve().parents[2]
GROUP = "/apis/admissionregistration.k8s.io/v1"
POLICIES = f"{GROUP}/validatingadmissionpolicies"
BINDINGS = f"{GROUP}/validatingadmissionpolicybindings"
# A policy takes effect once the API server's informers have it: wait this long at most.
EFFECT_TIMEOUT = 30.0
CORPUS_LABEL = "netattach.test/corpus"
# Refused by every form's cluster-wide lists: host-device is granted to no namespace there.
CANARY: Mapping[str, Any] = {"type": "host-device", "device": "eth0"}
SOURCES = ("build", "cli", "deploy")


def shipped() -> list[dict[str, Any]]:
    text = (ROOT / "deploy" / "admission-policy.yaml").read_text(encoding="utf-8")
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


def accepted(response: HttpResponse) -> bool:
    return response.status in (200, 201)


def _real_api(request: pytest.FixtureRequest) -> Iterator[RealKubeApi]:
    path = real_kubeconfig(request)
    if path is None:
        pytest.skip("needs a real API server: the in-repo fake cannot evaluate CEL")
    api = RealKubeApi(path)
    try:
        resources = api.http.get(GROUP)
        names = [r["name"] for r in resources.json().get("resources", [])] if resources else []
        if resources.status != 200 or "validatingadmissionpolicies" not in names:
            pytest.skip("the server has no admissionregistration.k8s.io/v1 "
                        "ValidatingAdmissionPolicy (Kubernetes before 1.30)")  # fmt: skip
        yield api
    finally:
        api.cleanup()


@pytest.fixture
def real_api(request: pytest.FixtureRequest) -> Iterator[RealKubeApi]:
    yield from _real_api(request)


def _documents(source: str, name: str, tmp: Path) -> list[dict[str, Any]]:
    if source == "build":
        return admission.build_policy(attack_corpus.corpus_policy(), name=name)
    if source == "cli":
        settings = tmp / "settings.yaml"
        deploy = yaml.safe_load((ROOT / "deploy" / "configmap.yaml").read_text(encoding="utf-8"))
        config = yaml.safe_load(deploy["data"]["settings.yaml"])
        config["delegatePolicy"] = attack_corpus.corpus_settings()
        settings.write_text(yaml.safe_dump(config), encoding="utf-8")
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "netattach.cli.main",
                "admission-policy",
                "--config",
                str(settings),
                "--name",
                name,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return [doc for doc in yaml.safe_load_all(done.stdout) if doc is not None]
    vap, binding = shipped()
    vap["metadata"]["name"] = binding["metadata"]["name"] = name
    binding["spec"]["policyName"] = name
    return [vap, binding]


class BoundPolicy:
    """One form of the policy, created for real and bound to namespaces labelled with a token of
    its own: one namespace per set of namespace labels the corpus uses."""

    def __init__(self, api: RealKubeApi, source: str, tmp: Path) -> None:
        self.http: KubeHttp = api.http
        self.source = source
        self.name = f"netattach-test-{source}-{secrets.token_hex(3)}"
        token = secrets.token_hex(4)
        self.namespaces: dict[frozenset[tuple[str, str]], str] = {}
        for attack in (*ATTACKS, *ALLOWED):
            key = frozenset(attack.labels.items())
            if key not in self.namespaces:
                name = f"netattach-test-{secrets.token_hex(4)}"
                labels = {CORPUS_LABEL: token, **attack.labels}
                api.create(objects.namespace(name, labels=labels))
                self.namespaces[key] = name
        vap, binding = _documents(source, self.name, tmp)
        binding["spec"]["matchResources"] = {
            "namespaceSelector": {"matchLabels": {CORPUS_LABEL: token}}
        }
        for path, obj in ((POLICIES, vap), (BINDINGS, binding)):
            response = self.http.post(path, obj)
            assert accepted(response), response.body
        self._wait_in_effect()

    def namespace(self, attack: Attack) -> str:
        return self.namespaces[frozenset(attack.labels.items())]

    def dry_run(self, attack: Attack) -> HttpResponse:
        namespace = self.namespace(attack)
        nad = objects.nad(
            f"na-{secrets.token_hex(4)}", namespace, config=attack_corpus.config_text(attack)
        )
        path = f"/apis/k8s.cni.cncf.io/v1/namespaces/{namespace}/network-attachment-definitions"
        return self.http.request("POST", path, query={"dryRun": "All"}, body=nad)

    def _wait_in_effect(self) -> None:
        canary = Attack("canary", CANARY)
        deadline = time.monotonic() + EFFECT_TIMEOUT
        while accepted(response := self.dry_run(canary)):
            assert time.monotonic() < deadline, "the policy never took effect"
            time.sleep(0.5)
        assert response.status == 422, response.body

    def delete(self) -> None:
        self.http.request("DELETE", f"{BINDINGS}/{self.name}")
        self.http.request("DELETE", f"{POLICIES}/{self.name}")


class Forms:
    """Each form of the policy, bound on first use."""

    def __init__(self, api: RealKubeApi, tmp: pytest.TempPathFactory) -> None:
        self.api = api
        self.tmp = tmp
        self.bound: dict[str, BoundPolicy] = {}

    def __getitem__(self, source: str) -> BoundPolicy:
        if source not in self.bound:
            self.bound[source] = BoundPolicy(self.api, source, self.tmp.mktemp(source))
        return self.bound[source]

    def delete(self) -> None:
        for policy in self.bound.values():
            policy.delete()


@pytest.fixture(scope="module")
def bound(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Forms]:
    """The forms of the policy, each bound on first use; all deleted at the end of the module."""
    for api in _real_api(request):
        forms = Forms(api, tmp_path_factory)
        try:
            yield forms
        finally:
            forms.delete()


def _cases(entries: list[Attack]) -> list[Any]:
    """(form, attack) pairs: `deploy` has no grants, so it takes the entries without labels."""
    return [
        pytest.param(source, attack, id=f"{source}-{attack.name}")
        for source in SOURCES
        for attack in entries
        if source != "deploy" or not attack.labels
    ]


@pytest.mark.req("SEC-ADMISSION")
def test_the_shipped_policy_and_binding_are_accepted(real_api: RealKubeApi) -> None:
    vap, binding = shipped()
    for path, obj in ((POLICIES, vap), (BINDINGS, binding)):
        response = real_api.http.request("POST", path, query={"dryRun": "All"}, body=obj)
        assert accepted(response), response.body


@pytest.mark.req("SEC-ADMISSION")
@pytest.mark.parametrize(("source", "attack"), _cases([a for a in ATTACKS if a.admission]))
def test_the_policy_refuses_an_attack(bound: Forms, source: str, attack: Attack) -> None:
    policy = bound[source]
    response = policy.dry_run(attack)
    assert response.status == 422, (attack.name, attack.does, response.body)
    message = response.json()["message"]
    assert f"NetworkAttachmentDefinition {policy.namespace(attack)}/" in message
    assert "ValidatingAdmissionPolicy" in message


@pytest.mark.req("SEC-ADMISSION")
@pytest.mark.parametrize(("source", "allowed"), _cases(ALLOWED))
def test_the_policy_admits_the_plain_uses(bound: Forms, source: str, allowed: Attack) -> None:
    response = bound[source].dry_run(allowed)
    assert accepted(response), response.body


@pytest.mark.req("SEC-ADMISSION")
def test_the_policy_refuses_an_update_too(bound: Forms) -> None:
    """A NAD created plain and then changed into an attack: the policy matches UPDATE."""
    policy = bound["build"]
    plain = ALLOWED[1]
    namespace = policy.namespace(plain)
    path = f"/apis/k8s.cni.cncf.io/v1/namespaces/{namespace}/network-attachment-definitions"
    created = policy.http.post(
        path, objects.nad("plain", namespace, config=attack_corpus.config_text(plain))
    )
    assert created.status == 201, created.body
    nad = created.json()
    nad["spec"]["config"] = attack_corpus.config_text(
        next(a for a in ATTACKS if a.name == "BRIDGE")
    )
    response = policy.http.put(f"{path}/plain", nad)
    assert response.status == 422, response.body


# DEV-RESOURCE: a namespace's NADs name only the device resources its lists grant.
RESOURCE_LISTS: Mapping[str, Any] = {
    "types": ["sriov"],
    "resourceName": ["intel.com/sriov_*", "!intel.com/sriov_mgmt"],
    "namespaces": [
        {
            "namespaceSelector": {"matchLabels": {"netattach.test/lab": "yes"}},
            "resourceName": ["intel.com/sriov_lab"],
        }
    ],
}
SRIOV_CONFIG = json.dumps({"cniVersion": "1.0.0", "name": "na-sriov", "type": "sriov"})


@pytest.mark.req("DEV-RESOURCE")
@pytest.mark.req("SEC-ADMISSION")
def test_the_policy_refuses_a_resource_name_the_namespace_is_not_granted(
    real_api: RealKubeApi,
) -> None:
    problems: list[str] = []
    policy = delegate_policy.parse_policy(RESOURCE_LISTS, "delegatePolicy", problems)
    assert policy is not None
    assert problems == []
    name = f"netattach-test-resource-{secrets.token_hex(3)}"
    token = secrets.token_hex(4)
    plain, lab = f"na-plain-{token}", f"na-lab-{token}"
    real_api.create(objects.namespace(plain, labels={CORPUS_LABEL: token}))
    real_api.create(
        objects.namespace(lab, labels={CORPUS_LABEL: token, "netattach.test/lab": "yes"})
    )
    vap, binding = admission.build_policy(policy, name=name)
    binding["spec"]["matchResources"] = {
        "namespaceSelector": {"matchLabels": {CORPUS_LABEL: token}}
    }

    def dry_run(namespace: str, resource: str | None) -> HttpResponse:
        annotations = None if resource is None else {model.RESOURCE_ANNOTATION: resource}
        nad = objects.nad(
            f"na-{secrets.token_hex(4)}", namespace, config=SRIOV_CONFIG, annotations=annotations
        )
        path = f"/apis/k8s.cni.cncf.io/v1/namespaces/{namespace}/network-attachment-definitions"
        return real_api.http.request("POST", path, query={"dryRun": "All"}, body=nad)

    try:
        for path, obj in ((POLICIES, vap), (BINDINGS, binding)):
            response = real_api.http.post(path, obj)
            assert accepted(response), response.body
        deadline = time.monotonic() + EFFECT_TIMEOUT
        while accepted(response := dry_run(plain, "nvidia.com/gpu")):
            assert time.monotonic() < deadline, "the policy never took effect"
            time.sleep(0.5)

        assert response.status == 422, response.body
        message = response.json()["message"]
        assert f"NetworkAttachmentDefinition {plain}/" in message
        assert message.endswith(
            ": resourceName 'nvidia.com/gpu' is not allowed by delegatePolicy.resourceName "
            "[intel.com/sriov_*, !intel.com/sriov_mgmt]"
        )
        for namespace, resource, admitted in [
            (plain, "intel.com/sriov_netdevice", True),
            (plain, " intel.com/sriov_netdevice\n", True),
            (plain, "intel.com/sriov_mgmt", False),
            (plain, None, True),
            (plain, "", True),
            (lab, "intel.com/sriov_lab", True),
            (lab, "intel.com/sriov_netdevice", False),
        ]:
            response = dry_run(namespace, resource)
            assert accepted(response) is admitted, (namespace, resource, response.body)
    finally:
        real_api.http.request("DELETE", f"{BINDINGS}/{name}")
        real_api.http.request("DELETE", f"{POLICIES}/{name}")
