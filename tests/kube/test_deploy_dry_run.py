"""`kubectl apply -k deploy/` (and `deploy-before-1.30/`) as a user runs it, server-side dry-run
on a real API server (the tier's, tests/kube/cluster.py, or NETATTACH_TEST_KUBECONFIG's): every
object of the kustomization is admitted, nothing is created. kubectl is the one `make k8s` built
beside the server (else the one on PATH). The in-repo fake serves no discovery or OpenAPI, which
kubectl needs, so this needs a real server."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.kube.cluster import build_dir
from tests.kube.conftest import real_kubeconfig

ROOT = Path(__file__).resolve().parents[2]
KUSTOMIZATIONS = ("deploy", "deploy-before-1.30")


def kubectl() -> str:
    built = build_dir() / "kubectl"
    if built.is_file():
        return str(built)
    found = shutil.which("kubectl")
    if found is None:
        pytest.fail("no kubectl: run `make k8s` (scripts/build-k8s.sh)")
    return found


@pytest.mark.req("KUBE-DEPLOY")
@pytest.mark.parametrize("directory", KUSTOMIZATIONS)
def test_kubectl_apply_k_deploy_passes_a_server_side_dry_run(
    request: pytest.FixtureRequest, directory: str
) -> None:
    deploy = ROOT / directory
    kubeconfig = real_kubeconfig(request)
    if kubeconfig is None:
        pytest.skip("needs a real API server: the in-repo fake serves no OpenAPI")
    rendered = subprocess.run(
        [kubectl(), "kustomize", str(deploy)], capture_output=True, text=True, check=True
    ).stdout
    wanted = sorted(
        f"{doc['kind'].lower()}/{doc['metadata']['name']}"
        for doc in yaml.safe_load_all(rendered)
        if doc
    )

    done = subprocess.run(
        [
            kubectl(),
            "--kubeconfig",
            str(kubeconfig),
            "apply",
            "-k",
            str(deploy),
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
