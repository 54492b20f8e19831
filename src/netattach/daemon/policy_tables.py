"""The table writer: each local pod's nftables table, written into its netns when it changes.

It keeps what each container's netns holds, as far as it knows (`Applied`), and writes only
the difference: nothing when the table is the one there, the set elements alone when only
peers changed (`update.set_changes`), an in-place script when more did, the whole table when
what is there is not known or an in-place write failed. A pod's table is made from the rules
last rendered for it when only peers changed (`render.rebuild_table`).

Each pod's table is changed by one task at a time (a lock per container). nft runs in a process
of its own, the long-lived nft helpers (`policy.apply.NftHelpers`): no thread of ours changes
namespace. A failed write is logged, told as a Warning Event on the pod, and tried again later.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Callable, Collection, Iterable, Mapping

from netattach.cni import errors
from netattach.daemon import metrics
from netattach.daemon.policy_book import PolicyBook
from netattach.pods import ports
from netattach.pods import records as records_mod
from netattach.policy import apply, ir, render, update

log = logging.getLogger("netattach.policy")

NFT_TIMEOUT = 10.0
NFT_HELPERS = 2  # nft helper processes (each writes one table at a time)


@dataclasses.dataclass(slots=True)
class Applied:
    """What is in a pod's netns now, as far as we know."""

    table: render.Table | None  # None: no table
    interfaces: tuple[str, ...] = ()
    policies: tuple[str, ...] = ()
    error: str | None = None
    known: bool = True  # False: whatever is there is replaced whole by the next apply


UNKNOWN = Applied(table=None, known=False)
NONE = Applied(table=None)


