"""deploy/policy-controller.yaml's RBAC is enough for the policy controller, and no more, on a real
API server with RBAC on (POL-CTRL, KUBE-DEPLOY).

Its ServiceAccount, ClusterRole and binding, and its Lease Role and binding, are created (renamed,
the account and the Lease's Role in the test's namespace); the account gets a token through the
TokenRequest API, and the real controller runs as it: it takes the Lease, lists and watches what
it reads, and makes, replaces and deletes PolicyPeerGroups. What the roles do not grant is
refused (403).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from netattach.controller import service
from tests.kube.api import KubeApi
from tests.kube.kube_http import KubeHttp
from tests.kube.policy_scene import FAST, PATH, Loop, build_scene, loop, wait_for
from tests.kube.real_api import RealKubeApi, account_kubeconfig, connection_from_kubeconfig

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
ACCOUNT = "netattach-policy-controller"

pytestmark = [pytest.mark.req("POL-CTRL"), pytest.mark.req("KUBE-DEPLOY"), pytest.mark.timeout(300)]


def controller_rbac() -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all((DEPLOY / "policy-controller.yaml").read_text(encoding="utf-8"))
    return {doc["kind"]: doc for doc in docs if doc and doc["kind"] != "Deployment"}


@pytest.fixture
def controller_kubeconfig(fake_api: KubeApi, kube_namespace: str, tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig authenticating as deploy/'s controller ServiceAccount, bound to its roles
    (the Lease's Role in the test's namespace)."""
    if not isinstance(fake_api, RealKubeApi):
        pytest.skip("needs a real API server: the in-repo fake has no RBAC")
    http, ns = fake_api.http, kube_namespace
    name = f"netattach-test-{secrets.token_hex(4)}"
    rbac = controller_rbac()
    rbac["ServiceAccount"]["metadata"] = {"name": ACCOUNT, "namespace": ns}
    for kind in ("ClusterRole", "ClusterRoleBinding"):
        rbac[kind]["metadata"] = {"name": name}
    for kind in ("Role", "RoleBinding"):
        rbac[kind]["metadata"] = {"name": name, "namespace": ns}
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        rbac[kind]["roleRef"]["name"] = name
        (subject,) = rbac[kind]["subjects"]
        subject["namespace"] = ns
    created = [
        (f"/api/v1/namespaces/{ns}/serviceaccounts", rbac["ServiceAccount"]),
        (f"{RBAC}/clusterroles", rbac["ClusterRole"]),
        (f"{RBAC}/clusterrolebindings", rbac["ClusterRoleBinding"]),
        (f"{RBAC}/namespaces/{ns}/roles", rbac["Role"]),
        (f"{RBAC}/namespaces/{ns}/rolebindings", rbac["RoleBinding"]),
    ]
    try:
        for path, obj in created:
            response = http.post(path, obj)
            assert response.status == 201, response.body
        config = account_kubeconfig(fake_api, ns, ACCOUNT, tmp_path / "controller.kubeconfig", PATH)
        yield config
    finally:
        http.request("DELETE", f"{RBAC}/clusterrolebindings/{name}")
        http.request("DELETE", f"{RBAC}/clusterroles/{name}")
        for item in http.get(PATH).json().get("items") or []:
            http.request("DELETE", f"{PATH}/{item['metadata']['name']}")


def test_the_controllers_roles_let_it_lead_and_publish(
    fake_api: RealKubeApi, controller_kubeconfig: Path, kube_namespace: str, loop: Loop
) -> None:
    scene = build_scene(fake_api)
    controller = service.PolicyController(
        kubeconfig=controller_kubeconfig, identity="rbac", lease_namespace=kube_namespace,
        timing=FAST,
    )  # fmt: skip
    run = loop.start(controller.run())
    try:
        wait_for("the groups published under deploy/'s roles", scene.converged, 60.0)
        assert controller.leading.is_set()
        scene.relabel(f"{scene.ns[1]}/batch", {"app": "web"})  # a shard made again
        wait_for("the change published", scene.converged, 60.0)
        assert not run.done(), run.exception() if run.done() else None
    finally:
        run.cancel()
        loop.run(controller.aclose())


def test_the_controllers_roles_grant_nothing_more(
    fake_api: RealKubeApi, controller_kubeconfig: Path, kube_namespace: str
) -> None:
    account = KubeHttp(connection_from_kubeconfig(controller_kubeconfig))
    ns = kube_namespace
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "x"}}
    refused = [
        account.post(
            f"/api/v1/namespaces/{ns}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p"},
                "spec": {"containers": []},
            },
        ),
        account.patch(
            f"/api/v1/namespaces/{ns}",
            {"metadata": {"labels": {"a": "b"}}},
            "application/merge-patch+json",
        ),
        account.get(f"/api/v1/namespaces/{ns}/secrets"),
        account.get("/api/v1/nodes"),
        account.post("/apis/coordination.k8s.io/v1/namespaces/default/leases", lease),
        account.post(
            f"/apis/k8s.cni.cncf.io/v1beta1/namespaces/{ns}/multi-networkpolicies",
            {
                "apiVersion": "k8s.cni.cncf.io/v1beta1",
                "kind": "MultiNetworkPolicy",
                "metadata": {"name": "p"},
                "spec": {"podSelector": {}},
            },
        ),
    ]
    assert [r.status for r in refused] == [403] * len(refused), [r.body for r in refused]


__all__ = ["loop"]  # the fixture this module uses
