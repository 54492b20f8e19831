"""Which shim the daemon installs into cniBinDir, and installing it so no exec sees half of it.

The forms, in the order the daemon picks them when `--shim` names none:

    native   netattach/shim/netattach-shim, the static C program built with the package (the
             image and `pip install` build it; `make venv` in a checkout): runs on any host
    zipapp   built here from the package's own shim modules when there is no native one; needs
             a python3 >= 3.9 on the runtime's PATH, so the daemon says so in its log

The daemon never writes a config naming a shim it did not install (KUBE-INSTALL).
"""

import contextlib
import logging
import os
import py_compile
import shutil
import tempfile
import zipapp
from pathlib import Path

from netattach import atomic

log = logging.getLogger("netattach.daemon")

SHIM_NAME = "netattach"
PACKAGE_ROOT = Path(__file__).resolve().parents[1]
NATIVE_SHIM = PACKAGE_ROOT / "shim" / "netattach-shim"
# What the zipapp holds: the shim and the four modules it imports (tests/shim/test_imports.py).
ZIPAPP_MODULES = (
    "__init__.py",
    "wire.py",
    "quickjson.py",
    "cni/__init__.py",
    "cni/spec.py",
    "cni/errors.py",
    "shim/__init__.py",
    "shim/__main__.py",
    "shim/main.py",
)
ZIPAPP_INTERPRETER = "/usr/bin/env python3"


class ShimNotFoundError(Exception):
    """The shim named to install is not an executable file."""


def build_zipapp(out: Path) -> Path:
    """The Python shim as one executable file at `out`, from this package's own modules.

    Each module ships with its .pyc beside it (unchecked-hash: zipimport cannot cache what it
    compiles, 9 ms per run); a python3 of another version finds a bad magic number and compiles
    the source, as without them.
    """
    with tempfile.TemporaryDirectory(prefix="netattach-zipapp-") as staging:
        stage = Path(staging)
        for relative in ZIPAPP_MODULES:
            target = stage / "netattach" / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(PACKAGE_ROOT / relative, target)
        # The archive's own __main__ is the package's: the same code as `python -m netattach.shim`.
        shutil.copyfile(PACKAGE_ROOT / "shim" / "__main__.py", stage / "__main__.py")
        for source in sorted(stage.rglob("*.py")):
            py_compile.compile(
                str(source),
                cfile=str(source) + "c",
                doraise=True,
                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
            )
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(f".{out.name}.tmp")
        zipapp.create_archive(stage, partial, interpreter=ZIPAPP_INTERPRETER)
        partial.chmod(0o755)
        os.replace(partial, out)
    return out


def check_explicit(explicit: Path | None) -> Path | None:
    """`explicit` when it is an executable file (or None); else `ShimNotFoundError`."""
    if explicit is not None and not (explicit.is_file() and os.access(explicit, os.X_OK)):
        raise ShimNotFoundError(f"--shim {str(explicit)!r} is not an executable file")
    return explicit


def choose_shim(explicit: Path | None, work_dir: Path) -> Path:
    """The shim file to install: `explicit`, else the native one, else a zipapp built now."""
    if explicit is not None:
        check_explicit(explicit)
        return explicit
    if NATIVE_SHIM.is_file() and os.access(NATIVE_SHIM, os.X_OK):
        return NATIVE_SHIM
    zipapp_path = build_zipapp(work_dir / "netattach-shim.pyz")
    log.warning(
        "no native shim was built with this package (%s): installing the Python zipapp, which"
        " needs python3 >= 3.9 on the container runtime's PATH",
        NATIVE_SHIM,
    )
    return zipapp_path


def install_shim(source: Path, bin_dir: Path) -> None:
    """Put the shim at `bin_dir/netattach`, written beside and renamed over, so a runtime
    executing it at that moment finds the old or the new one whole; then prune the copies
    older netattach versions installed (`netattach.d-*`, one-directory builds)."""
    atomic.write_atomic(bin_dir / SHIM_NAME, source.read_bytes(), mode=0o755)
    for old in bin_dir.glob(f"{SHIM_NAME}.d-*"):
        shutil.rmtree(old, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        (bin_dir / f".{SHIM_NAME}.link.tmp").unlink()
