"""`python -m bench.side_by_side --quick`: netattach on a real API server, as `make bench` runs it.

The control plane `make k8s` builds runs inside the run's own node namespace; the result must
have every contender's ADD and DEL summary for each pod shape, ratios to the baseline (netattach
thick while the Go module proxy does not serve Multus, and the note that says so), the server's
version, no leak; and nothing of the run may be left: no namespace or process with its tag (etcd,
kube-apiserver and the controller manager included), no work directory. With Multus given by
hand (NETATTACH_BENCH_MULTUS; stand-ins here, each checking what the real binary needs: the
kubeconfig, the in-cluster credentials and node name, the daemon's socket), both Multus contenders
run and Multus thick is the baseline.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
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


def require_k8s() -> None:
    """Skip unless the Kubernetes binaries the side-by-side runs are built."""
    missing = cluster.missing_binaries(cluster.build_dir())
    if missing:
        pytest.skip(f"{', '.join(missing)} not built: run `make k8s`")


def side_by_side_quick(out: Path, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """`python -m bench.side_by_side --quick` in `env`, writing its results to `out`."""
    return subprocess.run(
        [sys.executable, "-m", "bench.side_by_side", "--quick", "--output", str(out)],
        cwd=ROOT,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


def wait_no_leftovers(tag: str, timeout: float = 20.0) -> list[str]:
    """`leftovers(tag)` once empty, or as it is after `timeout` (processes take a moment to go)."""
    deadline = time.monotonic() + timeout
    while (left := leftovers(tag)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@pytest.mark.timeout(RUN_TIMEOUT + 30)
def test_quick_side_by_side_on_a_real_api_server_leaves_nothing(
    netns_ready: None, tmp_path: Path
) -> None:
    require_k8s()
    out = tmp_path / "side.json"

    done = side_by_side_quick(out, os.environ)

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
    assert wait_no_leftovers(part["tag"]) == []


# Stand-ins for Multus's three binaries, to prove the harness runs them as it says (the Go module
# proxy does not serve Multus): each checks what the real one needs and answers as a meta-plugin.
THIN_STANDIN = """\
#!{python}
import json, os, sys
conf = json.load(sys.stdin)
assert conf["type"] == "multus" and os.path.isfile(conf["kubeconfig"]), conf
if os.environ["CNI_COMMAND"] == "ADD":
    print(json.dumps({{"cniVersion": conf["cniVersion"], "interfaces": [{{"name": "eth0"}}]}}))
"""
DAEMON_STANDIN = """\
#!{python}
import json, os, socket, sys
# What rest.InClusterConfig reads, as the harness gives it.
secrets = "/run/secrets/kubernetes.io/serviceaccount"
assert open(secrets + "/token").read() and open(secrets + "/ca.crt").read()
assert os.environ["KUBERNETES_SERVICE_HOST"] == "127.0.0.1", os.environ
assert os.environ["MULTUS_NODE_NAME"]
config = json.load(open(sys.argv[sys.argv.index("-config") + 1]))
server = socket.socket(socket.AF_UNIX)
server.bind(os.path.join(config["socketDir"], "multus.sock"))
server.listen(8)
while True:
    conn, _ = server.accept()
    with conn, conn.makefile("rw") as stream:
        request = json.loads(stream.readline())
        reply = {{"cniVersion": request["cniVersion"], "interfaces": [{{"name": "eth0"}}]}}
        stream.write(json.dumps(reply if request["command"] == "ADD" else {{}}) + "\\n")
"""
SHIM_STANDIN = """\
#!{python}
import json, os, socket, sys
conf = json.load(sys.stdin)
client = socket.socket(socket.AF_UNIX)
client.connect(os.path.join(conf["daemonSocketDir"], "multus.sock"))
with client, client.makefile("rw") as stream:
    command = os.environ["CNI_COMMAND"]
    stream.write(json.dumps({{"command": command, "cniVersion": conf["cniVersion"]}}) + "\\n")
    stream.flush()
    reply = json.loads(stream.readline())
if command == "ADD":
    print(json.dumps(reply))
"""


@pytest.mark.timeout(RUN_TIMEOUT + 30)
def test_multus_given_by_hand_runs_thin_and_thick_and_is_the_baseline(
    netns_ready: None, tmp_path: Path
) -> None:
    require_k8s()
    binaries = tmp_path / "multus"
    binaries.mkdir()
    for name, source in (
        ("multus", THIN_STANDIN),
        ("multus-daemon", DAEMON_STANDIN),
        ("multus-shim", SHIM_STANDIN),
    ):
        (binaries / name).write_text(source.format(python=sys.executable))
        (binaries / name).chmod(0o755)
    out = tmp_path / "side.json"
    secrets_before = side_by_side.SECRETS.exists()

    done = side_by_side_quick(out, {**os.environ, side_by_side.MULTUS_ENV: str(binaries)})

    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    part = json.loads(out.read_text())
    assert part["contenders"] == ["floor", "thick", "thin", "multus-thin", "multus-thick"]
    assert part["baseline"] == "multus-thick"
    for shape in part["pods"].values():
        ratio = shape["ratio_to_baseline"]
        assert ratio["multus-thick"]["add_p50"] == pytest.approx(1.0)
        thick, multus = shape["summary"]["thick"], shape["summary"]["multus-thick"]
        assert ratio["thick"]["add_p50"] == pytest.approx(
            thick["add"]["p50"] / multus["add"]["p50"]
        )
    assert part["leaks"] == []
    assert side_by_side.SECRETS.exists() == secrets_before  # its mount point, if made, is gone
    assert wait_no_leftovers(part["tag"]) == []
