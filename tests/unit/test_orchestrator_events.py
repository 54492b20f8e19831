"""What the orchestrator tells the pod's owner: Events per attachment and per failure, and the
direct read of a pod the cache has not seen yet (through the exec seam, no root needed)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

import pytest

from netattach.cni import errors
from netattach.pods import records
from netattach.runtime import execute
from tests.builders import CALL, FetchingStore, Sink, nad, orchestrated, pod, view_of
from tests.unit.fake_plugins import Call, FakePlugins, default_behaviour


@pytest.mark.req("KUBE-EVENTS")
def test_every_attachment_gets_an_added_interface_event(tmp_path: Path) -> None:
    view = view_of(pod("net-a"), nad("net-a", {"cniVersion": "1.0.0", "type": "macvlan"}))
    orch, sink, _ = orchestrated(tmp_path, view)
    asyncio.run(orch.add(CALL, {"cniVersion": "1.0.0"}))
    assert sink.events == [
        ("blue/web", "Normal", "AddedInterface", "Add eth0 [10.9.0.5/24] from cluster-default"),
        ("blue/web", "Normal", "AddedInterface", "Add net1 [10.9.0.5/24] from blue/net-a"),
    ]


@pytest.mark.req("KUBE-EVENTS", "NAD-NAMEWARN")
def test_a_name_mismatch_is_a_warning_event(tmp_path: Path) -> None:
    view = view_of(
        pod("net-a"), nad("net-a", {"cniVersion": "1.0.0", "name": "other", "type": "macvlan"})
    )
    orch, sink, _ = orchestrated(tmp_path, view)
    asyncio.run(orch.add(CALL, {"cniVersion": "1.0.0"}))
    warnings = [e for e in sink.events if e[1] == "Warning"]
    assert len(warnings) == 1
    assert warnings[0][2] == "NetworkNameMismatch"
    assert "blue/net-a" in warnings[0][3]
    assert "'other'" in warnings[0][3]


@pytest.mark.req("KUBE-EVENTS", "SEL-INVALID")
@pytest.mark.parametrize(
    ("networks", "reason", "says"),
    [
        ("missing", "NetworkAttachmentDefinitionNotFound", "blue/missing"),
        ('[{"name": "net-a", "mac": "zz"}]', "InvalidNetworkSelection", "'zz'"),
    ],
)
def test_a_failure_is_a_warning_event_with_a_reason_to_act_on(
    tmp_path: Path, networks: str, reason: str, says: str
) -> None:
    view = view_of(pod(networks), nad("net-a", {"cniVersion": "1.0.0", "type": "macvlan"}))
    orch, sink, _ = orchestrated(tmp_path, view)
    with pytest.raises(errors.CNIError):
        asyncio.run(orch.add(CALL, {"cniVersion": "1.0.0"}))
    ((who, kind, got_reason, message),) = sink.events
    assert (who, kind, got_reason) == ("blue/web", "Warning", reason)
    assert says in message


@pytest.mark.req("KUBE-CACHE")
def test_a_pod_not_yet_in_the_cache_is_read_directly(tmp_path: Path) -> None:
    view = FetchingStore(pod=pod(""))
    orch, sink, _ = orchestrated(tmp_path, view)
    asyncio.run(orch.add(CALL, {"cniVersion": "1.0.0"}))
    assert view.fetched == [("blue", "web")]
    assert [e["name"] for e in sink.status[("blue", "web")]] == ["cluster-default"]


class MeetingPoint(Sink):
    """A sink, and a hook each plugin call awaits as it starts (`FakePlugins.before_run`), that
    each wait, inside a DEL, for the other to have started: they meet only if the orchestrator
    runs them at the same time."""

    def __init__(self) -> None:
        super().__init__()
        self.clearing, self.deleting = asyncio.Event(), asyncio.Event()
        self.order: list[str] = []

    async def remove_status(self, namespace: str, pod: str, *, uid: str = "") -> None:
        self.clearing.set()
        await asyncio.wait_for(self.deleting.wait(), 5)
        self.order.append("status cleared")
        await super().remove_status(namespace, pod, uid=uid)

    async def plugin_runs(self, path: Path, env: Mapping[str, str]) -> None:
        """The exec's side: a DEL waits for the status removal to have started."""
        if env.get("CNI_COMMAND") == "DEL":
            self.deleting.set()
            await asyncio.wait_for(self.clearing.wait(), 5)
            self.order.append(f"DEL {path.name}")


@pytest.mark.req("RT-DEL")
def test_del_clears_the_status_while_the_delegates_run(tmp_path: Path) -> None:
    view = view_of(pod("net-a"), nad("net-a", {"cniVersion": "1.0.0", "type": "macvlan"}))
    meeting = MeetingPoint()
    orch, _, plugins = orchestrated(tmp_path, view, sink=meeting)
    plugins.before_run = meeting.plugin_runs
    asyncio.run(orch.add(CALL, {"cniVersion": "1.0.0"}))
    assert ("blue", "web") in meeting.status

    # Run one after the other, each would wait for the other until its 5 s were up.
    asyncio.run(orch.delete(CALL._replace(command="DEL")))

    assert ("blue", "web") not in meeting.status
    assert sorted(meeting.order) == ["DEL bridge", "DEL macvlan", "status cleared"]
    assert records.PodRecords(tmp_path / "state").load("c1") is None


@pytest.mark.req("RT-ATOMIC")
def test_the_first_plugin_reads_its_config_only_once_the_write_ahead_record_is_saved(
    tmp_path: Path,
) -> None:
    view = view_of(pod("net-a"), nad("net-a", {"cniVersion": "1.0.0", "type": "macvlan"}))
    orch, _, _ = orchestrated(tmp_path, view)
    plugins = orch.runtime.invoker.executor
    assert isinstance(plugins, FakePlugins)
    seen: list[list[str]] = []

    def bridge(call: Call) -> execute.ExecOutcome:
        record = records.PodRecords(tmp_path / "state").load("c1")
        seen.append([] if record is None else [a.status_name for a in record.attachments])
        return default_behaviour(call)

    plugins.behaviour["bridge"] = bridge
    asyncio.run(orch.add(CALL, {"cniVersion": "1.0.0"}))
    # The record on disk named both attachments when the first plugin got its config.
    assert seen == [["cluster-default", "blue/net-a"]]


class UnsavableRecords(records.PodRecords):
    def save(self, record: records.PodRecord, *, durable: bool = True) -> None:
        raise OSError(28, "No space left on device", str(self.directory / record.container_id))


@pytest.mark.req("RT-ATOMIC", "RT-ADDFAIL")
def test_an_unsaved_write_ahead_record_fails_the_add_before_any_plugin_reads_its_config(
    tmp_path: Path,
) -> None:
    view = view_of(pod(""), nad("net-a", {"cniVersion": "1.0.0", "type": "macvlan"}))
    orch, sink, _ = orchestrated(tmp_path, view, pod_records=UnsavableRecords(tmp_path / "state"))
    plugins = orch.runtime.invoker.executor
    assert isinstance(plugins, FakePlugins)
    with pytest.raises(errors.InternalError) as failed:
        asyncio.run(orch.add(CALL, {"cniVersion": "1.0.0"}))
    # The save's own error is the one reported, not the stopped plugin's.
    assert "No space left on device" in str(failed.value.details)
    assert "blue/web" in str(failed.value)
    # No plugin ran an ADD; the undo's DEL of what never ran is the only call.
    assert plugins.commands() == [("bridge", "DEL")]
    assert sink.events[-1][1:3] == ("Warning", "FailedAttachNetwork")
