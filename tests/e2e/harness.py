"""A one-node "cluster" for end-to-end tests of the thin plugin.

`Cluster` owns a manifest directory (Pods and NADs as YAML, status files beside them), a networks
directory (on-disk CNI configs), a state directory (pod records, the attachment cache, locks), a
host-local data dir, a bin dir for script plugins, and a "node" network namespace. `cni()` runs
`netattach-thin` as `netattach install-cni` installs it (the launcher, RT-INSTALLED; not the
virtualenv's entry point) inside the node namespace exactly as a container runtime would:
`CNI_*` in the environment, the thin plugin's own CNI config on stdin. Every host-side effect
(bridges, host veths, sysctls) stays in namespaces the test made, and every IP is allocated in
the test's own host-local data dir.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from netattach.guard import delegate_policy
from netattach.netns import links
from tests.netns_fixtures import PLUGIN_DIR, Node, unique

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
POLICY_FOR_ANNOTATION = "k8s.v1.cni.cncf.io/policy-for"

DEFAULT_NETWORK = "cluster-default"
DEFAULT_SUBNET = "10.80.0.0/24"
DEFAULT_GATEWAY = "10.80.0.1"
# A generous bound for one thin-plugin call: it runs every delegate of every attachment.
CALL_TIMEOUT = 60.0
PROBE = "na-probe"

# A chained plugin for tests: passes prevResult through on ADD, logs every call with monotonic
# timestamps (comparable across processes) to `log`, sleeps `sleep` seconds, and fails DEL while
# the file `failDelWhile` exists.
PROBE_SOURCE = """\
#!{python}
import json, os, sys, time
command = os.environ.get("CNI_COMMAND", "")
conf = json.loads(sys.stdin.read() or "{{}}")
version = conf.get("cniVersion", "1.0.0")
log = conf.get("log")
def note(what):
    if log:
        with open(log, "a") as stream:
            stream.write("%d %s %s %s %s\\n" % (
                time.monotonic_ns(), what, command,
                os.environ.get("CNI_CONTAINERID", "-"), os.environ.get("CNI_IFNAME", "-")))
