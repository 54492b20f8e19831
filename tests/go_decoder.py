"""The Go decoder of tests/go/cnidecode, built for the test tier from the Go module proxy.

`build_decoder()` runs `go build` (GOFLAGS -mod=readonly: go.mod and go.sum as committed, the
modules they name fetched through GOPROXY into the module cache) into tests/go/.bin, under a name
that hashes go.mod, go.sum and every .go file: a warm run finds the binary and builds nothing, an
edit builds anew. Without `go` on PATH the tests that need it are skipped, saying so; nothing is
installed. A build that fails fails the test: CI machines have Go.

`Decoder.read(configs)` feeds any number of configs, one JSON text a line, through one process
(`cnidecode -batch`) and returns a reading per config (tests/go/cnidecode/decode.go says what a
reading holds).

The same binary is the value oracle of SEC-VALUES (tests/go/cnidecode/oracle.go):
`Decoder.addresses(queries)` reads addresses and CIDRs with Go's `net` and CNI's
`types.ParseCIDR`, `Decoder.links(names, netns)` resolves interface names with the plugins'
netlink `LinkByName` inside a network namespace (run there by `nsenter`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

GO_DIR = Path(__file__).resolve().parent / "go" / "cnidecode"
CACHE_DIR = Path(__file__).resolve().parent / "go" / ".bin"
PLUGINS_MODULE = "github.com/containernetworking/plugins"
CNI_MODULE = "github.com/containernetworking/cni"
# The first build downloads the modules and compiles them; on the shared 2-core machine that has
# taken under a minute.
BUILD_TIMEOUT = 900.0
READ_TIMEOUT = 300.0

Reading = dict[str, Any]
# A query for `cnidecode -addr`: ("ip" or "cidr", the text).
AddrQuery = tuple[str, str]


def source_hash(directory: Path = GO_DIR) -> str:
    """A hash of what the binary is built from: go.mod, go.sum and the .go files, by name."""
    digest = hashlib.sha256()
    files = [directory / "go.mod", directory / "go.sum", *sorted(directory.glob("*.go"))]
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def go_env() -> dict[str, str]:
    """The environment's Go settings, with go.mod and go.sum read-only (no edit, no surprise)."""
    flags = os.environ.get("GOFLAGS", "").split()
    flags = [flag for flag in flags if not flag.startswith("-mod=")] + ["-mod=readonly"]
    return {**os.environ, "GOFLAGS": " ".join(flags)}


def run_go(go: str, *args: str, check: bool) -> subprocess.CompletedProcess[str]:
    """`go args` in GO_DIR, with `go_env()` and BUILD_TIMEOUT."""
    return subprocess.run(
        [go, *args],
        cwd=GO_DIR,
        env=go_env(),
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=check,
    )


class Decoder:
    """A built cnidecode binary."""

    def __init__(self, binary: Path, go: str) -> None:
        self.binary = binary
        self.go = go

    def read(self, configs: Sequence[str]) -> list[Reading]:
        """One reading per config (each a JSON text on one line), in order."""
        for config in configs:
            if "\n" in config or "\r" in config:
                raise ValueError(f"a config must be one line: {config!r}")
        return self._lines(["-batch"], configs)

    def addresses(self, queries: Sequence[AddrQuery]) -> list[Reading]:
        """Go's reading of each (kind, text): `{"ok", "ip", "v4", "prefix", "bits"}` (oracle.go)."""
        lines = [json.dumps({"kind": kind, "text": text}) for kind, text in queries]
        return self._lines(["-addr"], lines)

    def links(self, names: Sequence[str], netns: str) -> list[Reading]:
        """netlink's `LinkByName` of each name inside the network namespace at path `netns`:
        `{"found", "name", "index"}` (oracle.go). Needs root."""
        lines = [json.dumps({"name": name}) for name in names]
        return self._lines(["-links"], lines, prefix=["nsenter", f"--net={netns}", "--"])

    def _lines(
        self, flags: Sequence[str], lines: Sequence[str], prefix: Sequence[str] = ()
    ) -> list[Reading]:
        """Run the binary with `flags` over `lines` (JSON texts), one answer a line."""
        if not lines:
            return []
        done = subprocess.run(
            [*prefix, str(self.binary), *flags],
            input="".join(line + "\n" for line in lines),
            capture_output=True,
            text=True,
            encoding="utf-8",
            timeout=READ_TIMEOUT,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"cnidecode {' '.join(flags)} exited {done.returncode}: {done.stderr}"
            )
        readings: list[Reading] = [json.loads(line) for line in done.stdout.splitlines()]
        if len(readings) != len(lines):
            raise RuntimeError(f"cnidecode gave {len(readings)} answers for {len(lines)}")
        return readings

    def modules(self) -> dict[str, str]:
        """The versions of Go and of the CNI modules the binary was built with."""
        done = subprocess.run(
            [str(self.binary), "-modules"], capture_output=True, text=True, check=True
        )
        versions: dict[str, str] = json.loads(done.stdout)
        return versions

    def module_dir(self, module: str) -> Path:
        """Where the module cache holds `module` at the version go.mod names."""
        done = run_go(self.go, "list", "-m", "-f", "{{.Dir}}", module, check=True)
        return Path(done.stdout.strip())

    def drift(self) -> subprocess.CompletedProcess[str]:
        """`cnidecode -drift`: the declared plugin structs against the plugins' source."""
        return subprocess.run(
            [str(self.binary), "-drift", str(self.module_dir(PLUGINS_MODULE))],
            capture_output=True,
            text=True,
            check=False,
        )


def build_decoder() -> Decoder:
    """The decoder for the current source, built when the cache lacks it; skips without Go."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("no Go toolchain on PATH: the differential test needs `go` (CI has it)")
    binary = CACHE_DIR / f"cnidecode-{source_hash()}"
    if not binary.exists():
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        partial = binary.with_name(f"{binary.name}.{os.getpid()}.partial")
        try:
            done = run_go(go, "build", "-o", str(partial), ".", check=False)
            if done.returncode != 0:
                pytest.fail(f"go build of {GO_DIR} failed:\n{done.stderr}", pytrace=False)
            partial.replace(binary)  # atomic: a concurrent run sees no half-written binary
        finally:
            partial.unlink(missing_ok=True)
        for stale in CACHE_DIR.glob("cnidecode-*"):
            if stale != binary and not stale.name.endswith(".partial"):
                stale.unlink(missing_ok=True)
    return Decoder(binary, go)


def checked_mix(
    total_of: Sequence[str], least: int, healthy: Callable[[Counter[str], int], None]
) -> Iterator[Counter[str]]:
    """For an oracle property's fixture to yield from: a counter of what its examples were.
    After the property, unless an example failed (counted as "failed"), the sum of the counts
    `total_of` is at least `least`, and `healthy(counter, that sum)` checks the mix."""
    seen: Counter[str] = Counter()
    yield seen
    if seen["failed"]:
        return
    total = sum(seen[kind] for kind in total_of)
    assert total >= least, seen
    healthy(seen, total)
