"""What the Kubernetes tests see of "the API": the in-repo fake or a real API server.

`KubeApi` is the interface both `fake_api.FakeKubeApi` and `real_api.RealKubeApi` implement, so a
test written against the `fake_api` fixture runs unchanged against a real cluster. The hooks only
a fake can offer (`compact`, `restart`, `stop`, `start`, `set_token`, `set_crd_installed`,
`set_namespace_controller`, `set_bookmark_interval`, `requests`, `clear_requests`,
`inject_error`, `active_watches`) skip the test on a real server with the reason `NEEDS_FAKE`.
"""

from __future__ import annotations

import builtins
import dataclasses
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

Obj = dict[str, Any]
"""A Kubernetes object (or any JSON object) as decoded JSON."""

NEEDS_FAKE = "needs the in-repo fake"
"""The skip reason of a fake-only hook called on a real API server."""

PatchType = Literal["merge", "strategic", "json", "apply"]

PATCH_CONTENT_TYPES: Mapping[str, str] = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}


class ApiStatusError(Exception):
    """A request the API server refused: `status` is the `Status` object it answered with."""

    def __init__(self, status: Obj) -> None:
        self.status = status
        super().__init__(f"{self.code} {self.reason}: {self.message}")

    @property
    def code(self) -> int:
        return int(self.status.get("code", 0))

    @property
    def reason(self) -> str:
        return str(self.status.get("reason", ""))

    @property
    def message(self) -> str:
        return str(self.status.get("message", ""))


@dataclasses.dataclass(frozen=True)
class Connection:
    """Where the API server listens and how to authenticate to it."""

    base_url: str
    token: str | None = None
    ssl_context: ssl.SSLContext | None = None
    client_certificate: bool = False
    """`ssl_context` presents a client certificate: it authenticates too, whatever the token."""
    ssl_context_without_certificate: ssl.SSLContext | None = None
    """The same trust without the client certificate (HTTPS only)."""

    def token_only(self) -> Connection:
        """This connection with the bearer token as its sole credential."""
        return dataclasses.replace(
            self,
            ssl_context=self.ssl_context_without_certificate or self.ssl_context,
            client_certificate=False,
        )


@dataclasses.dataclass(frozen=True)
class RequestRecord:
    """One HTTP request the fake answered (fake only: `KubeApi.requests`)."""

    method: str
    path: str
    query: Mapping[str, str]
    content_type: str | None
    body: Any
    """The request body decoded as JSON, or None when empty (the raw text when not JSON)."""
    status: int
    watch: bool


@dataclasses.dataclass(frozen=True)
class WatchInfo:
    """A watch connection the fake is serving (fake only: `KubeApi.active_watches`)."""

    path: str
    query: Mapping[str, str]
    resource: str
    """The plural resource name, e.g. "pods"."""
    namespace: str | None


class KubeApi(Protocol):
    """The API under test, real or fake. Kinds are names like "Pod" or plurals like "pods"."""

    @property
    def is_fake(self) -> bool: ...

    def connection(self) -> Connection: ...

    def write_kubeconfig(self, path: Path) -> Path: ...

    # -- objects (both) ---------------------------------------------------------------------
    def create(self, obj: Obj) -> Obj: ...

    def get(self, kind: str, name: str, namespace: str | None = None) -> Obj | None: ...

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]: ...

    def update(self, obj: Obj) -> Obj: ...

    def patch(
        self,
        kind: str,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: PatchType = "merge",
    ) -> Obj: ...

    def delete(self, kind: str, name: str, namespace: str | None = None) -> None: ...

    def events_for(self, namespace: str, pod: str) -> builtins.list[Obj]: ...

    @property
    def resource_version(self) -> str: ...

    def wait_for_watches(
        self, count: int = 1, *, path_contains: str = "", timeout: float = 5.0
    ) -> None: ...

    # -- fake only (skip on a real server) ------------------------------------------------------
    def compact(self) -> str: ...

    def restart(
        self, downtime: float = 0.3, *, wait: bool = True, compact: bool = False
    ) -> None: ...

    def stop(self) -> None: ...

    def start(self) -> None: ...

    def set_token(self, token: str | None) -> None: ...

    def set_crd_installed(self, kind: str, installed: bool) -> None: ...

    def set_namespace_controller(self, running: bool) -> None: ...

    def set_bookmark_interval(self, seconds: float) -> None: ...

    @property
    def requests(self) -> builtins.list[RequestRecord]: ...

    def clear_requests(self) -> None: ...

    def inject_error(
        self,
        code: int,
        *,
        method: str | None = None,
        path: str | None = None,
        times: int = 1,
        reason: str | None = None,
        message: str | None = None,
    ) -> None: ...

    @property
    def active_watches(self) -> builtins.list[WatchInfo]: ...
