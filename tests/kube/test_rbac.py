"""deploy/rbac.yaml is enough for the daemon, and no more, on a real API server with RBAC on.

deploy/'s ServiceAccount, ClusterRole and ClusterRoleBinding are created (renamed, the account in
the test's namespace), the account gets a token through the TokenRequest API, and the real
`KubeFeed` runs as it: it lists and watches every kind it serves from, reads a pod and a NAD
directly, publishes and removes a pod's network-status, and records an Event. What the role does
not grant is refused (403). The in-repo fake has no RBAC: these need a real server.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from netattach.cluster import model
from tests.kube import objects
from tests.kube.api import KubeApi
from tests.kube.feed_harness import node_name, run_bounded, running_feed
from tests.kube.kube_http import KubeHttp
from tests.kube.real_api import RealKubeApi, account_kubeconfig, connection_from_kubeconfig

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
STATUS = model.STATUS_ANNOTATION
ENTRIES: list[dict[str, object]] = [{"name": "cluster-default", "default": True}]
# RBAC changes reach the authorizer through its informers: wait this long at most.
EFFECT_TIMEOUT = 15.0


def deploy_rbac() -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text(encoding="utf-8"))
    return {doc["kind"]: doc for doc in docs if doc}


@pytest.fixture
def daemon_kubeconfig(fake_api: KubeApi, kube_namespace: str, tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig authenticating as deploy/'s ServiceAccount, bound to deploy/'s ClusterRole."""
    if not isinstance(fake_api, RealKubeApi):
        pytest.skip("needs a real API server: the in-repo fake has no RBAC")
    http, ns = fake_api.http, kube_namespace
    name = f"netattach-test-{secrets.token_hex(4)}"
    rbac = deploy_rbac()
    account = rbac["ServiceAccount"]
    account["metadata"] = {"name": "netattach", "namespace": ns}
    role = rbac["ClusterRole"]
    role["metadata"] = {"name": name}
    binding = rbac["ClusterRoleBinding"]
    binding["metadata"] = {"name": name}
    binding["roleRef"]["name"] = name
    (subject,) = binding["subjects"]
    subject["namespace"] = ns
    created = [
        (f"/api/v1/namespaces/{ns}/serviceaccounts", account),
        (f"{RBAC}/clusterroles", role),
        (f"{RBAC}/clusterrolebindings", binding),
    ]
    try:
        for path, obj in created:
            response = http.post(path, obj)
            assert response.status == 201, response.body
        config = account_kubeconfig(
            fake_api, ns, "netattach", tmp_path / "daemon.kubeconfig", "/api/v1/pods",
            EFFECT_TIMEOUT,
        )  # fmt: skip
        yield config
    finally:
        http.request("DELETE", f"{RBAC}/clusterrolebindings/{name}")
        http.request("DELETE", f"{RBAC}/clusterroles/{name}")


@pytest.mark.req("KUBE-REAL", "KUBE-DEPLOY")
def test_the_daemons_role_lets_the_feed_do_all_it_does(
    fake_api: KubeApi, daemon_kubeconfig: Path, kube_namespace: str
) -> None:
    ns, node = kube_namespace, node_name()
    pod = fake_api.create(objects.pod("web", ns, node_name=node))
    uid = pod["metadata"]["uid"]
    fake_api.create(objects.nad("blue", ns, config={"cniVersion": "1.0.0", "type": "macvlan"}))
    fake_api.create(objects.policy("deny", ns))

    async def body() -> None:
        async with running_feed(daemon_kubeconfig, node) as (feed, view):
            assert view.lookup_pod(ns, "web") is not None
            assert view.lookup_namespace(ns) is not None
            assert {model.name_of(o) for o in view.objects(model.NAD)} >= {"blue"}
            assert {model.name_of(o) for o in view.objects(model.POLICY)} >= {"deny"}
            assert await feed.fetch_pod(ns, "web") is not None
            assert await feed.fetch_nad(ns, "blue") is not None
            await feed.publish_status(ns, "web", ENTRIES, uid=uid)
            published = fake_api.get("Pod", "web", ns)
            assert published is not None
            assert STATUS in published["metadata"]["annotations"]
            await feed.record_event(ns, "web", reason="AddedInterface", message="eth0", uid=uid)
            assert await feed.flush_events(5.0)
            await feed.remove_status(ns, "web", uid=uid)

    run_bounded(body())
    after = fake_api.get("Pod", "web", ns)
    assert after is not None
    assert STATUS not in (after["metadata"].get("annotations") or {})
    assert [e["reason"] for e in fake_api.events_for(ns, "web")] == ["AddedInterface"]


@pytest.mark.req("KUBE-DEPLOY")
def test_the_daemons_role_grants_nothing_more(
    fake_api: KubeApi, daemon_kubeconfig: Path, kube_namespace: str
) -> None:
    daemon = KubeHttp(connection_from_kubeconfig(daemon_kubeconfig))
    ns = kube_namespace
    fake_api.create(objects.nad("blue", ns, config={"cniVersion": "1.0.0", "type": "macvlan"}))
    nads = f"/apis/k8s.cni.cncf.io/v1/namespaces/{ns}/network-attachment-definitions"
    refused = [
        daemon.post(f"/api/v1/namespaces/{ns}/pods", objects.pod("new", ns)),
        daemon.get(f"/api/v1/namespaces/{ns}/secrets"),
        daemon.get(f"/api/v1/namespaces/{ns}/configmaps"),
        daemon.delete(f"/api/v1/namespaces/{ns}/pods/web"),
        daemon.post(nads, objects.nad("red", ns, config={"cniVersion": "1.0.0"})),
        daemon.patch(
            f"{nads}/blue", {"metadata": {"labels": {"a": "b"}}}, "application/merge-patch+json"
        ),
        daemon.get("/api/v1/nodes"),
    ]
    assert [r.status for r in refused] == [403] * len(refused), [r.body for r in refused]
