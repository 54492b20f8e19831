"""What a plugin was given, read from its own stdin, and what netattach kept of a pod.

`install_recorder` puts a recording plugin in the cluster's bin dir. With `target` it is a
transparent tee in front of a reference plugin (the bin dir is then searched first, so a NAD
still says `"type": "portmap"`), without one it is a pass-through probe like the harness's (which
logs timestamps only, not stdin).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.e2e.harness import Cluster, Pod
from tests.netns_fixtures import PLUGIN_DIR

RECORDER = "na-rec"

# Appended to three constants (NAME, LOG, TARGET) the installer writes first. One JSON line per
# call: the plugin's name, CNI_COMMAND, every CNI_* variable and the stdin config.
RECORDER_BODY = r"""
import json, os, subprocess, sys
data = sys.stdin.buffer.read()
try:
    conf = json.loads(data or b"{}")
except ValueError:
    conf = None
command = os.environ.get("CNI_COMMAND", "")
entry = {
    "plugin": NAME,
    "command": command,
    "env": {k: v for k, v in os.environ.items() if k.startswith("CNI_")},
    "stdin": conf,
}
with open(LOG, "a") as stream:
    stream.write(json.dumps(entry) + "\n")
if TARGET:
    sys.exit(subprocess.run([TARGET], input=data, check=False).returncode)
version = (conf or {}).get("cniVersion", "1.0.0")
if command == "VERSION":
    print(json.dumps({"cniVersion": version,
                      "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]}))
elif command == "ADD":
    print(json.dumps((conf or {}).get("prevResult") or {"cniVersion": version}))
"""


def install_recorder(cluster: Cluster, name: str, log: Path, *, target: Path | None = None) -> None:
    """A plugin `name` in the cluster's bin dir recording each call to `log`; with `target`, a tee
    that then runs `target` on the same stdin. The bin dir is moved to the front of `binDirs`
    (and so of the delegates' CNI_PATH), so a tee shadows the reference plugin of its name."""
    header = f"#!{sys.executable}\nNAME = {name!r}\nLOG = {str(log)!r}\n"
    header += f"TARGET = {str(target) if target is not None else ''!r}\n"
    path = cluster.bin / name
    path.write_text(header + RECORDER_BODY)
    path.chmod(0o755)
    cluster.settings["binDirs"] = [str(cluster.bin), str(PLUGIN_DIR)]


def tee(cluster: Cluster, plugin: str, log: Path) -> None:
    """A recorder in front of the reference plugin `plugin`, logging each call to `log`."""
    install_recorder(cluster, plugin, log, target=PLUGIN_DIR / plugin)


def recorded(log: Path, *, command: str | None = None, ifname: str | None = None) -> list[Any]:
    """The recorded calls, in order, optionally only one command's or one interface's."""
    if not log.exists():
        return []
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    return [
        c
        for c in calls
        if (command is None or c["command"] == command)
        and (ifname is None or c["env"].get("CNI_IFNAME") == ifname)
    ]


def cache_record(cluster: Cluster, network: str, pod: Pod, ifname: str) -> Any:
    """The cached result of the pod's attachment to `network` as `ifname`."""
    path = cluster.state / "cache" / "results" / f"{network}:{pod.container_id}:{ifname}"
    return json.loads(path.read_text())


def pod_record(cluster: Cluster, pod: Pod) -> Any:
    """The daemon's or the plugin's record of the pod (its state file)."""
    return json.loads((cluster.state / "pods" / f"{pod.container_id}.json").read_text())
