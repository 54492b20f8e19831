"""Builders of the objects tests make: pods, NADs, namespaces, multi-network policies, settings,
the CNI call, and an orchestrator whose plugins are `FakePlugins` stand-ins.

Every builder takes keyword arguments with the values most tests want as defaults (the pod
`blue/web` with UID `u1`, the NAD `blue/net-a`), so a test names only what it is about.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from netattach.cluster import model, store
from netattach.cni import env
from netattach.guard import delegate_policy
from netattach.pods import locks, orchestrator, ports, records
from netattach.runtime import chain
from netattach.settings import network as network_settings
from netattach.settings import settings
from tests.unit.fake_plugins import FakePlugins

NAD_API_VERSION = "k8s.cni.cncf.io/v1"
POLICY_API_VERSION = "k8s.cni.cncf.io/v1beta1"
STATUS_ANNOTATION = "k8s.v1.cni.cncf.io/network-status"
POLICY_FOR_ANNOTATION = "k8s.v1.cni.cncf.io/policy-for"
CLUSTER_DEFAULT = "cluster-default"


def pod(
    networks: str | None = None,
    *,
    name: str = "web",
    namespace: str = "blue",
    uid: str | None = "u1",
    default_network: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    spec: Mapping[str, Any] | None = None,
    status: Mapping[str, Any] | None = None,
    resource_version: str | None = None,
) -> model.KubeObject:
    """A core/v1 Pod: `networks` is its selection annotation and `default_network` its
    default-network one, each left out when None."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if uid is not None:
        metadata["uid"] = uid
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    if labels is not None:
        metadata["labels"] = dict(labels)
    written = dict(annotations or {})
    if networks is not None:
        written[model.NETWORKS_ANNOTATION] = networks
    if default_network is not None:
        written[model.DEFAULT_NETWORK_ANNOTATION] = default_network
    if written or annotations is not None or networks is not None:
        metadata["annotations"] = written
    document: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata}
    if spec is not None:
        document["spec"] = dict(spec)
    if status is not None:
        document["status"] = dict(status)
    return document  # type: ignore[return-value]


def addressed_pod(
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    address: int,
    *,
    v6: bool = True,
    ports: Iterable[Any] = (),
    network: str = "ns-a/net",
) -> model.KubeObject:
    """A pod as the policy compiler reads it: no UID, a network-status annotation giving eth0
    172.16.0.`address` and net1 (on `network`) 10.0.0.`address` (and fd00::`address` when
    `v6`), and one container with `ports`."""
    ips = [f"10.0.0.{address}/24"] + ([f"fd00::{address}/64"] if v6 else [])
    network_status = [
        {"name": "default", "interface": "eth0", "ips": [f"172.16.0.{address}/16"]},
        {"name": network, "interface": "net1", "ips": ips},
    ]
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "labels": dict(labels),
            "annotations": {STATUS_ANNOTATION: json.dumps(network_status)},
        },
        "spec": {"containers": [{"name": "c", "ports": list(ports)}]},
    }


def nad(
    name: str = "net-a",
    config: Mapping[str, Any] | str | None = None,
    *,
    namespace: str = "blue",
    annotations: Mapping[str, str] | None = None,
    cni_version: str = "1.0.0",
) -> model.KubeObject:
    """A NetworkAttachmentDefinition. A mapping `config` is written as JSON after a
    `cniVersion` of `cni_version` (which it may override); a string is written as it is; None
    leaves the spec empty."""
    metadata = model.ObjectMeta(name=name, namespace=namespace)
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    spec: dict[str, Any] = {}
    if isinstance(config, str):
        spec["config"] = config
    elif config is not None:
        spec["config"] = json.dumps({"cniVersion": cni_version, **config})
    return model.KubeObject(
        apiVersion=NAD_API_VERSION, kind="NetworkAttachmentDefinition", metadata=metadata, spec=spec
    )


