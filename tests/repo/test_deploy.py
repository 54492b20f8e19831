"""deploy/: every manifest validates against the Kubernetes schemas, and they agree with each
other and with netattach's settings (KUBE-DEPLOY)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from netattach.settings import feed as feed_settings
from netattach.settings import settings
from tests.repo.deploy_files import documents, one

KUBERNETES_VERSION = "1.30"


@pytest.mark.req("KUBE-DEPLOY")
@pytest.mark.parametrize(
    ("name", "doc"), documents(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_manifest_validates_against_the_kubernetes_schema(
    name: str, doc: dict[str, Any]
) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


@pytest.mark.req("KUBE-DEPLOY")
def test_rbac_is_least_privilege() -> None:
    rules = one("ClusterRole")["rules"]
    granted = {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert not any("*" in part for entry in granted for part in entry)
    writes = {(g, r, v) for g, r, v in granted if v not in ("get", "list", "watch")}
    assert writes == {
        ("", "pods", "patch"),
        ("", "events", "create"),
        ("", "events", "patch"),
        ("events.k8s.io", "events", "create"),
        ("events.k8s.io", "events", "patch"),
        # IPAM-UNIQUE: the blocks of netattach's IPAM, its own kind, nothing else's
        ("ipam.netattach.io", "ipblocks", "create"),
        ("ipam.netattach.io", "ipblocks", "patch"),
        ("ipam.netattach.io", "ipblocks", "delete"),
        # IPAM-CLAIM: the addresses given, on the status of the IPAMClaim a pod names
        ("k8s.cni.cncf.io", "ipamclaims/status", "patch"),
    }
    binding = one("ClusterRoleBinding")
    account = one("ServiceAccount")
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": account["metadata"]["name"],
            "namespace": account["metadata"]["namespace"],
        }
    ]


def granted(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


@pytest.mark.req("KUBE-DEPLOY")
@pytest.mark.req("POL-CTRL")
def test_the_policy_controllers_rbac_is_least_privilege() -> None:
    name = "netattach-policy-controller"
    cluster = granted(one("ClusterRole", name)["rules"])
    assert not any("*" in part for entry in cluster for part in entry)
    assert {(g, r, v) for g, r, v in cluster if v not in ("get", "list", "watch")} == {
        ("policy.netattach.io", "policypeergroups", verb) for verb in ("create", "patch", "delete")
    }
    lease = one("Role", name)
    assert lease["metadata"]["namespace"] == "kube-system"
    assert granted(lease["rules"]) == {
        ("coordination.k8s.io", "leases", verb) for verb in ("get", "create", "update")
    }
    account = one("ServiceAccount", name)
    for binding in (one("ClusterRoleBinding", name), one("RoleBinding", name)):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name,
                                        "namespace": account["metadata"]["namespace"]}]  # fmt: skip
    pod = one("Deployment", name)["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == name
    (container,) = pod["containers"]
    assert container["command"] == ["netattach", "policy-controller"]
    assert (
        container["image"] == one("DaemonSet")["spec"]["template"]["spec"]["containers"][0]["image"]
    )


@pytest.mark.req("KUBE-DEPLOY")
def test_the_daemonset_serves_what_the_settings_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "node-1")
    raw = yaml.safe_load(one("ConfigMap")["data"]["settings.yaml"])
    cfg = settings.parse_settings(raw, source="deploy/configmap.yaml")
    pod = one("DaemonSet")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["hostNetwork"] is True
    assert pod["serviceAccountName"] == one("ServiceAccount")["metadata"]["name"]
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in (
        container["env"]
    )
    host, port = cfg.daemon.metrics.address.rsplit(":", 1)
    for probe, endpoint in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"host": host, "path": endpoint, "port": int(port)}
    assert set(container["resources"]) == {"requests", "limits"}
    mounts = [Path(m["mountPath"]) for m in container["volumeMounts"]]
    needed = [
        cfg.daemon.socket.parent,
        cfg.daemon.cni_conf_dir,
        cfg.daemon.cni_bin_dir,
        cfg.runtime.state_dir,
        cfg.networks.networks_dir,
        *cfg.runtime.bin_dirs,
    ]
    for path in needed:
        assert any(path == m or m in path.parents for m in mounts), f"{path} is not mounted"
    assert container["command"][-1].startswith("/usr/local/lib/netattach/")
    assert isinstance(cfg.feed, feed_settings.KubernetesFeed)