class TableWriter:
    """What each container's netns holds, and the writes that make it hold its table."""

    def __init__(
        self,
        *,
        book: PolicyBook,
        events: ports.EventRecorder | None,  # Warnings on pods
        retry_later: Callable[[], None],  # a write failed: a pass again, later
    ) -> None:
        self._book = book
        self._events = events
        self._retry_later = retry_later
        self._applied: dict[str, Applied] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        # pod key -> the rules last rendered and their table: the next table is made from it
        # when only peers changed (`render.rebuild_table`)
        self._built: dict[str, render.Built] = {}
        # Element diffs of this pass's in-place updates (many tables share each set's change)
        self._diffs: update.Diffs = {}
        # nft runs in long-lived helper processes, not two execs per write (`apply`)
        self.nft = apply.NftHelpers(NFT_HELPERS)

    @property
    def applied(self) -> Mapping[str, Applied]:
        """Container -> what its netns holds, as far as we know."""
        return self._applied

    def close(self) -> None:
        """End the nft helpers (a later write starts them again)."""
        self.nft.close()

    def doubt(self, container_ids: Iterable[str]) -> None:
        """What these containers' netns hold is not known (start-up): the next apply
        replaces it whole."""
        for container_id in container_ids:
            self._applied[container_id] = UNKNOWN

    def expect(self, container_id: str) -> None:
        """A container being added: nothing applied in it yet, unless something is known."""
        self._applied.setdefault(container_id, NONE)

    def keep(self, container_ids: Collection[str]) -> None:
        """Forget the containers not among `container_ids` (gone from this node)."""
        for gone in set(self._applied) - set(container_ids):
            self._applied.pop(gone, None)
            self._locks.pop(gone, None)

    def forget_rendered(self, key: str | None) -> None:
        """The pod `key` is no target any more (None: no pod is): what was last rendered for
        it goes."""
        if key is None:
            self._built.clear()
        else:
            self._built.pop(key, None)

    def end_pass(self) -> None:
        """The sets this pass's in-place writes held may go now: freed after the pass
        (thousands of old sets a pass under churn, ~10 ms that no table waits for)."""
        held, self._diffs = self._diffs, {}
        asyncio.get_running_loop().call_soon(held.clear)

    def state(self, container_id: str) -> dict[str, object] | None:
        """What is enforced on a container now (None: not one of ours, or not known yet)."""
        applied = self._applied.get(container_id)
        if applied is None or not applied.known:
            return None
        return {
            "applied": applied.table is not None,
            "interfaces": list(applied.interfaces),
            "policies": list(applied.policies),
            "error": applied.error,
        }

    async def remove(self, record: records_mod.PodRecord) -> None:
        """The pod's attachments are going away (DEL, a failed ADD): its table goes too."""
        applied = self._applied.pop(record.container_id, None)
        lock = self._locks.pop(record.container_id, None)
        if applied is not None and applied.table is not None and os.path.exists(record.netns):  # noqa: ASYNC240
            async with lock or asyncio.Lock():
                try:
                    await apply.remove_table(record.netns, timeout=NFT_TIMEOUT, helper=self.nft)
                except errors.PolicyApplyError as exc:
                    log.warning("%s cannot remove the policy table: %s", record.prefix(), exc)

    async def apply_table(
        self,
        record: records_mod.PodRecord,
        rules: Mapping[str, ir.InterfaceRules],
        *,
        raise_errors: bool = False,
    ) -> None:
        """Make the pod's netns hold the table of `rules` (none, for no rules). A failure is
        retried later (`raise_errors`: raised, as PolicyApplyError)."""
        key = f"{record.namespace}/{record.pod}"
        table = render.rebuild_table(key, rules, self._built.get(key))
        self._built[key] = (rules, table)
        governing = sorted(
            {
                uid
                for iface in rules.values()
                for d in (iface.ingress, iface.egress)
                if d is not None
                for uid in d.policy_uids
            }
        )
        want = Applied(
            table=table,
            interfaces=tuple(sorted(rules)) if table is not None else (),
            policies=tuple(self._book.names(governing)),
        )
        container_id = record.container_id
        lock = self._locks.setdefault(container_id, asyncio.Lock())
        async with lock:
            current = self._applied.get(container_id, UNKNOWN)
            if current.known and current.error is None and current.table == table:
                self._applied[container_id] = want  # no write: the netns holds it already
                return
            try:
                await self._write(record, current, table)
            except errors.PolicyApplyError as exc:
                if not os.path.exists(record.netns):  # noqa: ASYNC240 (one stat)
                    return  # the sandbox is gone: the sweep will DEL it
                metrics.POLICY_APPLIES.labels(result="error").inc()
                self._applied[container_id] = dataclasses.replace(
                    UNKNOWN, error=str(exc), interfaces=want.interfaces, policies=want.policies
                )
                log.error("%s %s", record.prefix(), exc)
                if raise_errors:
                    raise
                self._retry_later()
                await self._warn_pod(record, str(exc))
                return
            metrics.POLICY_APPLIES.labels(result="removed" if table is None else "applied").inc()
            self._applied[container_id] = want
            # Said at info when what governs the pod changed; the peers of its rules coming
            # and going (every pass, for most pods, under churn) only at debug.
            same = current.table is not None and (current.interfaces, current.policies) == (
                want.interfaces,
                want.policies,
            )
            level = logging.DEBUG if same else logging.INFO
            if table is not None and log.isEnabledFor(level):
                log.log(
                    level,
                    "%s policy applied on %s (%s)",
                    record.prefix(),
                    ", ".join(want.interfaces),
                    ", ".join(want.policies),
                )

    async def _write(
        self, record: records_mod.PodRecord, current: Applied, table: render.Table | None
    ) -> None:
        """Make the netns hold `table`: in place when what it holds is known (a failing
        in-place script, a table changed behind our back, falls back to a whole rewrite)."""
        if table is None:
            if await apply.remove_table(record.netns, timeout=NFT_TIMEOUT, helper=self.nft):
                log.info("%s policy table removed", record.prefix())
            return
        if current.known and current.error is None and current.table is not None:
            try:
                changes = update.set_changes(current.table, table, self._diffs)
                if changes is not None:
                    await apply.update_elements(
                        record.netns, changes, timeout=NFT_TIMEOUT, helper=self.nft
                    )
                    return
                script = update.render_update(current.table, table, self._diffs)
                if script is None:
                    return
                await apply.apply_ruleset(
                    record.netns, script, timeout=NFT_TIMEOUT, helper=self.nft
                )
                return
            except errors.PolicyApplyError as exc:
                if not os.path.exists(record.netns):  # noqa: ASYNC240 (one stat)
                    raise  # the sandbox is gone (looked at only now: a stat per write was 2%)
                log.warning("%s in-place policy update failed, rewriting: %s", record.prefix(), exc)
        await apply.apply_ruleset(
            record.netns, render.table_text(table), timeout=NFT_TIMEOUT, helper=self.nft
        )

    async def _warn_pod(self, record: records_mod.PodRecord, message: str) -> None:
        if self._events is not None:
            await self._events.record_event(
                record.namespace,
                record.pod,
                reason="PolicyApplyFailed",
                message=message,
                type_="Warning",
                uid=record.uid,
            )
