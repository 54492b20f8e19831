"""`KubeApi` on a real API server, named by a kubeconfig (NETATTACH_TEST_KUBECONFIG).

The object hooks go through HTTP: `create`/`update` of a pod with a `status` also write it through
the pod's `/status` subresource (as the kubelet would), `delete` deletes with
`gracePeriodSeconds=0`. Namespaces created through `create` are deleted by `cleanup()`. The
fake-only hooks skip the test (`api.NEEDS_FAKE`); `wait_for_watches` cannot see the server's
watches and waits a fixed `watch_grace` instead. Supported credentials: token, tokenFile, client
certificates (files or data), CA (file or data), insecure-skip-tls-verify; exec plugins are not.
"""

from __future__ import annotations

import base64
import builtins
import os
import ssl
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kube.api import (
    NEEDS_FAKE,
    PATCH_CONTENT_TYPES,
    ApiStatusError,
    Connection,
    Obj,
    PatchType,
    RequestRecord,
    WatchInfo,
)
from tests.kube.kube_http import HttpResponse, KubeHttp
from tests.kube.resources import NAMESPACES, PODS, Resource, resource_for, resource_of


def _data_file(directory: Path, name: str, data: str) -> str:
    path = directory / name
    path.write_bytes(base64.b64decode(data))
    return str(path)


def connection_from_kubeconfig(path: Path) -> Connection:
    """The server, CA and credentials of the current context of a kubeconfig file."""
    config: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    context_name = config.get("current-context")
    contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
    context = contexts.get(context_name) if context_name else next(iter(contexts.values()), None)
    if context is None:
        raise ValueError(f"{path}: no current context")
    cluster = {c["name"]: c["cluster"] for c in config["clusters"]}[context["cluster"]]
    users = {u["name"]: u.get("user") or {} for u in config.get("users") or []}
    user = users.get(context.get("user", ""), {})
    if "exec" in user or "auth-provider" in user:
        raise ValueError(f"{path}: exec and auth-provider credentials are not supported here")
    base = path.parent
    server = str(cluster["server"])
    context_ssl: ssl.SSLContext | None = None
    without_certificate: ssl.SSLContext | None = None
    certificate = False
    if server.startswith("https"):
        scratch = Path(tempfile.mkdtemp(prefix="netattach-kubeconfig-"))
        context_ssl = _trusting(cluster, base, scratch)
        without_certificate = _trusting(cluster, base, scratch)
        cert = user.get("client-certificate")
        key = user.get("client-key")
        if user.get("client-certificate-data"):
            cert = _data_file(scratch, "client.crt", user["client-certificate-data"])
        if user.get("client-key-data"):
            key = _data_file(scratch, "client.key", user["client-key-data"])
        if cert and key:
            context_ssl.load_cert_chain(str(base / cert), str(base / key))
            certificate = True
    token = user.get("token")
    if token is None and user.get("tokenFile"):
        token = (base / user["tokenFile"]).read_text(encoding="utf-8").strip()
    return Connection(
        server,
        token,
        context_ssl,
        client_certificate=certificate,
        ssl_context_without_certificate=without_certificate,
    )


_CREDENTIALS = (
    "token",
    "tokenFile",
    "client-certificate",
    "client-certificate-data",
    "client-key",
    "client-key-data",
    "username",
    "password",
    "exec",
    "auth-provider",
)


def with_token_only(kubeconfig: Path, path: Path, token: str) -> Path:
    """Write to `path` a copy of `kubeconfig` whose current user authenticates with `token` and
    nothing else (its certificates and other credentials dropped; relative file paths made
    absolute, since the copy lives elsewhere)."""
    config: dict[str, Any] = yaml.safe_load(kubeconfig.read_text(encoding="utf-8"))
    base = kubeconfig.resolve().parent
    for entry in config.get("clusters") or []:
        cluster = entry.get("cluster") or {}
        if cluster.get("certificate-authority"):
            cluster["certificate-authority"] = str(base / cluster["certificate-authority"])
    context_name = config.get("current-context")
    contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
    context = contexts.get(context_name) if context_name else next(iter(contexts.values()), None)
    if context is None:
        raise ValueError(f"{kubeconfig}: no current context")
    for entry in config.get("users") or []:
        if entry.get("name") == context.get("user"):
            user = {k: v for k, v in (entry.get("user") or {}).items() if k not in _CREDENTIALS}
            entry["user"] = {**user, "token": token}
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _trusting(cluster: Obj, base: Path, scratch: Path) -> ssl.SSLContext:
    """A TLS context that trusts the cluster's CA (or nothing, with insecure-skip-tls-verify)."""
    context = ssl.create_default_context()
    if cluster.get("insecure-skip-tls-verify"):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif cluster.get("certificate-authority-data"):
        context.load_verify_locations(
            _data_file(scratch, "ca.crt", cluster["certificate-authority-data"])
        )
    elif cluster.get("certificate-authority"):
        context.load_verify_locations(str(base / cluster["certificate-authority"]))
    return context


