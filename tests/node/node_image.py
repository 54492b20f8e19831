"""The node image for tests/node: `make image`'s archive, built once per set of inputs.

`node_image_archive()` is NETATTACH_TEST_IMAGE when set (an archive `make image` built), else
`scripts/build-image.sh` run into a cache directory (NETATTACH_IMAGE_CACHE, default
~/.cache/netattach/images) under a name keyed by the digest of everything the image is built
from, so an unchanged tree reuses it and a changed one rebuilds (~1 minute on 2 cores). The
three newest archives stay (other trees on the machine may want theirs again); a file lock keeps
two sessions from building at once.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "scripts" / "build-image.sh"
# Everything the image's bytes depend on (Debian's packages aside).
INPUTS = (
    "pyproject.toml",
    "constraints.txt",
    "README.md",
    "src",
    "scripts/build-image.sh",
    "scripts/build-shim.sh",
    "deploy/image",
    "deploy/daemonset.yaml",
)
BUILD_TIMEOUT = 1800.0
KEEP = 3  # archives kept in the cache
SKIPPED_PARTS = {"__pycache__", ".mypy_cache"}


def inputs_digest() -> str:
    digest = hashlib.sha256()
    for name in INPUTS:
        top = ROOT / name
        files = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for path in files:
            parts = set(path.relative_to(ROOT).parts)
            if parts & SKIPPED_PARTS or any(part.endswith(".egg-info") for part in parts):
                continue
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def cache_dir() -> Path:
    configured = os.environ.get("NETATTACH_IMAGE_CACHE")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "netattach" / "images"


def node_image_archive() -> Path:
    given = os.environ.get("NETATTACH_TEST_IMAGE")
    if given:
        return Path(given)
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    archive = cache / f"netattach-image-{inputs_digest()}.tar"
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if archive.exists():
            return archive
        log = cache / f"{archive.name}.log"
        with log.open("wb") as stream:
            done = subprocess.run(
                ["bash", str(BUILD_SCRIPT), str(archive)],
                stdout=stream,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHON": sys.executable},
                timeout=BUILD_TIMEOUT,
                check=False,
            )
        if done.returncode != 0:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
            raise RuntimeError(f"scripts/build-image.sh failed ({log}):\n{tail}")
        # the newest few stay: trees of other branches on this machine may want them again
        kept = sorted(cache.glob("netattach-image-*.tar"), key=lambda p: p.stat().st_mtime)
        for old in kept[:-KEEP]:
            old.unlink(missing_ok=True)
            old.with_name(f"{old.name}.log").unlink(missing_ok=True)
    return archive
