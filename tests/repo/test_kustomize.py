"""deploy/kustomization.yaml: `kubectl apply -k deploy/` installs all of netattach, and the image
is set in one place (KUBE-DEPLOY).

`deploy_files.render()` does what kustomize does with this file's two fields, so the checks need
no kustomize; when `kubectl` is on the PATH its own rendering must be the same objects.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.repo.deploy_files import DEPLOY, render, split_image

KUSTOMIZATION = DEPLOY / "kustomization.yaml"
# What a cluster needs, by kind: the CRDs, the daemon's identity and rights, its settings, itself,
# and the admission policy bounding what NADs may ask of it (SEC-ADMISSION).
WANTED_KINDS = [
    *["CustomResourceDefinition"] * 5,
    # the node daemon's
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "ConfigMap",
    "DaemonSet",
    # the policy controller's
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "Deployment",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
]


def kustomization() -> dict[str, Any]:
    raw = yaml.safe_load(KUSTOMIZATION.read_text())
    assert isinstance(raw, dict)
    return raw


def manifests_on_disk() -> set[str]:
    return {
        str(path.relative_to(DEPLOY))
        for path in DEPLOY.rglob("*.yaml")
        if path.name != "kustomization.yaml"
    }


@pytest.mark.req("KUBE-DEPLOY")
def test_the_kustomization_lists_every_manifest_in_deploy_and_nothing_else() -> None:
    listed = kustomization()["resources"]
    assert len(listed) == len(set(listed))
    assert set(listed) == manifests_on_disk()
    for resource in listed:
        assert (DEPLOY / resource).is_file(), resource


@pytest.mark.req("KUBE-DEPLOY")
def test_it_renders_the_crds_rbac_configmap_and_daemonset_crds_first() -> None:
    docs = render()
    assert [doc["kind"] for doc in docs] == WANTED_KINDS
    names = sorted(doc["metadata"]["name"] for doc in docs[:5])
    assert names == [
        "ipamclaims.k8s.cni.cncf.io",
        "ipblocks.ipam.netattach.io",
        "multi-networkpolicies.k8s.cni.cncf.io",
        "network-attachment-definitions.k8s.cni.cncf.io",
        "policypeergroups.policy.netattach.io",
    ]
    assert {doc["metadata"]["name"] for doc in docs[5:10]} == {"netattach"}
    assert {doc["metadata"]["name"] for doc in docs[10:-2]} == {"netattach-policy-controller"}
    assert {doc["metadata"]["name"] for doc in docs[-2:]} == {"netattach-delegate-policy"}
    namespaced = {"ServiceAccount", "ConfigMap", "DaemonSet", "Role", "RoleBinding", "Deployment"}
    assert {d["metadata"]["namespace"] for d in docs if d["kind"] in namespaced} == {"kube-system"}


@pytest.mark.req("KUBE-DEPLOY")
def test_the_image_is_set_in_one_place() -> None:
    """The images rule matches the DaemonSet's image, so its newName/newTag are what nodes run."""
    (rule,) = kustomization()["images"]
    (daemonset,) = [d for d in yaml.safe_load_all((DEPLOY / "daemonset.yaml").read_text()) if d]
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    assert split_image(container["image"])[0] == rule["name"]

    (rendered,) = [doc for doc in render() if doc["kind"] == "DaemonSet"]
    (out,) = rendered["spec"]["template"]["spec"]["containers"]
    assert out["image"] == f"{rule['newName']}:{rule['newTag']}"


def test_a_user_setting_the_image_changes_the_images_of_netattachs_pods_only(
    tmp_path: Path,
) -> None:
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy)
    raw = kustomization()
    raw["images"][0].update(newName="registry.example.com/netattach", newTag="9.9.9")
    (copy / "kustomization.yaml").write_text(yaml.safe_dump(raw))

    before, after = render(), render(copy)

    changed = [(a["kind"], b["kind"]) for a, b in zip(before, after, strict=True) if a != b]
    assert changed == [("DaemonSet", "DaemonSet"), ("Deployment", "Deployment")]
    for workload in (doc for doc in after if doc["kind"] in ("DaemonSet", "Deployment")):
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        assert container["image"] == "registry.example.com/netattach:9.9.9"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_kustomize_renders_the_same_objects() -> None:
    done = subprocess.run(
        ["kubectl", "kustomize", str(DEPLOY)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    theirs = [doc for doc in yaml.safe_load_all(done.stdout) if doc]

    def key(doc: dict[str, Any]) -> tuple[str, str]:
        return (doc["kind"], doc["metadata"]["name"])

    assert sorted(theirs, key=key) == sorted(render(), key=key)
