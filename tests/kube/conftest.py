"""Fixtures of the Kubernetes tier: the API (the in-repo fake, or a real server) and a kubeconfig.

- `fake_api`: a running `FakeKubeApi` (fresh per test, bearer token required, the CRD schemas of
  deploy/crds loaded). When NETATTACH_TEST_KUBECONFIG names a kubeconfig file, it is a
  `RealKubeApi` on that cluster instead, and the hooks only a fake can offer (`compact`,
  `restart`, `stop`, `start`, `set_token`, `set_bookmark_interval`, `requests`, `inject_error`,
  `active_watches`, ...) skip the test with the reason "needs the in-repo fake".
- `kubeconfig`: the path of a kubeconfig for that API (written for the fake: server
  http://127.0.0.1:PORT, bearer token; the file named by the variable for a real server).
- `kube_namespace`: a fresh namespace for the test (deleted afterwards on a real server).
- `kube_http`: a `KubeHttp` client authenticated to the API.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kube import objects
from tests.kube.api import KubeApi
from tests.kube.crds import load_crd_schemas
from tests.kube.fake_api import FakeKubeApi
from tests.kube.kube_http import KubeHttp
from tests.kube.real_api import RealKubeApi, kubeconfig_from_env


@pytest.fixture
def fake_api() -> Iterator[KubeApi]:
    real = kubeconfig_from_env()
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
    real = kubeconfig_from_env()
    if real is not None:
        return real
    return fake_api.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def kube_namespace(fake_api: KubeApi) -> str:
    name = f"netattach-test-{secrets.token_hex(4)}"
    fake_api.create(objects.namespace(name))
    return name


@pytest.fixture
def kube_http(fake_api: KubeApi) -> KubeHttp:
    return KubeHttp(fake_api.connection())
