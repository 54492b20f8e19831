"""Which networks a pod gets: the cluster default network, and which NADs it may select.

    clusterNetwork       a NAD `namespace/name`, a network name in networksDir, or a file
    networksDir          where the on-disk networks are
    namespaceIsolation   RT-RESTRICT: a pod selects NADs of its own namespace or a global one
    globalNamespaces     those global namespaces
    podResourcesSocket   DEV-RESOURCE: the kubelet's PodResources socket
    deviceInfoDir        DEV-INFO: the NPWG device-info directory

(`delegatePolicy`, also a field of `NetworkSettings`, is read in `settings.policy`.)
"""

from __future__ import annotations

from pathlib import Path

from netattach import names
from netattach.attach import status
from netattach.cni import conf
from netattach.guard import delegate_policy
from netattach.settings import fields
from netattach.values import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final, Literal

DEFAULT_NETWORKS_DIR: Final = Path("/etc/cni/netattach.d")
DEFAULT_GLOBAL_NAMESPACES: Final = ("default",)
# DEV-RESOURCE: the kubelet's PodResources socket, and the NPWG device-info directory (its
# `dp/` files written by device plugins, its `cni/` files by netattach and the delegates).
DEFAULT_POD_RESOURCES_SOCKET: Final = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
DEFAULT_DEVICE_INFO_DIR: Final = status.DEVICE_INFO_DIR

_CONFIG_EXTENSIONS: Final = conf.CONF_EXTENSIONS + conf.LIST_EXTENSIONS
_CLUSTER_NETWORK_FORMS: Final = (
    "'namespace/name' of a NetworkAttachmentDefinition, a network name from networksDir, or an "
    f"absolute path to a {', '.join(_CONFIG_EXTENSIONS)} file"
)


# The value types of the settings are NamedTuples rather than frozen dataclasses: the thin plugin
# imports them on every exec, and a dataclass costs ~0.5 ms to create (it compiles each of its
# methods), a `values.NamedTuple` ~6 us. They are built by keyword and never changed.
class ClusterNetworkRef(NamedTuple):
    """Where the cluster default network's config comes from (standard §6, DEF-ATTACH).

    kind "nad":  the NetworkAttachmentDefinition `namespace/name`
    kind "name": the network called `name` in networksDir (a conflist preferred, §3.4.1)
    kind "file": the .conf/.conflist file at `path`
    """

    kind: Literal["nad", "name", "file"]
    namespace: str = ""
    name: str = ""
    path: Path | None = None

    def __str__(self) -> str:
        if self.kind == "nad":
            return f"{self.namespace}/{self.name}"
        if self.kind == "file":
            return str(self.path)
        return self.name


class NetworkSettings(NamedTuple):
    """Which networks a pod gets: the default one, and which NADs it may select."""

    cluster_network: ClusterNetworkRef
    networks_dir: Path = DEFAULT_NETWORKS_DIR
    # RT-RESTRICT: a pod selects NADs of its own namespace only, or of a global namespace.
    namespace_isolation: bool = True
    global_namespaces: tuple[str, ...] = DEFAULT_GLOBAL_NAMESPACES
    # SEC-DELEGATE: what the NADs of a namespace may make netattach run.
    delegate_policy: delegate_policy.DelegatePolicy = delegate_policy.DEFAULT_POLICY
    # DEV-RESOURCE: where the kubelet says which devices a pod got, and the device-info files.
    pod_resources_socket: Path = DEFAULT_POD_RESOURCES_SOCKET
    device_info_dir: Path = DEFAULT_DEVICE_INFO_DIR


def cluster_network(value: object, key: str, problems: list[str]) -> ClusterNetworkRef | None:
    if value is None:
        problems.append(f"{key}: required, {_CLUSTER_NETWORK_FORMS}, got nothing")
        return None
    if not isinstance(value, str) or not value:
        problems.append(f"{key}: must be {_CLUSTER_NETWORK_FORMS}, got {fields.show(value)}")
        return None
    if value.startswith("/"):
        if "\0" in value or not value.endswith(_CONFIG_EXTENSIONS):
            problems.append(
                f"{key}: a file must be named *{', *'.join(_CONFIG_EXTENSIONS)} (the extensions "
                f"a CNI runtime reads), got {fields.show(value)}"
            )
            return None
        return ClusterNetworkRef(kind="file", path=Path(value))
    if "/" in value:
        namespace, _, name = value.partition("/")
        bad = [
            f"the {part} {fields.show(text)}"
            for part, text in (("namespace", namespace), ("name", name))
            if not names.is_label(text)
        ]
        if bad:
            problems.append(
                f"{key}: in a NetworkAttachmentDefinition reference 'namespace/name', "
                f"{' and '.join(bad)} must be a DNS-1123 label ({names.LABEL_RULE}), and a file "
                f"path must start with '/', got {fields.show(value)}"
            )
            return None
        return ClusterNetworkRef(kind="nad", namespace=namespace, name=name)
    problem = conf.network_name_problem(value)
    if problem is not None:
        problems.append(
            f"{key}: not a CNI network name (a letter or digit, then letters, digits, '_', '.', "
            f"'-'), nor {_CLUSTER_NETWORK_FORMS}, got {fields.show(value)}"
        )
        return None
    return ClusterNetworkRef(kind="name", name=value)


def namespace_names(value: object, key: str, problems: list[str]) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        problems.append(f"{key}: must be a list of namespace names, got {fields.show(value)}")
        return None
    start = len(problems)
    for index, item in enumerate(value):
        if not isinstance(item, str) or not names.is_label(item):
            problems.append(
                f"{key}[{index}]: must be a namespace name, a DNS-1123 label "
                f"({names.LABEL_RULE}), got {fields.show(item)}"
            )
    if len(problems) > start:
        return None
    return tuple(str(item) for item in value)