def namespace(name: str, labels: Mapping[str, str] | None = None) -> model.KubeObject:
    """A core/v1 Namespace with `labels`."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": dict(labels or {})},
    }


def policy(
    name: str,
    spec: Mapping[str, Any],
    *,
    namespace: str = "ns-a",
    policy_for: str = "net",
    uid: str | None = None,
    typed: bool = False,
) -> model.KubeObject:
    """A MultiNetworkPolicy for the networks `policy_for` names; its UID is `uid-<name>` unless
    given. `typed` adds its apiVersion and kind, as the API server serves it."""
    metadata = model.ObjectMeta(
        namespace=namespace,
        name=name,
        uid=f"uid-{name}" if uid is None else uid,
        annotations={POLICY_FOR_ANNOTATION: policy_for},
    )
    if typed:
        return model.KubeObject(
            apiVersion=POLICY_API_VERSION,
            kind="MultiNetworkPolicy",
            metadata=metadata,
            spec=dict(spec),
        )
    return model.KubeObject(metadata=metadata, spec=dict(spec))


def view_of(*objects: model.KubeObject) -> store.ClusterStore:
    """A synced cluster cache holding `objects`."""
    view = store.ClusterStore()
    view.replace_all(list(objects))
    view.mark_synced()
    return view


def call(
    command: str = "ADD", *, namespace: str = "blue", pod_name: str = "web", **where: Any
) -> env.Environment:
    """The CNI call the container runtime makes for the pod `namespace/pod_name` (UID u1),
    container c1, on eth0 in /run/netns/na-x; `where` replaces any of `uid`, `container_id`,
    `netns` and `ifname`."""
    uid: str = where.pop("uid", "u1")
    made = env.Environment(
        command=command,
        container_id="c1",
        netns="/run/netns/na-x",
        ifname="eth0",
        args=(("K8S_POD_NAMESPACE", namespace), ("K8S_POD_NAME", pod_name), ("K8S_POD_UID", uid)),
    )
    return made._replace(**where)


CALL = call()


class Sink:
    """What the orchestrator tells the pod's owner, kept: status entries by pod, and Events as
    (namespace/pod, type, reason, message)."""

    def __init__(self) -> None:
        self.status: dict[tuple[str, str], list[dict[str, object]]] = {}
        self.events: list[tuple[str, str, str, str]] = []

    async def publish_status(
        self, namespace: str, pod: str, entries: list[dict[str, object]], *, uid: str = ""
    ) -> None:
        self.status[(namespace, pod)] = entries

    async def remove_status(self, namespace: str, pod: str, *, uid: str = "") -> None:
        self.status.pop((namespace, pod), None)

    async def record_event(self, namespace: str, pod: str, **event: str) -> None:
        """An Event: `reason`, `message`, `type_` (Normal unless given) and the pod's `uid`."""
        kind = event.get("type_", "Normal")
        self.events.append((f"{namespace}/{pod}", kind, event["reason"], event["message"]))