class RealKubeApi:
    """The `KubeApi` interface over HTTP to a real API server."""

    is_fake = False

    def __init__(self, kubeconfig: Path, *, watch_grace: float = 1.0) -> None:
        self.kubeconfig = kubeconfig
        self._conn = connection_from_kubeconfig(kubeconfig)
        self.http = KubeHttp(self._conn)
        self.watch_grace = watch_grace
        self._created_namespaces: builtins.list[str] = []

    def connection(self) -> Connection:
        return self._conn

    def write_kubeconfig(self, path: Path) -> Path:
        path.write_text(self.kubeconfig.read_text(encoding="utf-8"), encoding="utf-8")
        return path

    def cleanup(self) -> None:
        for name in reversed(self._created_namespaces):
            self.http.request("DELETE", NAMESPACES.object_path(name))

    # -- objects --------------------------------------------------------------------------------

    @staticmethod
    def _check(response: HttpResponse) -> Obj:
        body = response.json() if response.body else {}
        if response.status >= 400:
            raise ApiStatusError(body)
        result: Obj = body
        return result

    @staticmethod
    def _namespace(res: Resource, obj: Obj) -> str | None:
        return (
            ((obj.get("metadata") or {}).get("namespace") or "default") if res.namespaced else None
        )

    def _write_status(self, res: Resource, stored: Obj, status: Obj | None) -> Obj:
        if res is not PODS or not status or stored.get("status") == status:
            return stored
        meta = stored["metadata"]
        body = {**stored, "status": status}
        path = res.object_path(meta["name"], meta.get("namespace")) + "/status"
        return self._check(self.http.put(path, body))

    def create(self, obj: Obj) -> Obj:
        res = resource_of(obj)
        namespace = self._namespace(res, obj)
        stored = self._check(self.http.post(res.collection_path(namespace), obj))
        if res is NAMESPACES:
            self._created_namespaces.append(stored["metadata"]["name"])
            self._wait_default_account(stored["metadata"]["name"])
        return self._write_status(res, stored, obj.get("status"))

    def _wait_default_account(self, namespace: str, timeout: float = 10.0) -> None:
        """A namespace takes pods once its `default` ServiceAccount exists (the admission plugin
        refuses them before). kube-controller-manager makes it within a second, but after an API
        server restart its informers may back off for minutes: then it is made here, as the
        controller would make it."""
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
        deadline = time.monotonic() + timeout
        while self.http.get(path).status != 200:
            if time.monotonic() > deadline:
                account = {"apiVersion": "v1", "kind": "ServiceAccount",
                           "metadata": {"name": "default", "namespace": namespace}}  # fmt: skip
                made = self.http.post(path.rsplit("/", 1)[0], account)
                assert made.status in (201, 409), made.body
                return
            time.sleep(0.1)

    def get(self, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        res = resource_for(kind)
        response = self.http.get(res.object_path(name, self._ns(res, namespace)))
        if response.status == 404:
            return None
        return self._check(response)

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> builtins.list[Obj]:
        res = resource_for(kind)
        query = {}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        doc = self._check(self.http.get(res.collection_path(namespace), **query))
        items: builtins.list[Obj] = [
            {"apiVersion": res.api_version, "kind": res.kind, **item} for item in doc["items"]
        ]
        return items

    def update(self, obj: Obj) -> Obj:
        res = resource_of(obj)
        meta = obj["metadata"]
        path = res.object_path(meta["name"], self._namespace(res, obj))
        stored = self._check(self.http.put(path, obj))
        return self._write_status(res, stored, obj.get("status"))

    def patch(
        self,
        kind: str,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: PatchType = "merge",
    ) -> Obj:
        res = resource_for(kind)
        response = self.http.request(
            "PATCH",
            res.object_path(name, self._ns(res, namespace)),
            body=patch,
            content_type=PATCH_CONTENT_TYPES[patch_type],
            query={"fieldManager": "netattach-tests"},
        )
        return self._check(response)

    def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        res = resource_for(kind)
        path = res.object_path(name, self._ns(res, namespace))
        self._check(self.http.request("DELETE", path, query={"gracePeriodSeconds": "0"}))

    def events_for(self, namespace: str, pod: str) -> builtins.list[Obj]:
        events = self.list(
            "Event",
            namespace,
            field_selector=f"involvedObject.kind=Pod,involvedObject.name={pod}",
        )
        return sorted(
            events,
            key=lambda e: (
                e["metadata"].get("creationTimestamp", ""),
                int(e["metadata"]["resourceVersion"]),
            ),
        )

    @property
    def resource_version(self) -> str:
        doc = self._check(self.http.get(NAMESPACES.collection_path(), limit="1"))
        return str(doc["metadata"]["resourceVersion"])

    def wait_for_watches(
        self, count: int = 1, *, path_contains: str = "", timeout: float = 5.0
    ) -> None:
        time.sleep(min(self.watch_grace, timeout))

    @staticmethod
    def _ns(res: Resource, namespace: str | None) -> str | None:
        return (namespace or "default") if res.namespaced else None

    # -- fake only ------------------------------------------------------------------------------

    def compact(self) -> str:
        pytest.skip(NEEDS_FAKE)

    def restart(self, downtime: float = 0.3, *, wait: bool = True, compact: bool = False) -> None:
        pytest.skip(NEEDS_FAKE)

    def stop(self) -> None:
        pytest.skip(NEEDS_FAKE)

    def start(self) -> None:
        pytest.skip(NEEDS_FAKE)

    def set_token(self, token: str | None) -> None:
        pytest.skip(NEEDS_FAKE)

    def set_crd_installed(self, kind: str, installed: bool) -> None:
        pytest.skip(NEEDS_FAKE)  # deleting a CRD deletes its objects on a shared cluster

    def set_namespace_controller(self, running: bool) -> None:
        pytest.skip(NEEDS_FAKE)

    def set_bookmark_interval(self, seconds: float) -> None:
        pytest.skip(NEEDS_FAKE)

    @property
    def requests(self) -> builtins.list[RequestRecord]:
        pytest.skip(NEEDS_FAKE)

    def clear_requests(self) -> None:
        pytest.skip(NEEDS_FAKE)

    def inject_error(
        self,
        code: int,
        *,
        method: str | None = None,
        path: str | None = None,
        times: int = 1,
        reason: str | None = None,
        message: str | None = None,
    ) -> None:
        pytest.skip(NEEDS_FAKE)

    @property
    def active_watches(self) -> builtins.list[WatchInfo]:
        pytest.skip(NEEDS_FAKE)


def kubeconfig_from_env() -> Path | None:
    value = os.environ.get("NETATTACH_TEST_KUBECONFIG")
    return Path(value).expanduser() if value else None


def account_kubeconfig(
    api: RealKubeApi, namespace: str, account: str, out: Path, probe: str, timeout: float = 15.0
) -> Path:
    """A kubeconfig at `out` authenticating as the ServiceAccount `namespace`/`account` (a token
    from the TokenRequest API), once its RBAC took effect: `probe` (a path it may GET) answers
    200 (RBAC changes reach the authorizer through its informers)."""
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"expirationSeconds": 600}}  # fmt: skip
    response = api.http.post(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token", request
    )
    assert response.status == 201, response.body
    config = with_token_only(api.kubeconfig, out, response.json()["status"]["token"])
    client = KubeHttp(connection_from_kubeconfig(config))
    deadline = time.monotonic() + timeout
    while client.get(probe, limit="1").status != 200:
        assert time.monotonic() < deadline, f"the RBAC of {account} never took effect"
        time.sleep(0.2)
    return config
