"""`netattach-thin` answers VERSION as the orchestrator would, importing nothing heavy."""

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from netattach.cli import thin
from netattach.pods import dispatch

SRC = Path(__file__).resolve().parents[2] / "src"
HEAVY = ("asyncio", "logging", "yaml", "pyroute2", "lightkube", "json", "re")
# Neither the pod operations nor the daemon's process: a VERSION call imports no orchestrator.
HEAVY_PACKAGES = ("netattach.pods", "netattach.daemon", "netattach.settings")


def test_a_version_call_imports_none_of_the_orchestrator() -> None:
    code = (
        f"import io, os, sys; sys.path.insert(0, {str(SRC)!r}); "
        "os.environ['CNI_COMMAND'] = 'VERSION'; "
        'sys.stdin = io.TextIOWrapper(io.BytesIO(b\'{"cniVersion": "0.4.0"}\')); '
        "from netattach.cli import thin; rc = thin.main(); sys.stdout.flush(); "
        "print('\\n' + ' '.join(sorted(sys.modules)), rc)"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    reply, modules_line = done.stdout.split("\n", 1)
    assert json.loads(reply)["cniVersion"] == "0.4.0"
    modules, rc = modules_line.rsplit(" ", 1)
    assert rc.strip() == "0"
    loaded = set(modules.split())
    assert sorted(m for m in loaded if m in HEAVY or m.startswith(HEAVY_PACKAGES)) == []


def full_path(environ: dict[str, str], stdin: bytes) -> bytes:
    async def no_orchestrator(_: object) -> object:
        raise AssertionError("VERSION needs no orchestrator")

    return asyncio.run(dispatch.handle(environ, stdin, no_orchestrator)).stdout  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "stdin",
    [
        b"",
        b"   ",
        b'{"cniVersion": "0.4.0"}',
        b'{"cniVersion": "9.9.9"}',
        b'{"cniVersion": 4}',
        b'{"name": "n"}',
        b'\n{"cniVersion": "1.1.0"}\n',
    ],
)
def test_the_quick_version_reply_is_the_full_paths(stdin: bytes) -> None:
    environ = {"CNI_COMMAND": "VERSION"}
    quick = thin.version_reply(environ, stdin)

    assert quick is not None
    assert json.loads(quick) == json.loads(full_path(environ, stdin))


@pytest.mark.parametrize(
    ("environ", "stdin"),
    [
        ({"CNI_COMMAND": "VERSION"}, b"{not json"),
        ({"CNI_COMMAND": "VERSION"}, b"[1]"),
        ({"CNI_COMMAND": "VERSION", "CNI_IFNAME": "x" * 20}, b"{}"),
        ({"CNI_COMMAND": "ADD"}, b"{}"),
    ],
)
def test_anything_else_takes_the_full_path(environ: dict[str, str], stdin: bytes) -> None:
    assert thin.version_reply(environ, stdin) is None
