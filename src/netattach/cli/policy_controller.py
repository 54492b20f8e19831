"""`netattach policy-controller [--kubeconfig FILE] [--identity NAME] [--lease-namespace NS]`:
the policy controller (POL-CTRL, docs/deploy.md) until SIGTERM or SIGINT; one replica leads
(a Lease), the others wait. Exits 1 when it lost the Lease (its pod restarts as a follower)."""

import asyncio
import contextlib
import os
import socket
import sys
from pathlib import Path

from netattach import logs
from netattach.cli.signals import stop_on_signals
from netattach.cni import errors
from netattach.controller import lease, service


def run(
    *,
    kubeconfig: str | None,
    identity: str | None,
    lease_namespace: str | None,
    log_format: logs.LogFormat = "text",
    log_level: str = "info",
) -> int:
    logs.configure(log_level, log_format, loggers={})
    name = identity or os.environ.get("POD_NAME") or socket.gethostname()
    namespace = lease_namespace or os.environ.get("POD_NAMESPACE") or "kube-system"

    async def main() -> int:
        stop = stop_on_signals()
        try:
            controller = service.PolicyController(
                kubeconfig=Path(kubeconfig) if kubeconfig else None,
                identity=name,
                lease_namespace=namespace,
            )
        except errors.CNIError as exc:
            print(f"netattach policy-controller: {exc}", file=sys.stderr)
            return 2
        running = asyncio.ensure_future(controller.run())
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait((running, stopped), return_when=asyncio.FIRST_COMPLETED)
            if running.done():
                running.result()
                return 0
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
            return 0
        except ExceptionGroup as group:  # the controller's tasks' (asyncio.TaskGroup)
            lost, _ = group.split(lease.LostLeaseError)
            if lost is None:
                raise
            print(f"netattach policy-controller: {lost.exceptions[0]}", file=sys.stderr)
            return 1
        finally:
            stopped.cancel()
            await controller.aclose()

    return asyncio.run(main())
