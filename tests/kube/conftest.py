"""Fixtures of the Kubernetes tier: the API (a real API server by default, or the in-repo fake)
and a kubeconfig.

- `kube_cluster` (session): the real control plane of tests/kube/cluster.py (etcd,
  kube-apiserver with RBAC, kube-controller-manager; deploy/crds applied), built by `make k8s`,
  started once for the session. None when NETATTACH_TEST_KUBECONFIG names another cluster, or
  when NETATTACH_TEST_API=fake runs the tier on the in-repo fake as before.
- `fake_api`: the `KubeApi` of a test: a `RealKubeApi` on that cluster (through its bearer-token
  kubeconfig; the namespaces a test creates are deleted after it), or the cluster of
  NETATTACH_TEST_KUBECONFIG. A test marked `@pytest.mark.needs_fake("why")` gets a fresh
  `FakeKubeApi` instead (bearer token required, the CRD schemas of deploy/crds loaded): the fake
  is kept for what a real server cannot be made to do (scripted faults: `inject_error`,
  `restart`, `compact`, `set_crd_installed`, ...), and each such test says why. Where no
  `kube_cluster` fixture is visible (tests/cli imports only `fake_api` and `kubeconfig`), it is the
  fake. On a real server the fake-only hooks skip an unmarked test ("needs the in-repo fake").
- `kubeconfig`: the path of a kubeconfig for that API (the cluster's token kubeconfig; the file
  named by the variable; written for the fake: server http://127.0.0.1:PORT, bearer token).
- `admin_kubeconfig`: the cluster's client-certificate kubeconfig (group system:masters).
- `kube_namespace`: a fresh namespace for the test (deleted afterwards on a real server).
- `kube_http`: a `KubeHttp` client authenticated to the API.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kube import objects
from tests.kube.api import KubeApi
from tests.kube.cluster import LocalCluster, local_cluster
from tests.kube.crds import load_crd_schemas
from tests.kube.fake_api import FakeKubeApi
from tests.kube.kube_http import KubeHttp
from tests.kube.real_api import RealKubeApi, kubeconfig_from_env


def fake_requested() -> bool:
    """NETATTACH_TEST_API=fake: the tier on the in-repo fake (no real server started)."""
    return os.environ.get("NETATTACH_TEST_API", "").lower() == "fake"


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster | None]:
    if kubeconfig_from_env() is not None or fake_requested():
        yield None
        return
    with local_cluster(tmp_path_factory.mktemp("kube-cluster")) as cluster:
        yield cluster


def real_kubeconfig(request: pytest.FixtureRequest) -> Path | None:
    """The kubeconfig of the real server this test runs on, or None for the fake."""
    if request.node.get_closest_marker("needs_fake") is not None:
        return None
    env = kubeconfig_from_env()
    if env is not None:
        return env
    try:
        cluster: LocalCluster | None = request.getfixturevalue("kube_cluster")
    except pytest.FixtureLookupError:
        return None
    return None if cluster is None else cluster.token_kubeconfig


@pytest.fixture
def fake_api(request: pytest.FixtureRequest) -> Iterator[KubeApi]:
    real = real_kubeconfig(request)
    if real is not None:
        api = RealKubeApi(real)
        try:
            yield api
        finally:
            api.cleanup()
        return
    fake = FakeKubeApi(
        token=secrets.token_urlsafe(24), crd_schemas=load_crd_schemas(), bookmark_interval=1.0
    )
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def kubeconfig(fake_api: KubeApi, tmp_path: Path) -> Path:
    if isinstance(fake_api, RealKubeApi):
        return fake_api.kubeconfig
    return fake_api.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def admin_kubeconfig(kube_cluster: LocalCluster | None) -> Path:
    if kube_cluster is None:
        pytest.skip("the client-certificate kubeconfig is the local cluster's")
    return kube_cluster.admin_kubeconfig


@pytest.fixture
def kube_namespace(fake_api: KubeApi) -> str:
    name = f"netattach-test-{secrets.token_hex(4)}"
    fake_api.create(objects.namespace(name))
    return name


@pytest.fixture
def kube_http(fake_api: KubeApi) -> KubeHttp:
    return KubeHttp(fake_api.connection())
