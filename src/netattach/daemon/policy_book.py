"""The book of MultiNetworkPolicies: for each, the version in force, its last good one, the invalid.

A policy of the view is parsed once per content (its resourceVersion). A valid one is in force
and becomes the last good version of its name; an invalid one is reported once per content (a
log line and a Warning Event on it) and, while it keeps the UID of its last good version, that
version stays in force: an edit with a typo must not open the pods it isolates. One invalid
since the daemon started has no such version and is skipped.

    view ──(observed changing)──> read ──> parsed ──> valid:   in force, last good
                                                  └─> invalid: last good in force (same UID),
                                                               or none; reported
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable

from netattach.cluster import model, store
from netattach.cni import errors
from netattach.pods import ports
from netattach.policy.model import Policy, parse_policy

log = logging.getLogger("netattach.policy")


class PolicyBook:
    """What is in force for each policy of the view, read again only where it changed."""

    def __init__(self, *, view: store.ClusterStore, events: ports.EventRecorder | None) -> None:
        self._view = view
        self._events = events
        # policy (namespace, name) -> its content's key (resourceVersion) and what it parsed to
        self._read: dict[tuple[str, str], tuple[str, Policy | errors.CNIError]] = {}
        self._last_good: dict[tuple[str, str], Policy] = {}
        self._in_force: dict[tuple[str, str], Policy] = {}  # the valid one, or the last good
        self._policy_list: list[Policy] | None = None  # `_in_force`, sorted (None: made again)
        # the policies observed changing since they were last read (None: read every one)
        self._policy_changes: set[tuple[str, str]] | None = None
        self._names: dict[str, str] = {}  # policy UID -> "ns/name", of `_last_good`
        self._tasks: set[asyncio.Task[None]] = set()

    def changed(self, namespace: str, name: str) -> None:
        """The policy was observed changing: it is read again next time."""
        if self._policy_changes is not None:
            self._policy_changes.add((namespace, name))

    def read_all(self) -> None:
        """Every policy is read again next time (start, relist)."""
        self._policy_changes = None

    def policies(self) -> list[Policy]:
        """The valid policies of the view; each invalid one reported once per content.

        A policy updated into an invalid one keeps being enforced as its last valid version
        (same UID) until it is fixed or deleted: an edit with a typo must not open the pods it
        isolates. One invalid since the daemon started has no such version and is skipped.

        Only the policies observed changing are read again (every one after a relist).
        """
        changed, self._policy_changes = self._policy_changes, set()
        if changed is None:
            present = {
                (model.namespace_of(obj), model.name_of(obj)): obj
                for obj in self._view.objects(model.POLICY)
            }
            for name in self._in_force.keys() | self._last_good.keys() | self._read.keys():
                if name not in present:
                    self._read_policy(name, None)
            for name, obj in present.items():
                self._read_policy(name, obj)
        else:
            for name in changed:
                self._read_policy(name, self._view.lookup(model.POLICY, *name))
        if self._policy_list is None:
            self._policy_list = sorted(
                self._in_force.values(), key=lambda p: (p.namespace, p.name, p.uid)
            )
        return self._policy_list

    def names(self, uids: Iterable[str]) -> list[str]:
        """ "ns/name" of each policy UID (the UID, for one not known)."""
        return [self._names.get(uid, uid) for uid in uids]

    def _read_policy(self, name: tuple[str, str], obj: model.KubeObject | None) -> None:
        """The policy `name` as the view holds it now (None: gone): parsed once per content,
        and what is in force for it."""
        before = self._in_force.get(name)
        if obj is None:
            self._read.pop(name, None)
            self._in_force.pop(name, None)
            last = self._last_good.pop(name, None)
            if last is not None:
                self._names.pop(last.uid, None)
        else:
            key = model.meta(obj).get("resourceVersion", "") or json.dumps(obj, sort_keys=True)
            found = self._read.get(name)
            if found is None or found[0] != key:
                try:
                    parsed: Policy | errors.CNIError = parse_policy(obj)
                except errors.CNIError as exc:
                    parsed = exc
                    self._report_invalid(obj, exc, self._last_good.get(name))
                found = self._read[name] = (key, parsed)
            parsed = found[1]
            if isinstance(parsed, Policy):
                last = self._last_good.get(name)
                if last is not None and last is not parsed:
                    self._names.pop(last.uid, None)
                self._last_good[name] = parsed
                self._names[parsed.uid] = parsed.key
                self._in_force[name] = parsed
            elif (last := self._last_good.get(name)) is not None and last.uid == model.uid_of(obj):
                self._in_force[name] = last
            else:
                self._in_force.pop(name, None)
        if self._in_force.get(name) is not before:
            self._policy_list = None

    def _report_invalid(
        self, obj: model.KubeObject, exc: errors.CNIError, last: Policy | None
    ) -> None:
        ns, name = model.namespace_of(obj), model.name_of(obj)
        message = f"{exc.msg}: {exc.details}" if exc.details else exc.msg
        if last is not None and last.uid == model.uid_of(obj):
            message += "; its last valid version stays in force"
            log.warning("MultiNetworkPolicy %s/%s: %s", ns, name, message)
        else:
            log.warning("MultiNetworkPolicy %s/%s skipped: %s", ns, name, message)
        if self._events is not None:
            # record_event only queues: the task ends at once; a reference keeps it alive.
            task = asyncio.get_running_loop().create_task(
                self._events.record_event(
                    ns,
                    name,
                    reason="InvalidPolicy",
                    message=message,
                    type_="Warning",
                    uid=model.uid_of(obj),
                    kind=model.POLICY,
                )
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
