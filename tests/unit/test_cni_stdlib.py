"""The CNI vocabulary imports the standard library only; what the shim imports stays lean."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
CNI_MODULES = [
    "spec",
    "errors",
    "version",
    "env",
    "conf",
    "result",
    "result_fields",
    "result_convert",
]


def loaded_after_import(module: str) -> list[str]:
    code = (
        "import sys, json\n"
        f"sys.path.insert(0, {str(SRC)!r})\n"
        "before = set(sys.modules)\n"
        f"import {module}\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True
    )
    loaded: list[str] = json.loads(done.stdout)
    return loaded


@pytest.mark.parametrize("name", CNI_MODULES)
def test_cni_modules_import_only_the_standard_library(name: str) -> None:
    loaded = loaded_after_import(f"netattach.cni.{name}")
    foreign = [
        m
        for m in loaded
        if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] != "netattach"
    ]
    assert foreign == []


def test_the_modules_the_shim_uses_load_no_dataclasses_or_asyncio() -> None:
    loaded = loaded_after_import("netattach.cni.errors, netattach.cni.spec")
    assert "dataclasses" not in loaded
    assert "asyncio" not in loaded
    assert "http.client" not in loaded
