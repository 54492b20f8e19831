"""deploy-before-1.30/: `kubectl apply -k` for a cluster older than Kubernetes 1.30, whose API
server serves no ValidatingAdmissionPolicy v1: everything of deploy/ (its image setting too)
but deploy/admission-policy.yaml, with nothing in the checkout to edit (KUBE-DEPLOY).

kustomize refuses an overlay inside its base's directory (a cycle), so it sits beside deploy/.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest
import yaml

from tests.repo.deploy_files import DEPLOY, render

OVERLAY = DEPLOY.parent / "deploy-before-1.30"


def key(doc: dict[str, Any]) -> tuple[str, str]:
    return (doc["kind"], doc["metadata"]["name"])


def admission_objects() -> list[tuple[str, str]]:
    docs = yaml.safe_load_all((DEPLOY / "admission-policy.yaml").read_text())
    return [key(doc) for doc in docs if doc]


@pytest.mark.req("KUBE-DEPLOY")
def test_the_overlay_deletes_exactly_the_admission_policy_objects() -> None:
    raw = yaml.safe_load((OVERLAY / "kustomization.yaml").read_text())
    deleted = []
    for entry in raw["patches"]:
        patch = yaml.safe_load(entry["patch"])
        assert patch["$patch"] == "delete"
        deleted.append(key(patch))

    assert raw["resources"] == ["../deploy"]
    assert sorted(deleted) == sorted(admission_objects())
    assert {kind for kind, _ in admission_objects()} == {
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }


@pytest.mark.req("KUBE-DEPLOY")
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_renders_deploy_without_the_admission_policy() -> None:
    done = subprocess.run(
        ["kubectl", "kustomize", str(OVERLAY)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    theirs = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    wanted = [doc for doc in render() if key(doc) not in admission_objects()]

    assert sorted(theirs, key=key) == sorted(wanted, key=key)
    assert not any(doc["apiVersion"].startswith("admissionregistration.") for doc in theirs)
