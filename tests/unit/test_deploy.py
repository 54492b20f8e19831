"""deploy/: every manifest validates against the Kubernetes schemas, and they agree with each
other and with netattach's settings (KUBE-DEPLOY, KUBE-INSTALL)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from netattach.daemon import shim_install
from netattach.settings import feed as feed_settings
from netattach.settings import settings

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
    assert isinstance(cfg.feed, feed_settings.KubernetesFeed)


@pytest.mark.req("KUBE-INSTALL")
def test_the_shim_is_written_beside_and_renamed(tmp_path: Path) -> None:
    source = tmp_path / "shim.pyz"
    source.write_bytes(b"#!/usr/bin/env python3\n" + b"x" * 1000)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim_install.install_shim(source, bin_dir)
    installed = bin_dir / "netattach"
    assert installed.read_bytes() == source.read_bytes()
    assert stat.S_IMODE(installed.stat().st_mode) == 0o755
    assert sorted(p.name for p in bin_dir.iterdir()) == ["netattach"]


@pytest.mark.req("KUBE-INSTALL")
def test_copies_an_older_version_installed_are_pruned(tmp_path: Path) -> None:
    # netattach up to 0.1 installed a one-directory build as netattach.d-<hash> + a symlink.
    bin_dir = tmp_path / "bin"
    old = bin_dir / "netattach.d-0123456789ab"
    (old / "lib").mkdir(parents=True)
    (old / "netattach-shim").write_bytes(b"old exe")
    (bin_dir / "netattach").symlink_to("netattach.d-0123456789ab/netattach-shim")
    (bin_dir / "bridge").write_bytes(b"someone else's plugin")
    source = tmp_path / "netattach-shim"
    source.write_bytes(b"\x7fELF new")

    shim_install.install_shim(source, bin_dir)

    assert not (bin_dir / "netattach").is_symlink()
    assert (bin_dir / "netattach").read_bytes() == b"\x7fELF new"
    assert sorted(p.name for p in bin_dir.iterdir()) == ["bridge", "netattach"]


@pytest.mark.req("KUBE-INSTALL")
def test_without_shim_the_daemon_installs_the_native_one(tmp_path: Path) -> None:
    assert shim_install.NATIVE_SHIM.is_file(), (
        "the native shim is built with the package: `make venv` (or pip install) builds"
        f" {shim_install.NATIVE_SHIM}"
    )
    chosen = shim_install.choose_shim(None, tmp_path)
    assert chosen == shim_install.NATIVE_SHIM
    assert not list(tmp_path.iterdir())  # no zipapp built when there is no need


@pytest.mark.req("KUBE-INSTALL")
def test_without_a_native_shim_the_daemon_builds_a_working_zipapp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shim_install, "NATIVE_SHIM", tmp_path / "not-built")
    chosen = shim_install.choose_shim(None, tmp_path / "state")

    done = subprocess.run(
        [sys.executable, str(chosen)],
        input=b'{"cniVersion": "0.4.0"}',
        env={"CNI_COMMAND": "VERSION"},
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(b'{"cniVersion": "0.4.0", "supportedVersions": ["0.1.0"')
    assert os.access(chosen, os.X_OK)
    assert chosen.read_bytes().startswith(b"#!/usr/bin/env python3\n")


def test_a_shim_named_that_is_not_there_stops_the_daemon(tmp_path: Path) -> None:
    with pytest.raises(shim_install.ShimNotFoundError, match="is not an executable file"):
        shim_install.check_explicit(tmp_path / "missing")
