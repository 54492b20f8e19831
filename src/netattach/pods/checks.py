"""What a pod's plan must pass before anything of it is recorded or run (the guards at ADD).

    the delegate policy     every NAD of the plan (SEC-DELEGATE, delegate_guard.py)
    the plugins installed   every delegate of the plan can be found, so no ADD starts that its
                            DEL could not undo
    the node                no NAD takes the node's addresses or another attachment's, nor
                            changes the node unasked (SEC-NODE, SEC-VALUES: node_guard.py)

ADD checks its whole plan, hot-plug the attachments it adds. The node guard is made at the first
ADD with a NAD to judge and kept (it remembers the node's facts and the claims of ADDs under
way): the thin plugin's ADD of the default network alone never imports it.
"""

from __future__ import annotations

from collections.abc import Sequence

from netattach.cni import errors
from netattach.pods import delegate_guard
from netattach.pods import plan as plan_mod
from netattach.pods import records as records_mod
from netattach.runtime import chain
from netattach.settings import network as network_settings

TYPE_CHECKING = False
if TYPE_CHECKING:
    from netattach.pods import node_guard as node_guard_mod
    from netattach.pods import ports


class PlanChecks:
    """The guards at ADD of one orchestrator, over its settings, view, records and runtime."""

    def __init__(
        self,
        *,
        networks: network_settings.NetworkSettings,
        view: ports.ClusterView,
        records: records_mod.PodRecords,
        runtime: chain.Runtime,
    ) -> None:
        self._networks = networks
        self._view = view
        self._records = records
        self._runtime = runtime
        self._node_guard: node_guard_mod.NodeGuard | None = None  # made when first needed

    def check_plan(self, plan: Sequence[plan_mod.PlannedAttachment]) -> None:
        """Before anything is recorded or run: the delegate policy allows every NAD of the plan
        (SEC-DELEGATE), and every plugin is installed."""
        delegate_guard.check_plan(plan, self._networks.delegate_policy, self._view)
        self.check_installed(plan)

    def check_installed(self, plan: Sequence[plan_mod.PlannedAttachment]) -> None:
        """Every delegate of the plan can be found, so no ADD starts that its DEL could not undo."""
        for planned in plan:
            for plugin in planned.network.plugins:
                try:
                    self._runtime.find_plugin(plugin.type)
                except errors.CNIError as exc:
                    raise exc.with_prefix(f"[{planned.status_name}]") from exc

    async def check_node(
        self, plan: Sequence[plan_mod.PlannedAttachment], container_id: str
    ) -> None:
        """SEC-NODE: no NAD of the plan takes the node's addresses or another attachment's (a
        pod's default-network NAD too, DEV-DEFAULT: only the cluster default is the operator's)."""
        policy = self._networks.delegate_policy
        if not policy.enabled or all(p.is_default and not p.pod_default for p in plan):
            return
        if self._node_guard is None:
            # Imported only with a NAD to check: the thin plugin's every ADD would pay for it.
            from netattach.pods import node_guard

            self._node_guard = node_guard.NodeGuard(view=self._view, records=self._records)
        await self._node_guard.check_plan(
            plan, policy, container_id, cluster_nad=plan_mod.cluster_nad(self._networks)
        )

    def release(self, container_id: str) -> None:
        """Forget the addresses `container_id`'s ADD claimed while it had no record (SEC-NODE),
        once its record holds them or it failed. No node guard yet: nothing was claimed."""
        if self._node_guard is not None:
            self._node_guard.release(container_id)