def raw_settings(
    tmp_path: Path, bin_dir: Path | None = None, *, policy: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The daemon's settings as written, all under `tmp_path`: the cluster default network
    `cluster-default` read from networks/, manifests read from manifests/, plugins in `bin_dir`
    when given, and `policy` as the delegate policy when given."""
    raw: dict[str, Any] = {
        "clusterNetwork": CLUSTER_DEFAULT,
        "networksDir": str(tmp_path / "networks"),
        "stateDir": str(tmp_path / "state"),
        "feed": {"directory": str(tmp_path / "manifests")},
    }
    if bin_dir is not None:
        raw["binDirs"] = [str(bin_dir)]
    if policy is not None:
        raw["delegatePolicy"] = dict(policy)
    return raw


class Orchestrated(NamedTuple):
    """An orchestrator, the sink it reports to, and the stand-ins of its plugins."""

    orch: orchestrator.Orchestrator
    sink: Sink
    plugins: FakePlugins


def orchestrated(
    tmp_path: Path,
    view: store.ClusterStore,
    *,
    plugins: Iterable[str] = ("bridge", "macvlan", "host-device"),
    policy: Mapping[str, Any] | None = None,
    sink: Sink | None = None,
    pod_records: records.PodRecords | None = None,
    addresses: ports.AddressPools | None = None,
) -> Orchestrated:
    """The daemon's orchestrator on `view` with everything under `tmp_path`: the plugins
    `plugins` played by `FakePlugins`, and a cluster default network of type bridge (the
    operator's own file, trusted whatever the delegate policy says)."""
    fake = FakePlugins(tmp_path / "bin", list(plugins))
    (tmp_path / "networks").mkdir()
    (tmp_path / "networks" / "default.conf").write_text(
        json.dumps({"cniVersion": "1.0.0", "name": CLUSTER_DEFAULT, "type": "bridge"})
    )
    raw = raw_settings(tmp_path, fake.directory, policy=policy)
    sink = Sink() if sink is None else sink
    orch = orchestrator.Orchestrator(
        settings=settings.parse_settings(raw, source="test"),
        view=view,
        sink=sink,
        runtime=chain.Runtime(
            path=[str(fake.directory)], cache_dir=tmp_path / "cache", executor=fake
        ),
        records=records.PodRecords(tmp_path / "state") if pod_records is None else pod_records,
        locks=locks.ContainerLocks(tmp_path / "state"),
        addresses=addresses,
    )
    return Orchestrated(orch, sink, fake)


def delegate_policy_of(raw: Mapping[str, Any]) -> delegate_policy.DelegatePolicy:
    """The delegate policy the settings' `delegatePolicy` section `raw` writes; it must be
    valid."""
    problems: list[str] = []
    policy = delegate_policy.parse_policy(dict(raw), "delegatePolicy", problems)
    assert problems == [], problems
    assert policy is not None
    return policy


class FetchingStore(store.ClusterStore):
    """A synced cache holding `cached` that has not seen `pod` or `nad` yet, and an API that
    has them: each read through
    the cache is kept in `fetched`. The NAD is the API's only when it is the one asked for, and
    the cache holds it once read (KUBE-NADREAD); the pod is handed out as it is."""

    def __init__(
        self,
        *cached: model.KubeObject,
        pod: model.KubeObject | None = None,
        nad: model.KubeObject | None = None,
    ) -> None:
        super().__init__()
        self.pod, self.nad = pod, nad
        self.fetched: list[tuple[str, str]] = []
        self.replace_all(list(cached))
        self.mark_synced()

    async def fetch_pod(self, namespace: str, name: str) -> model.KubeObject | None:
        if self.pod is None:
            return await super().fetch_pod(namespace, name)
        self.fetched.append((namespace, name))
        return self.pod

    async def fetch_nad(self, namespace: str, name: str) -> model.KubeObject | None:
        if self.nad is None:
            return await super().fetch_nad(namespace, name)
        self.fetched.append((namespace, name))
        if (namespace, name) != (model.namespace_of(self.nad), model.name_of(self.nad)):
            return None
        self.upsert(self.nad)
        return self.nad


def failure_status(code: int, reason: str, message: str) -> dict[str, Any]:
    """The metav1.Status an API server answers a failed request with."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def attachment(
    status_name: str = "blue/net-a",
    ifname: str = "net1",
    *,
    is_default: bool = False,
    config: Mapping[str, Any] | None = None,
    capability_args: Mapping[str, Any] | None = None,
    result: Mapping[str, Any] | None = None,
) -> records.AttachmentRecord:
    """One attachment of a pod record: `result` None is an ADD that has not finished."""
    return records.AttachmentRecord(
        status_name=status_name,
        ifname=ifname,
        is_default=is_default,
        config=dict(config or {}),
        capability_args=dict(capability_args or {}),
        result=None if result is None else dict(result),
    )


def pod_record(
    container_id: str,
    *attachments: records.AttachmentRecord,
    netns: str = "/x",
    namespace: str = "blue",
    pod: str = "web",
    uid: str = "u",
    complete: bool = False,
) -> records.PodRecord:
    """The record ADD keeps of the pod `namespace/pod` in the container `container_id`."""
    return records.PodRecord(
        container_id=container_id,
        netns=netns,
        namespace=namespace,
        pod=pod,
        uid=uid,
        attachments=attachments,
        complete=complete,
    )


def networks(
    cluster_network: str | network_settings.ClusterNetworkRef = "absent",
    *,
    networks_dir: Path = Path("/nonexistent-netattach-test"),
    isolation: bool = True,
    global_namespaces: tuple[str, ...] = ("default",),
    **more: Any,
) -> network_settings.NetworkSettings:
    """The daemon's network settings: the cluster default network by name (or as given), read
    from `networks_dir` (none on disk by default, so a plan that reads it fails), with `more`
    of NetworkSettings' fields."""
    ref = (
        network_settings.ClusterNetworkRef(kind="name", name=cluster_network)
        if isinstance(cluster_network, str)
        else cluster_network
    )
    return network_settings.NetworkSettings(
        cluster_network=ref,
        networks_dir=networks_dir,
        namespace_isolation=isolation,
        global_namespaces=global_namespaces,
        **more,
    )
