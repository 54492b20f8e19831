"""One attachment's steps, shared by ADD, DEL and hot-plug: its intent in the pod record, the
runtime's view of it, its DEL, and the default route a selection asks for.

An attachment is named in the pod record (`intent`) before its plugins run, so a DEL always
finds what an ADD attempted (RT-DEL), and is deleted from the record alone (RT-NOAPI): the
delegate config it ran with, the CNI_ARGS and capability args it was given.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from netattach import loggers, offload
from netattach.cni import conf, env, errors
from netattach.pods import devices
from netattach.pods import plan as plan_mod
from netattach.pods import records as records_mod
from netattach.pods import refs as refs_mod
from netattach.runtime import chain

# The orchestrator's lines: an operator filters on that name.
log = loggers.get("netattach.orchestrator")


def runtime_conf(
    call: env.Environment, netns: str, att: records_mod.AttachmentRecord
) -> chain.RuntimeConf:
    args = call.args
    if not any(key == "IgnoreUnknown" for key, _ in args):
        # The K8S_POD_* keys mean nothing to most delegates, which refuse unknown keys unless
        # told to ignore them (Multus adds it too): without it a DEL could never succeed.
        args = (("IgnoreUnknown", "1"), *args)
    return chain.RuntimeConf(
        container_id=call.container_id,
        ifname=att.ifname,
        netns=netns,
        args=args,
        capability_args=att.capability_args,
    )


def network_of(att: records_mod.AttachmentRecord) -> conf.NetworkConfigList:
    """The delegate config `att` ran with, from the pod record."""
    return conf.parse_any(att.config, source=f"record of {att.status_name}")


def intent(
    planned: plan_mod.PlannedAttachment, made: Sequence[records_mod.AttachmentRecord]
) -> records_mod.AttachmentRecord:
    """`planned` as the pod record names it before its plugins run; `made`: the attachments the
    record already names."""
    if any(att.ifname == planned.ifname for att in made):
        # standard §4.1.2.1.5: an interface name already used fails this attachment
        raise errors.InvalidSelectionError(
            f"interface {planned.ifname!r} is already used by an earlier attachment of the pod"
        )
    return records_mod.AttachmentRecord(
        status_name=planned.status_name,
        ifname=planned.ifname,
        is_default=planned.is_default,
        config=planned.network.raw,
        capability_args=dict(planned.capability_args),
        gateways=planned.gateways,
        resource=planned.resource,
        device=planned.device,
    )


async def delete(
    runtime: chain.Runtime,
    call: env.Environment,
    record: records_mod.PodRecord,
    *,
    device_info_dir: Path,
) -> list[errors.CNIError]:
    """DEL every attachment of `record`, newest first, past failures; the failures, each named
    after the pod and its attachment (logged)."""
    failures: list[errors.CNIError] = []
    ref = refs_mod.PodRef(namespace=record.namespace, name=record.pod, uid=record.uid)
    # DEL may come without a netns (CNI spec); a recorded one that is gone is no use either.
    netns = call.netns or (record.netns if os.path.exists(record.netns) else "")  # noqa: ASYNC240 (one stat)
    for att in reversed(record.attachments):
        try:
            try:
                network = network_of(att)
            except errors.CNIError as exc:
                # RT-ATOMIC: the pod record's copy is unreadable; the runtime's own record
                # of this attachment (written at its ADD) still says what to DEL.
                log.warning("%s %s; deleting from the attachment cache", ref.prefix(), exc)
                if await runtime.del_container(call.container_id, ifname=att.ifname):
                    continue
                raise
            # netattach goes on past a plugin that fails DEL (and reports it) so the others
            # still free their addresses: a deliberate deviation from "stop the list".
            await runtime.del_network_list(network, runtime_conf(call, netns, att), keep_going=True)
            devices.discard_device_info(att, call.container_id, device_info_dir)
        except errors.CNIError as exc:
            failure = exc.with_prefix(ref.prefix(att.status_name))
            log.error("%s", failure)
            failures.append(failure)
    return failures


async def apply_default_route(netns: str, plan: Sequence[plan_mod.PlannedAttachment]) -> None:
    """The default route via each attachment of `plan` whose selection asks for it."""
    for planned in plan:
        if planned.gateways:
            # Only a pod asking for default-route imports it (a few small stdlib modules).
            from netattach.netns import routes

            try:
                await offload.to_thread(
                    routes.apply_default_route, netns, planned.ifname, planned.gateways
                )
            except (OSError, LookupError) as exc:  # the kernel's refusal, no such ifname
                raise errors.IOFailureError(
                    f"cannot set the default route via {planned.ifname}", str(exc)
                ) from exc
