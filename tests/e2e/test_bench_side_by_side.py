"""`python -m bench.side_by_side --quick`: netattach on a real API server, as `make bench` runs it.

The control plane `make k8s` builds runs inside the run's own node namespace; the result must
have every contender's ADD and DEL summary for each pod shape, ratios to the baseline (netattach
thick while the Go module proxy does not serve Multus, and the note that says so), the server's
version, no leak; and nothing of the run may be left: no namespace or process with its tag (etcd,
kube-apiserver and the controller manager included), no work directory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bench import side_by_side

from netattach.netns import namespace
from tests.e2e.harness import ROOT
from tests.kube import cluster

pytestmark = pytest.mark.netns

RUN_TIMEOUT = 240.0


def leftovers(tag: str) -> list[str]:
    """Namespaces named after the run, processes running from its work directory, the directory."""
    marker, work = f"na-{tag}-", f"/tmp/na-bench-{tag}"
    found = [f"netns {n}" for n in namespace.names() if marker in n]
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes() if entry.name.isdigit() else b""
        except OSError:
            continue
        if work.encode() in cmdline:
            found.append(f"process {entry.name}: {cmdline[:120]!r}")
    if Path(work).exists():
        found.append(f"directory {work}")
    return found


@pytest.mark.timeout(RUN_TIMEOUT + 30)
def test_quick_side_by_side_on_a_real_api_server_leaves_nothing(
    netns_ready: None, tmp_path: Path
) -> None:
    missing = cluster.missing_binaries(cluster.build_dir())
    if missing:
        pytest.skip(f"{', '.join(missing)} not built: run `make k8s`")
    out = tmp_path / "side.json"

    done = subprocess.run(
        [sys.executable, "-m", "bench.side_by_side", "--quick", "--output", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    part = json.loads(out.read_text())
    assert part["leaks"] == []
    assert part["server_version"].startswith("v1.")
    assert part["contenders"][:3] == ["floor", "thick", "thin"]
    if "multus-thick" not in part["contenders"]:
        assert part["baseline"] == "thick"
        assert any(side_by_side.MULTUS_MODULE in note for note in part["notes"])
    options = side_by_side.QUICK
    assert list(part["pods"]) == [str(n) for n in options.counts]
    for shape in part["pods"].values():
        assert list(shape["summary"]) == part["contenders"]
        for who, ops in shape["summary"].items():
            for op in ("add", "del"):
                assert ops[op]["n"] == options.runs
                assert 0 < ops[op]["p50"] <= ops[op]["p90"]
                assert len(shape["samples_ms"][who][op]) == options.runs
        assert shape["ratio_to_baseline"][part["baseline"]]["add_p50"] == pytest.approx(1.0)
    assert "side by side on a real API server" in done.stdout
    deadline = time.monotonic() + 20
    while (left := leftovers(part["tag"])) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == []
