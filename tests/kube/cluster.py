"""A real Kubernetes control plane on loopback for the tests: etcd, kube-apiserver,
kube-controller-manager and (where pods are placed) kube-scheduler, built from their Go modules by
`make k8s` (scripts/build-k8s.sh).

`LocalCluster(directory, bin_dir).start()`:
- makes its own CA and certificates with the openssl CLI: the API server's serving certificate
  (127.0.0.1, localhost, the in-cluster names), an admin client certificate (group
  `system:masters`) and a service-account signing key;
- starts etcd (loopback, ephemeral ports, its data in `directory`) and kube-apiserver with RBAC on
  (`--authorization-mode=Node,RBAC`), client certificates, a static token file and the
  service-account key;
- writes two kubeconfigs, everything embedded so a copy works anywhere: `admin_kubeconfig`
  (the client certificate) and `token_kubeconfig` (a bearer token whose user, not in any
  privileged group, is bound to `cluster-admin` through RBAC);
- applies deploy/crds and waits until both resources are served;
- starts kube-controller-manager with the controllers a test namespace lives by: namespace
  (a deleted namespace's objects go, then the namespace), serviceaccount and
  serviceaccount-token (each namespace's `default` ServiceAccount, which pod admission needs).

Nothing else by default (no scheduler, no kubelet): pods stay Pending unless a test writes their
status, as the in-repo fake's do. A subclass with `schedules = True` also runs kube-scheduler
(its default profile: it binds pods to nodes and allocates their ResourceClaims);
`scheduler_stopped()` stops it for a while. `stop()` ends the processes; their logs stay in
`directory`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.kube.api import Connection
from tests.kube.kube_http import KubeHttp
from tests.kube.real_api import connection_from_kubeconfig

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "scripts" / "build-k8s.sh"
CRDS = ROOT / "deploy" / "crds"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
TOKEN_USER = "netattach-tests"
ADMIN_USER = "netattach-admin"
SERVICE_CIDR = "10.0.0.0/24"
START_TIMEOUT = 90.0


class ClusterError(RuntimeError):
    """The control plane did not come up; the message carries the end of the component's log."""


def build_dir() -> Path:
    """Where scripts/build-k8s.sh puts (or put) the binaries of the pinned versions."""
    done = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "dir"], capture_output=True, text=True, check=True
    )
    return Path(done.stdout.strip())


def missing_binaries(bin_dir: Path) -> list[str]:
    return [name for name in BINARIES if not (bin_dir / name).is_file()]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def end_process(proc: subprocess.Popen[bytes] | None, grace: float = 15.0) -> None:
    """Stop `proc` if it still runs: SIGTERM, then SIGKILL when it has not ended within `grace`
    seconds; reaped either way."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(grace)


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


class LocalCluster:
    """etcd + kube-apiserver + kube-controller-manager on 127.0.0.1 (see the module docstring)."""

    # What kube-controller-manager runs, and more flags for it: a subclass names its own.
    controllers: tuple[str, ...] = (
        "namespace-controller",
        "serviceaccount-controller",
        "serviceaccount-token-controller",
    )
    controller_flags: tuple[str, ...] = ()
    # kube-scheduler too (the module docstring): a subclass whose pods it places says so.
    schedules: bool = False

    def __init__(self, directory: Path, bin_dir: Path) -> None:
        self.dir = directory
        self.bin = bin_dir
        self.pki = directory / "pki"
        self.token = secrets.token_urlsafe(24)
        self.api_port = free_port()
        self.server = f"https://127.0.0.1:{self.api_port}"
        self.admin_kubeconfig = directory / "admin.kubeconfig"
        self.token_kubeconfig = directory / "token.kubeconfig"
        self._procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._etcd_url = ""

    # -- set-up ---------------------------------------------------------------------------------

    def _certificates(self) -> None:
        pki = self.pki
        pki.mkdir(parents=True, exist_ok=True)
        ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
        _openssl(
            "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "30",
            "-subj", "/CN=netattach-test-ca",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            cwd=pki,
        )  # fmt: skip
        sans = "IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default"
        sans += ",DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
        leaves = {
            "apiserver": ("/CN=kube-apiserver", "serverAuth", sans),
            "admin": (f"/O=system:masters/CN={ADMIN_USER}", "clientAuth", None),
        }
        for name, (subject, usage, alt) in leaves.items():
            _openssl(
                "req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject,
                cwd=pki,
            )  # fmt: skip
            ext = [
                "basicConstraints=critical,CA:FALSE",
                "keyUsage=critical,digitalSignature,keyEncipherment",
                f"extendedKeyUsage={usage}",
                "subjectKeyIdentifier=hash",
                "authorityKeyIdentifier=keyid,issuer",
            ]
            if alt:
                ext.append(f"subjectAltName={alt}")
            (pki / f"{name}.ext").write_text("\n".join(ext) + "\n", encoding="utf-8")
            _openssl(
                "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-set_serial", str(secrets.randbits(63)), "-days", "30",
                "-extfile", f"{name}.ext", "-out", f"{name}.crt",
                cwd=pki,
            )  # fmt: skip
        _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key", cwd=pki)
        _openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)
        # The static token file: token,user,uid[,"group1,group2"]. No group: RBAC decides.
        (pki / "tokens.csv").write_text(
            f"{self.token},{TOKEN_USER},{TOKEN_USER}\n", encoding="utf-8"
        )

    def _kubeconfig(self, path: Path, user: str, credentials: dict[str, str]) -> None:
        config: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "netattach-test",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": _b64(self.pki / "ca.crt"),
                    },
                }
            ],
            "users": [{"name": user, "user": credentials}],
            "contexts": [
                {
                    "name": "netattach-test",
                    "context": {"cluster": "netattach-test", "user": user, "namespace": "default"},
                }
            ],
            "current-context": "netattach-test",
        }
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        path.chmod(0o600)

    def _spawn(self, name: str, args: Sequence[str]) -> None:
        log = (self.dir / f"{name}.log").open("ab")  # a restarted part adds to its log
        proc = subprocess.Popen(
            [str(self.bin / name), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        self._procs.append((name, proc))

    def _end(self, name: str) -> None:
        for each, proc in list(self._procs):
            if each == name:
                end_process(proc)
                self._procs.remove((each, proc))

    def _failed(self, name: str, what: str) -> ClusterError:
        log = self.dir / f"{name}.log"
        tail = log.read_text(errors="replace").splitlines()[-30:] if log.exists() else []
        return ClusterError(f"{name}: {what}\n" + "\n".join(tail))

    def _alive(self, name: str) -> None:
        for each, proc in self._procs:
            if each == name and proc.poll() is not None:
                raise self._failed(name, f"exited with {proc.returncode}")

    def _etcd(self) -> str:
        client, peer = free_port(), free_port()
        client_url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        self._spawn(
            "etcd",
            [
                "--name=default",
                f"--data-dir={self.dir / 'etcd'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                "--log-level=warn",
                # A test cluster's data dies with it: no fsync on the machine others share.
                "--unsafe-no-fsync",
            ],
        )
        return client_url

    def _apiserver(self, etcd_url: str) -> None:
        pki = self.pki
        self._spawn(
            "kube-apiserver",
            [
                "--advertise-address=127.0.0.1",
                # The `kubernetes` Service's endpoints may not be loopback: nothing reconciles
                # them (no pod here reaches the API through the Service).
                "--endpoint-reconciler-type=none",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                f"--etcd-servers={etcd_url}",
                f"--cert-dir={self.dir / 'apiserver'}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                "--authorization-mode=Node,RBAC",
                f"--token-auth-file={pki / 'tokens.csv'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                # deploy/daemonset.yaml's pod is privileged (hostNetwork, the node's netns).
                "--allow-privileged=true",
                "--profiling=false",
            ],
        )

    def _controller_manager(self) -> None:
        self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={self.admin_kubeconfig}",
                f"--authentication-kubeconfig={self.admin_kubeconfig}",
                f"--authorization-kubeconfig={self.admin_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--cert-dir={self.dir / 'controller-manager'}",
                "--leader-elect=false",
                f"--controllers={','.join(self.controllers)}",
                f"--service-account-private-key-file={self.pki / 'sa.key'}",
                f"--root-ca-file={self.pki / 'ca.crt'}",
                "--use-service-account-credentials=false",
                *self.controller_flags,
            ],
        )

    def _scheduler(self) -> None:
        """kube-scheduler with its default profile, as the admin, started and serving."""
        config = self.dir / "scheduler.yaml"
        settings = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(self.admin_kubeconfig)},
            "leaderElection": {"leaderElect": False},
        }
        config.write_text(yaml.safe_dump(settings), encoding="utf-8")
        port = free_port()
        self._spawn(
            "kube-scheduler",
            [
                f"--config={config}",
                f"--authentication-kubeconfig={self.admin_kubeconfig}",
                f"--authorization-kubeconfig={self.admin_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.dir / 'scheduler'}",
            ],
        )
        # its /readyz is open to anyone (--authorization-always-allow-paths), on a serving
        # certificate it made itself
        unverified = ssl.create_default_context()
        unverified.check_hostname = False
        unverified.verify_mode = ssl.CERT_NONE

        def ready() -> bool:
            url = f"https://127.0.0.1:{port}/readyz"
            with urllib.request.urlopen(url, timeout=5, context=unverified) as answer:
                return bool(answer.status == 200)

        self._wait("/readyz", "kube-scheduler", ready)

    def restart_apiserver(self, down: float = 0.0) -> None:
        """kube-apiserver stopped (SIGTERM), `down` seconds without it, then started again on
        the same port and etcd, and serving: every client's connections and watches break."""
        self._end("kube-apiserver")
        time.sleep(down)
        self._apiserver(self._etcd_url)
        http = self.admin_http()
        self._wait("/readyz", "kube-apiserver", lambda: http.get("/readyz").status == 200)

    @contextlib.contextmanager
    def scheduler_stopped(self) -> Iterator[None]:
        """No pod placed meanwhile: kube-scheduler is stopped, and started again on the way out
        (a pod created meanwhile stays Pending with no node, as when nothing can place it)."""
        self._end("kube-scheduler")
        try:
            yield
        finally:
            self._scheduler()

    def admin_http(self) -> KubeHttp:
        return KubeHttp(connection_from_kubeconfig(self.admin_kubeconfig), timeout=10.0)

    def connection(self) -> Connection:
        return connection_from_kubeconfig(self.token_kubeconfig)

    def _wait(self, what: str, component: str, ready: Any, timeout: float = START_TIMEOUT) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            self._alive(component)
            with contextlib.suppress(OSError):
                result = ready()
                if result:
                    return result
            if time.monotonic() > deadline:
                raise self._failed(component, f"{what}: not within {timeout:.0f} s")
            time.sleep(0.2)

    def _apply_crds(self, http: KubeHttp) -> None:
        path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        served: list[str] = []
        for file in sorted(CRDS.glob("*.yaml")):
            for crd in yaml.safe_load_all(file.read_text(encoding="utf-8")):
                if not crd:
                    continue
                response = http.post(path, crd)
                if response.status not in (200, 201):
                    raise ClusterError(f"{file.name}: {response.status} {response.body!r}")
                spec = crd["spec"]
                for version in spec["versions"]:
                    if version.get("served", True):
                        served.append(
                            f"/apis/{spec['group']}/{version['name']}/{spec['names']['plural']}"
                        )
        for url in served:
            self._wait(f"{url} served", "kube-apiserver", lambda u=url: http.get(u).status == 200)

    def start(self) -> LocalCluster:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._certificates()
        admin_credentials = {
            "client-certificate-data": _b64(self.pki / "admin.crt"),
            "client-key-data": _b64(self.pki / "admin.key"),
        }
        self._kubeconfig(self.admin_kubeconfig, ADMIN_USER, admin_credentials)
        self._kubeconfig(self.token_kubeconfig, TOKEN_USER, {"token": self.token})
        try:
            self._etcd_url = self._etcd()
            self._apiserver(self._etcd_url)
            http = self.admin_http()
            self._wait("/readyz", "kube-apiserver", lambda: http.get("/readyz").status == 200)
            binding = {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": f"{TOKEN_USER}-cluster-admin"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cluster-admin",
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TOKEN_USER}
                ],
            }
            response = http.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
            if response.status != 201:
                raise ClusterError(f"ClusterRoleBinding: {response.status} {response.body!r}")
            self._apply_crds(http)
            self._controller_manager()
            # A namespace is usable for pods once its `default` ServiceAccount exists.
            self._wait(
                "the default ServiceAccount",
                "kube-controller-manager",
                lambda: (
                    http.get("/api/v1/namespaces/default/serviceaccounts/default").status == 200
                ),
            )
            if self.schedules:
                self._scheduler()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for _name, proc in reversed(self._procs):
            end_process(proc)
        self._procs.clear()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def version(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.admin_http().get("/version").body)
        return result


@contextlib.contextmanager
def local_cluster(directory: Path, bin_dir: Path | None = None) -> Iterator[LocalCluster]:
    """A started `LocalCluster` of the binaries `make k8s` built (ClusterError when not built)."""
    bin_dir = bin_dir or build_dir()
    missing = missing_binaries(bin_dir)
    if missing:
        raise ClusterError(
            f"{', '.join(missing)} not built in {bin_dir}: run `make k8s` (scripts/build-k8s.sh)"
        )
    # One more try on a failed start: a loopback port chosen free can be taken before a
    # component binds it (other suites run beside this one).
    try:
        cluster = LocalCluster(directory / "1", bin_dir).start()
    except ClusterError:
        cluster = LocalCluster(directory / "2", bin_dir).start()
    try:
        yield cluster
    finally:
        cluster.stop()
