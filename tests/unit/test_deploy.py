"""deploy/: every manifest validates against the Kubernetes schemas, and they agree with each
other and with netattach's settings (KUBE-DEPLOY, KUBE-INSTALL)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from netattach.daemon import service, settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
KUBERNETES_VERSION = "1.30"
KUSTOMIZATION = "kustomization.yaml"


def documents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        if path.name == KUSTOMIZATION:
            continue  # kustomize's own file, not a Kubernetes object (tests/unit/test_kustomize.py)
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                found.append((path.name, doc))
    return found


def one(kind: str) -> dict[str, Any]:
    (doc,) = [d for _, d in documents() if d["kind"] == kind]
    return doc


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
    assert isinstance(cfg.feed, settings.KubernetesFeed)


@pytest.mark.req("KUBE-INSTALL")
def test_a_single_file_shim_is_written_beside_and_renamed(tmp_path: Path) -> None:
    source = tmp_path / "shim.pyz"
    source.write_bytes(b"#!/usr/bin/env python3\n" + b"x" * 1000)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    service.install_shim(source, bin_dir)
    installed = bin_dir / "netattach"
    assert installed.read_bytes() == source.read_bytes()
    assert stat.S_IMODE(installed.stat().st_mode) == 0o755
    assert sorted(p.name for p in bin_dir.iterdir()) == ["netattach"]


@pytest.mark.req("KUBE-INSTALL")
def test_a_one_dir_shim_is_swapped_in_with_one_rename(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()

    def build(version: bytes) -> Path:
        source = tmp_path / f"build-{version.decode()}"
        (source / "lib").mkdir(parents=True)
        (source / "netattach-shim").write_bytes(b"exe " + version)
        (source / "netattach-shim").chmod(0o755)
        (source / "lib" / "libpython.so").write_bytes(b"lib " + version)
        return source

    service.install_shim(build(b"1"), bin_dir)
    first = os.readlink(bin_dir / "netattach")
    assert (bin_dir / "netattach").read_bytes() == b"exe 1"
    service.install_shim(build(b"2"), bin_dir)
    second = os.readlink(bin_dir / "netattach")
    assert second != first
    assert (bin_dir / "netattach").read_bytes() == b"exe 2"
    assert (bin_dir / second).parent.joinpath("lib/libpython.so").read_bytes() == b"lib 2"
    # the old copy is gone, nothing half-made is left
    assert sorted(p.name for p in bin_dir.iterdir()) == ["netattach", second.split("/")[0]]
