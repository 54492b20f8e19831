"""Which pod a CNI call is about, and how an error says so.

The kubelet names the pod in CNI_ARGS (KUBE-ARGS); a call without those keys comes from a
runtime that is not Kubernetes and gets the default network only. Every error about a pod is
prefixed `[ns/pod/uid:network]` (Multus's form, `CNIError.with_prefix`), keeping its class.
"""

from __future__ import annotations

from netattach import loggers
from netattach.cni import env, errors
from netattach.values import NamedTuple

# The orchestrator's lines: an operator filters on that name.
log = loggers.get("netattach.orchestrator")

# CNI_ARGS keys the kubelet passes (KUBE-ARGS).
POD_NAMESPACE = "K8S_POD_NAMESPACE"
POD_NAME = "K8S_POD_NAME"
POD_UID = "K8S_POD_UID"


# A NamedTuple, not a dataclass: on the thin plugin's path (`netattach.values` says why).
class PodRef(NamedTuple):
    namespace: str
    name: str
    uid: str

    def prefix(self, network: str = "") -> str:
        return f"[{self.namespace}/{self.name}/{self.uid}{':' + network if network else ''}]"


def pod_ref(call: env.Environment) -> PodRef | None:
    """The pod named by CNI_ARGS, or None when the runtime is not Kubernetes."""
    args = dict(call.args)
    if not args.get(POD_NAMESPACE) or not args.get(POD_NAME):
        return None
    return PodRef(namespace=args[POD_NAMESPACE], name=args[POD_NAME], uid=args.get(POD_UID, ""))


def as_cni_error(exc: Exception, prefix: str) -> errors.CNIError:
    """`exc` named after the pod and attachment (`prefix`); anything but a CNI error is a bug:
    999, the traceback in the log only."""
    if isinstance(exc, errors.CNIError):
        return exc.with_prefix(prefix)
    log.error("%s unexpected failure", prefix, exc_info=exc)
    return errors.InternalError.unexpected(exc, prefix)
