"""The shim's forms, each built once per session from src/, and a stub daemon per test.

    source      python -I -S, running the package's __main__ from src/ (what -m does)
    zipapp      scripts/build-shim.sh zipapp: the host's python3 runs it
    native      scripts/build-shim.sh native: the static C program the image carries and the
                daemon installs by default (netattach-shim.c)
    sanitized   scripts/build-shim.sh sanitized: the same C file under AddressSanitizer and
                UBSan, which abort on any out-of-bounds access, leak or undefined behaviour

A form that cannot be built fails its tests: CI must have a C compiler, and a skipped form would
let a broken build ship.
"""

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.shim.stub_daemon import StubDaemon

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
BUILD_SCRIPT = ROOT / "scripts" / "build-shim.sh"
FORMS = ("source", "zipapp", "native", "sanitized")
# The exchange timeout the shim is given in tests, so that a test of a hanging daemon is quick
# and a broken shim cannot hang the suite for the shim's default 300 s.
TEST_TIMEOUT = "20"
# No wait for a daemon that is not there (the default is 30 s): the tests of an absent daemon
# want its answer at once; tests/shim/test_pipe.py sets it where the wait is what is tested.
TEST_DAEMON_WAIT = "0"


@dataclasses.dataclass(frozen=True)
class Shim:
    form: str
    argv: tuple[str, ...]
    # What this form always runs with (the sanitizers' settings).
    base_env: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def run(
        self, command: str, stdin: bytes, env: Mapping[str, str] | None = None
    ) -> "subprocess.CompletedProcess[bytes]":
        """Run one CNI call: `CNI_COMMAND=command`, a minimal environment plus `env`."""
        full_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "CNI_COMMAND": command,
            "NETATTACH_SHIM_TIMEOUT": TEST_TIMEOUT,
            "NETATTACH_SHIM_DAEMON_WAIT": TEST_DAEMON_WAIT,
            **self.base_env,
            **(env or {}),
        }
        done = subprocess.run(
            self.argv, input=stdin, env=full_env, capture_output=True, timeout=120, check=False
        )
        # A sanitizer's report, whatever the exit code (SANITIZER_EXIT is also one a daemon's
        # reply may carry, and the shim then exits with it as it should).
        assert b"Sanitizer" not in done.stderr, done.stderr.decode(errors="replace")
        return done


def run_isolated(code: str) -> subprocess.CompletedProcess[str]:
    """`code` run as the shim runs, `python -I -S` (no site, no PYTHON* variables), with src/
    on the path; not checked, so a test can read a failure's traceback."""
    prelude = f"import sys; sys.path.insert(0, {str(SRC)!r}); "
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", prelude + code],
        capture_output=True,
        text=True,
        check=False,
    )


def _build(*args: str) -> None:
    done = subprocess.run(
        ["bash", str(BUILD_SCRIPT), *args],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"scripts/build-shim.sh {' '.join(args)} failed:\n{done.stdout}{done.stderr}")


@pytest.fixture(scope="session")
def zipapp_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("zipapp") / "netattach-shim.pyz"
    _build("zipapp", str(out))
    return out


@pytest.fixture(scope="session")
def native_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("native") / "netattach-shim"
    _build("native", str(out))
    return out


@pytest.fixture(scope="session")
def sanitized_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sanitized") / "netattach-shim"
    _build("sanitized", str(out))
    return out


# A sanitizer report makes the program exit with this code; the report itself, on stderr (its
# SUMMARY line names AddressSanitizer, LeakSanitizer or UndefinedBehaviorSanitizer), is what
# `Shim.run` looks for: a reply's exit code may be 86 too.
SANITIZER_EXIT = 86
SANITIZER_ENV = {
    "ASAN_OPTIONS": f"detect_leaks=1:abort_on_error=0:exitcode={SANITIZER_EXIT}",
    "UBSAN_OPTIONS": f"halt_on_error=1:print_stacktrace=1:exitcode={SANITIZER_EXIT}",
}


def source_argv() -> tuple[str, ...]:
    # `python -I -S -m netattach.shim`, but -I ignores PYTHONPATH: put src/ on the path by hand
    # and let runpy run the package's __main__ exactly as -m does.
    code = (
        f"import sys; sys.path.insert(0, {str(SRC)!r}); import runpy; "
        "runpy.run_module('netattach.shim', run_name='__main__', alter_sys=True)"
    )
    return (sys.executable, "-I", "-S", "-c", code)


@pytest.fixture(params=FORMS)
def shim(request: pytest.FixtureRequest) -> Shim:
    form: str = request.param
    if form == "zipapp":
        return Shim(form, (sys.executable, str(request.getfixturevalue("zipapp_path"))))
    if form == "native":
        return Shim(form, (str(request.getfixturevalue("native_path")),))
    if form == "sanitized":
        return Shim(form, (str(request.getfixturevalue("sanitized_path")),), SANITIZER_ENV)
    return Shim(form, source_argv())


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    # Not tmp_path: its long, test-named path can pass sun_path's 107 bytes.
    path = Path(tempfile.mkdtemp(prefix="netattach-shim-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def daemon(socket_dir: Path) -> Iterator[StubDaemon]:
    stub = StubDaemon(socket_dir / "netattach.sock")
    yield stub
    stub.close()
