"""pyroute2 is the demo's optional extra: without it `netattach demo` says what to install,
and every other command runs as before."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest

from netattach.cli import main as cli_main

DEMO_MODULES = ("netattach.cli.demo", "netattach.netns.links", "netattach.netns.namespace")


@pytest.fixture
def without_pyroute2(monkeypatch: pytest.MonkeyPatch) -> None:
    """An install without the demo extra: importing pyroute2 fails, as nothing imported it yet
    (nor the modules that import it: gone from `sys.modules` and from their packages, else
    `from netattach.cli import demo` would find the one imported before and run the demo)."""
    for name in DEMO_MODULES:
        package, _, module = name.rpartition(".")
        monkeypatch.delitem(sys.modules, name, raising=False)
        monkeypatch.delattr(importlib.import_module(package), module, raising=False)
    monkeypatch.setitem(sys.modules, "pyroute2", None)
    # Should the demo import all the same, it stops at its root check instead of running.
    monkeypatch.setattr(os, "geteuid", lambda: 65534)


@pytest.mark.usefixtures("without_pyroute2")
def test_the_demo_without_its_extra_names_what_to_install(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli_main.main(["demo"]) == 1
    err = capsys.readouterr().err
    assert "pyroute2" in err
    assert "make demo" in err
    assert "netattach[demo]" in err


@pytest.mark.usefixtures("without_pyroute2")
def test_another_command_runs_without_the_demo_extra(tmp_path: Path) -> None:
    nad = tmp_path / "nad.yaml"
    nad.write_text(
        "apiVersion: k8s.cni.cncf.io/v1\n"
        "kind: NetworkAttachmentDefinition\n"
        "metadata: {name: blue, namespace: default}\n"
        'spec: {config: \'{"cniVersion": "1.0.0", "type": "bridge"}\'}\n'
    )
    assert cli_main.main(["validate", str(nad)]) == 0
    assert "pyroute2" not in [name for name, module in sys.modules.items() if module is not None]