if command == "VERSION":
    print(json.dumps({{"cniVersion": version,
                      "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]}}))
    sys.exit(0)
note("start")
time.sleep(float(conf.get("sleep", 0)))
flag = conf.get("failDelWhile")
if command == "DEL" and flag and os.path.exists(flag):
    note("fail")
    print(json.dumps({{"cniVersion": version, "code": 140, "msg": "probe refuses DEL",
                      "details": "while " + flag + " exists"}}))
    sys.exit(1)
note("end")
if command == "ADD":
    print(json.dumps(conf.get("prevResult") or {{"cniVersion": version}}))
"""


@functools.cache
def installed_thin() -> Path:
    """`netattach-thin` as `netattach install-cni --bin-dir` writes it, once per test process:
    what a runtime executes (RT-INSTALLED). The virtualenv's console script imports differently
    (site processing, no `-I`), so a test of it proves nothing about the installed plugin."""
    bin_dir = Path(tempfile.mkdtemp(prefix="na-cni-bin-"))
    atexit.register(shutil.rmtree, bin_dir, True)
    subprocess.run(
        [str(VENV_BIN / "netattach"), "install-cni", "--bin-dir", str(bin_dir)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return bin_dir / "netattach-thin"


@dataclasses.dataclass(frozen=True, slots=True)
class Reply:
    """What the runtime reads back from one thin-plugin call."""

    rc: int
    out: Any  # stdout as JSON; None when stdout was empty
    stderr: str

    @property
    def code(self) -> int | None:
        """The CNI error code of a failure, None for a success."""
        if self.rc == 0 or not isinstance(self.out, dict):
            return None
        code = self.out.get("code")
        return code if isinstance(code, int) else None

    @property
    def text(self) -> str:
        """An error's msg and details together, for matching."""
        if not isinstance(self.out, dict):
            return ""
        return f"{self.out.get('msg', '')} {self.out.get('details', '')}"


def assert_refused(reply: Reply, msg: str, code: int = 102) -> Reply:
    """`reply`, asserted to be a refusal with the CNI error `code` and the message `msg`."""
    assert reply.rc == 1, reply
    assert reply.code == code, reply
    assert reply.out["msg"] == msg, reply
    return reply


@dataclasses.dataclass(frozen=True, slots=True)
class PodProbe:
    """One log line of the probe plugin."""

    ns: int
    what: str  # start, end, fail
    command: str
    container_id: str
    ifname: str


def host_local(ipam_dir: Path, subnet: str, **extra: Any) -> dict[str, Any]:
    return {"type": "host-local", "dataDir": str(ipam_dir), "subnet": subnet, **extra}


def bridge_list(
    name: str | None, ipam: dict[str, Any], *more: dict[str, Any], **bridge_extra: Any
) -> dict[str, Any]:
    """A 1.0.0 config list: a bridge of its own (`unique("br")`) with `ipam`, then `more`."""
    plugin = {"type": "bridge", "bridge": unique("br"), "ipam": ipam, **bridge_extra}
    raw: dict[str, Any] = {"cniVersion": "1.0.0", "plugins": [plugin, *more]}
    if name is not None:
        raw["name"] = name
    return raw


@dataclasses.dataclass(frozen=True, slots=True)
class Pod:
    """A pod of the manifest directory with its sandbox (network namespace) and container."""

    ns: str
    name: str
    uid: str
    netns: str
    container_id: str


def probe(log: Path, *, sleep: float = 0.0, fail_del_while: Path | None = None) -> dict[str, Any]:
    """The probe plugin's entry in a config list."""
    raw: dict[str, Any] = {"type": PROBE, "log": str(log), "sleep": sleep}
    if fail_del_while is not None:
        raw["failDelWhile"] = str(fail_del_while)
    return raw


def net_a(cluster: Cluster) -> None:
    """NAD `blue/net-a`, the network most tests attach: a bridge list with host-local on
    10.81.0.0/24."""
    cluster.add_nad("blue", "net-a", bridge_list(None, host_local(cluster.ipam, "10.81.0.0/24")))


class Cluster:
    def __init__(self, root: Path, node: Node, ipam_dir: Path, make_pod: Callable[[], str]):
        self.root = root
        self.node = node
        self.ipam = ipam_dir
        self.manifests = root / "manifests"
        self.networks = root / "networks"
        self.state = root / "state"
        self.bin = root / "bin"
        for directory in (self.manifests, self.networks, self.state, self.bin):
            directory.mkdir(parents=True, exist_ok=True)
        self._make_pod = make_pod
        self.pods: list[str] = []
        self.settings: dict[str, Any] = {
            "clusterNetwork": DEFAULT_NETWORK,
            "networksDir": str(self.networks),
            "binDirs": [str(PLUGIN_DIR), str(self.bin)],
            "stateDir": str(self.state),
            "namespaceIsolation": True,
            "globalNamespaces": ["other"],
            "delegateTimeout": 30,
            "feed": {"directory": str(self.manifests)},
            # The tests' own plugins (na-probe, na-rec, ...) are no reference plugins: the delegate
            # policy runs them because they are listed, as an operator lists what it installs.
            "delegatePolicy": {"types": [*delegate_policy.DEFAULT_TYPES, "na-*"]},
        }
        self.default_bridge = unique("br")
        self.write_network_file(
            "00-default.conflist",
            {
                "cniVersion": "1.0.0",
                "name": DEFAULT_NETWORK,
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": self.default_bridge,
                        "ipam": host_local(
                            ipam_dir,
                            DEFAULT_SUBNET,
                            gateway=DEFAULT_GATEWAY,
                            routes=[{"dst": "0.0.0.0/0"}],
                        ),
                    }
                ],
            },
        )
        probe = self.bin / PROBE
        probe.write_text(PROBE_SOURCE.format(python=sys.executable))
        probe.chmod(0o755)
        self._lock = threading.Lock()

    # -- the cluster's objects ----------------------------------------------------------------

    def _write_manifest(self, filename: str, obj: Mapping[str, Any]) -> None:
        path = self.manifests / filename
        tmp = path.with_name("." + path.name)
        tmp.write_text(yaml.safe_dump(dict(obj), sort_keys=False))
        tmp.rename(path)

    def add_nad(
        self,
        ns: str,
        name: str,
        config: Mapping[str, Any] | str | None,
        *,
        spec: bool = True,
    ) -> None:
        """A NAD; `config` a dict (dumped to JSON), a raw string, or None (spec without config).
        `spec=False` writes no `spec` at all (standard §3.2.4)."""
        obj: dict[str, Any] = {
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": ns},
        }
        if spec:
            body: dict[str, Any] = {}
            if config is not None:
                body["config"] = config if isinstance(config, str) else json.dumps(config)
            obj["spec"] = body
        self._write_manifest(f"nad-{ns}-{name}.yaml", obj)

    def add_pod(
        self,
        ns: str,
        name: str,
        uid: str,
        networks: str | Sequence[Mapping[str, Any]] | None,
        *,
        labels: Mapping[str, str] | None = None,
        containers: Sequence[Mapping[str, Any]] | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        """A Pod with `metadata.uid` and, unless None, the selection annotation (a list is
        written as its JSON form), `labels`, other `annotations` and `spec.containers`. Writing
        it again with the same names replaces it (a relabelled pod)."""
        metadata: dict[str, Any] = {"name": name, "namespace": ns, "uid": uid}
        if labels:
            metadata["labels"] = dict(labels)
        written = dict(annotations or {})
        if networks is not None:
            text = networks if isinstance(networks, str) else json.dumps(list(networks))
            written[NETWORKS_ANNOTATION] = text
        if written:
            metadata["annotations"] = written
        obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata}
        if containers is not None:
            obj["spec"] = {"containers": [dict(c) for c in containers]}
        self._write_manifest(f"pod-{ns}-{name}.yaml", obj)

    def add_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """A Namespace with `labels`; writing it again relabels it."""
        metadata: dict[str, Any] = {"name": name}
        if labels:
            metadata["labels"] = dict(labels)
        obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}
        self._write_manifest(f"ns-{name}.yaml", obj)

    def add_policy(
        self,
        ns: str,
        name: str,
        spec: Mapping[str, Any],
        policy_for: str | None,
        *,
        uid: str | None = None,
    ) -> str:
        """A MultiNetworkPolicy with `spec` and, unless None, the `policy-for` annotation; its
        UID (`uid-policy-<ns>-<name>` unless given). Writing it again changes it."""
        policy_uid = uid or f"uid-policy-{ns}-{name}"
        metadata: dict[str, Any] = {"name": name, "namespace": ns, "uid": policy_uid}
        if policy_for is not None:
            metadata["annotations"] = {POLICY_FOR_ANNOTATION: policy_for}
        obj = {
            "apiVersion": "k8s.cni.cncf.io/v1beta1",
            "kind": "MultiNetworkPolicy",
            "metadata": metadata,
            "spec": dict(spec),
        }
        self._write_manifest(f"policy-{ns}-{name}.yaml", obj)
        return policy_uid

    def delete_policy(self, ns: str, name: str) -> None:
        """Remove the MultiNetworkPolicy's manifest (`add_policy`); idempotent."""
        (self.manifests / f"policy-{ns}-{name}.yaml").unlink(missing_ok=True)

    def write_network_file(self, filename: str, config: Mapping[str, Any]) -> Path:
        path = self.networks / filename
        path.write_text(json.dumps(config))
        return path

    def pod(
        self,
        ns: str,
        name: str,
        networks: str | Sequence[Mapping[str, Any]] | None,
        *,
        uid: str | None = None,
        labels: Mapping[str, str] | None = None,
        containers: Sequence[Mapping[str, Any]] | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> Pod:
        """A Pod manifest plus a fresh sandbox and container ID for it."""
        pod_uid = uid or f"uid-{name}"
        self.add_pod(
            ns,
            name,
            pod_uid,
            networks,
            labels=labels,
            containers=containers,
            annotations=annotations,
        )
        return Pod(ns, name, pod_uid, self.new_pod_netns(), f"na-ctr-{secrets.token_hex(6)}")

    def new_pod_netns(self) -> str:
        with self._lock:
            path = self._make_pod()
            self.pods.append(path)
        return path

    # -- CNI calls ------------------------------------------------------------------------------

    def config(self, cni_version: str = "1.0.0", **extra: Any) -> dict[str, Any]:
        """The thin plugin's own CNI config, as the runtime reads it from its config dir."""
        return {
            "cniVersion": cni_version,
            "name": "netattach",
            "type": "netattach-thin",
            "settings": json.loads(json.dumps(self.settings)),
            **extra,
        }

    def cni(
        self,
        command: str,
        pod_netns: str = "",
        container_id: str = "",
        ns: str = "",
        pod: str = "",
        *,
        uid: str | None = None,
        ifname: str = "eth0",
        config: Mapping[str, Any] | None = None,
        ignore_unknown: bool = True,
        interpreter_flags: Sequence[str] = (),
    ) -> Reply:
        """One call of the thin plugin inside the node namespace; `uid` None passes the pod's
        default uid (`uid-<pod>`), "" passes none; `ignore_unknown=False` leaves
        `IgnoreUnknown=1` out of CNI_ARGS (a runtime that does not send it). With
        `interpreter_flags` (`-X importtime`), the launcher runs under its own interpreter line
        plus those flags."""
        environ = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "CNI_COMMAND": command,
            "CNI_PATH": str(PLUGIN_DIR),
        }
        if container_id:
            environ["CNI_CONTAINERID"] = container_id
        if pod_netns:
            environ["CNI_NETNS"] = pod_netns
        if ifname and command not in ("GC", "STATUS", "VERSION"):
            environ["CNI_IFNAME"] = ifname
        if ns or pod:
            args = ["IgnoreUnknown=1"] if ignore_unknown else []
            args += [f"K8S_POD_NAMESPACE={ns}", f"K8S_POD_NAME={pod}"]
            pod_uid = f"uid-{pod}" if uid is None else uid
            if pod_uid:
                args.append(f"K8S_POD_UID={pod_uid}")
            environ["CNI_ARGS"] = ";".join(args)
        stdin = json.dumps(dict(config) if config is not None else self.config()).encode()
        plugin = [str(installed_thin())]
        if interpreter_flags:
            shebang = installed_thin().read_text().splitlines()[0].removeprefix("#!").split()
            plugin = [*shebang, *interpreter_flags, *plugin]
        proc = subprocess.run(
            ["nsenter", f"--net={self.node.path}", "--", *plugin],
            input=stdin,
            env=environ,
            capture_output=True,
            timeout=CALL_TIMEOUT,
            check=False,
        )
        text = proc.stdout.decode()
        return Reply(
            rc=proc.returncode,
            out=json.loads(text) if text.strip() else None,
            stderr=proc.stderr.decode(errors="replace"),
        )

    def run(self, command: str, pod: Pod, **kw: Any) -> Reply:
        """`command` for `pod`, with its own uid unless `uid=` says otherwise."""
        kw.setdefault("uid", pod.uid)
        return self.cni(command, pod.netns, pod.container_id, pod.ns, pod.name, **kw)

    def add(self, pod: Pod, **kw: Any) -> Reply:
        return self.run("ADD", pod, **kw)

    def delete(self, pod: Pod, **kw: Any) -> Reply:
        return self.run("DEL", pod, **kw)

    def check(self, pod: Pod, **kw: Any) -> Reply:
        return self.run("CHECK", pod, **kw)

    def gc(self, valid_container_ids: Sequence[str]) -> Reply:
        valid = [{"containerID": cid, "ifname": "eth0"} for cid in valid_container_ids]
        config = self.config("1.1.0", **{"cni.dev/valid-attachments": valid})
        return self.cni("GC", config=config)

    # -- what is left ---------------------------------------------------------------------------

    def status(self, ns: str, pod: str) -> list[dict[str, Any]] | None:
        path = self.manifests / "status" / ns / f"{pod}.json"
        if not path.exists():
            return None
        raw = json.loads(path.read_text())
        assert isinstance(raw, list)
        return raw

    def written_status(self, ns: str, pod: str) -> list[dict[str, Any]]:
        """The pod's status, asserted to be written."""
        status = self.status(ns, pod)
        assert status is not None, f"no status of {ns}/{pod}"
        return status

    def interfaces(self, pod_netns: str) -> dict[str, links.InterfaceState]:
        """The pod's interfaces other than `lo`."""
        found = links.read_interfaces(pod_netns)
        return {name: state for name, state in found.items() if name != "lo"}

    def routes(self, pod_netns: str, *selector: str) -> list[dict[str, Any]]:
        """`ip -j route show [selector]` inside the pod."""
        out = subprocess.run(
            ["nsenter", f"--net={pod_netns}", "--", "ip", "-j", "route", "show", *selector],
            capture_output=True,
            check=True,
            timeout=10,
        ).stdout
        raw = json.loads(out or b"[]")
        assert isinstance(raw, list)
        return raw

    def allocations(self) -> list[str]:
        """host-local's allocations as `network/ip` (its reservation bookkeeping excluded)."""
        found: list[str] = []
        for path in self.ipam.rglob("*"):
            if path.is_file() and not path.name.startswith(("last_reserved_ip", "lock")):
                found.append(f"{path.parent.name}/{path.name}")
        return sorted(found)

    def pod_records(self) -> list[str]:
        return sorted(p.name for p in (self.state / "pods").glob("*") if not p.name.startswith("."))

    def cache_records(self) -> list[str]:
        directory = self.state / "cache" / "results"
        return sorted(p.name for p in directory.glob("*") if not p.name.startswith("."))

    def status_files(self) -> list[str]:
        directory = self.manifests / "status"
        return sorted(str(p.relative_to(directory)) for p in directory.rglob("*.json"))

    def premade_bridge(self, name: str, mac: str) -> None:
        """The bridge `name` made beforehand, as nodes that pre-create their pods' bridges do:
        with an address of its own (a kernel bridge whose address was never set takes the
        smallest MAC of its ports, so a CHECK comparing with an earlier result would see it
        change as pods join), up, and taking no router adverts. The bridge plugin writes 0 to
        accept_ra itself, a node change netattach refuses on a bridge where it is not 0 already
        (SEC-VALUES)."""
        node = ["nsenter", f"--net={self.node.path}", "--"]
        for args in (
            ["ip", "link", "add", name, "type", "bridge"],
            ["ip", "link", "set", name, "address", mac],
            ["ip", "link", "set", name, "up"],
            ["sh", "-c", f"echo 0 > /proc/sys/net/ipv6/conf/{name}/accept_ra"],
        ):
            subprocess.run([*node, *args], check=True, timeout=10)

    def node_links(self) -> list[str]:
        """Every link in the node namespace but `lo`: bridges and host veths plugins made."""
        return sorted(name for name in links.read_interfaces(self.node.path) if name != "lo")

    def host_veths(self) -> list[str]:
        found = links.read_interfaces(self.node.path)
        return sorted(name for name, state in found.items() if state.kind == "veth")

    def sandbox_interfaces(self) -> list[str]:
        found: list[str] = []
        for pod in self.pods:
            if os.path.exists(pod):  # a test may have removed the sandbox, as runtimes do
                found += [f"{pod}:{name}" for name in self.interfaces(pod)]
        return sorted(found)

    def leftovers(self) -> dict[str, list[str]]:
        """Everything an attachment holds; all lists empty once every pod is gone."""
        return {
            "allocations": self.allocations(),
            "pod records": self.pod_records(),
            "cache records": self.cache_records(),
            "sandbox interfaces": self.sandbox_interfaces(),
            "host veths": self.host_veths(),
            "status files": self.status_files(),
        }

    def nothing_ran(self) -> None:
        """Assert that no delegate ever ran: no link on the node (the bridge plugin creates its
        bridge first), no attachment record, nothing in the sandboxes, no allocation."""
        assert self.node_links() == []
        assert not (self.state / "cache").exists() or self.cache_records() == []
        assert self.leftovers() == NOTHING

    def probe_log(self, path: Path) -> list[PodProbe]:
        if not path.exists():
            return []
        lines = path.read_text().splitlines()
        found: list[PodProbe] = []
        for line in lines:
            stamp, what, command, cid, ifname = line.split()
            found.append(PodProbe(int(stamp), what, command, cid, ifname))
        return found


NOTHING: dict[str, list[str]] = {
    "allocations": [],
    "pod records": [],
    "cache records": [],
    "sandbox interfaces": [],
    "host veths": [],
    "status files": [],
}
