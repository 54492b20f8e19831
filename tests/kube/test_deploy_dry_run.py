"""`kubectl apply -k deploy/` as a user runs it, server-side dry-run on a real API server (named by
NETATTACH_TEST_KUBECONFIG): every object of the kustomization is admitted, nothing is created.
The in-repo fake serves no discovery or OpenAPI, which kubectl needs, so this needs a real one."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.kube.real_api import kubeconfig_from_env

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


@pytest.mark.req("KUBE-DEPLOY")
@pytest.mark.skipif(
    kubeconfig_from_env() is None, reason="needs a real API server (NETATTACH_TEST_KUBECONFIG)"
)
def test_kubectl_apply_k_deploy_passes_a_server_side_dry_run() -> None:
    kubeconfig = kubeconfig_from_env()
    assert kubeconfig is not None
    if shutil.which("kubectl") is None:
        pytest.fail("NETATTACH_TEST_KUBECONFIG is set but kubectl is not installed")
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(DEPLOY)], capture_output=True, text=True, check=True
    ).stdout
    wanted = sorted(
        f"{doc['kind'].lower()}/{doc['metadata']['name']}"
        for doc in yaml.safe_load_all(rendered)
        if doc
    )

    done = subprocess.run(
        [
            "kubectl",
            "--kubeconfig",
            str(kubeconfig),
            "apply",
            "-k",
            str(DEPLOY),
            "--dry-run=server",
            "-o",
            "name",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    # `-o name` prints kind.group/name; compare kinds and names
    admitted = sorted(
        f"{kind.split('.')[0]}/{name}"
        for kind, name in (line.split("/", 1) for line in done.stdout.split())
    )
    assert admitted == wanted
