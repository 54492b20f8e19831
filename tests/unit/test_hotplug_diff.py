"""The pure hot-plug diff (RT-HOTPLUG): `replug.build_change` matching a running pod's recorded
attachments with the plan of its selection now, and `replug.differs` deciding when a pod needs
a replug at all. No plugin runs, no file is written."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netattach.attach import selection as selection_mod
from netattach.cni import conf, errors
from netattach.pods import plan, records, replug
from tests import builders

pytestmark = pytest.mark.req("RT-HOTPLUG")

RESULT: dict[str, Any] = {"cniVersion": "1.0.0", "interfaces": [], "ips": []}
DEFAULT = records.AttachmentRecord(
    status_name="cluster-default",
    ifname="eth0",
    is_default=True,
    config={"cniVersion": "1.0.0", "name": "cluster-default", "plugins": [{"type": "bridge"}]},
    capability_args={},
    result=RESULT,
)


def network(nad: str, **plugin: Any) -> conf.NetworkConfigList:
    """The config list the NAD `blue/<nad>` runs: one macvlan plugin, with `plugin`'s keys."""
    return conf.parse_config_list(
        {"cniVersion": "1.0.0", "name": nad, "plugins": [{"type": "macvlan", **plugin}]}
    )


def planned(nad: str, ifname: str, **fields: Any) -> plan.PlannedAttachment:
    """The plan's attachment of `blue/<nad>` on `ifname`."""
    values: dict[str, Any] = {"network": network(nad), "capability_args": {}, **fields}
    return plan.PlannedAttachment(
        status_name=f"blue/{nad}", ifname=ifname, is_default=False, **values
    )


def recorded(nad: str, ifname: str, **fields: Any) -> records.AttachmentRecord:
    """The record of `blue/<nad>` attached on `ifname` by a finished ADD, with `fields`
    replaced."""
    made = records.AttachmentRecord(
        status_name=f"blue/{nad}",
        ifname=ifname,
        is_default=False,
        config=network(nad).raw,
        capability_args={},
        result=RESULT,
    )
    return made._replace(**fields)


def record(
    *attachments: records.AttachmentRecord, selection: str | None = None
) -> records.PodRecord:
    """The pod `blue/web`'s record: the cluster default on eth0, then `attachments`."""
    return records.PodRecord(
        container_id="c1",
        netns="/run/netns/na-x",
        namespace="blue",
        pod="web",
        uid="u1",
        attachments=(DEFAULT, *attachments),
        complete=True,
        selection=selection,
    )


def select(*written: str) -> tuple[list[plan.PlannedAttachment], list[selection_mod.Selection]]:
    """The plan and the selections of `nad` or `nad@ifname` in order, each unnamed one on the
    `netN` the plan generates for its position."""
    selections = [
        selection_mod.Selection(
            namespace="blue", name=w.partition("@")[0], interface=w.partition("@")[2]
        )
        for w in written
    ]
    attachments = [
        planned(s.name, s.interface or f"net{index}") for index, s in enumerate(selections, start=1)
    ]
    return attachments, selections


def change_of(
    current: records.PodRecord, *written: str, busy: frozenset[str] = frozenset()
) -> replug.Change:
    attachments, selections = select(*written)
    return replug.build_change(current, attachments, selections, busy=busy)


def names(wanted: tuple[Any, ...]) -> list[tuple[str, str]]:
    return [(w.status_name, w.ifname) for w in wanted]


# --- build_change -------------------------------------------------------------------------------


def test_an_unchanged_selection_keeps_every_attachment() -> None:
    kept = (recorded("net-a", "net1"), recorded("net-b", "net2"))
    change = change_of(record(*kept), "net-a", "net-b")
    assert change.keep == kept
    assert change.add == ()
    assert change.remove == ()


def test_a_network_added_at_the_end_gets_the_next_name() -> None:
    change = change_of(record(recorded("net-a", "net1")), "net-a", "net-b")
    assert names(change.keep) == [("blue/net-a", "net1")]
    assert names(change.add) == [("blue/net-b", "net2")]
    assert change.remove == ()


def test_a_network_no_longer_selected_is_removed() -> None:
    gone = recorded("net-b", "net2")
    change = change_of(record(recorded("net-a", "net1"), gone), "net-a")
    assert change.remove == (gone,)
    assert names(change.wanted) == [("blue/net-a", "net1")]


def test_everything_removed_leaves_the_default_network_alone() -> None:
    change = change_of(record(recorded("net-a", "net1"), recorded("net-b", "net2")))
    assert names(change.remove) == [("blue/net-a", "net1"), ("blue/net-b", "net2")]
    assert change.wanted == ()


def test_removals_are_in_record_order() -> None:
    current = record(
        recorded("net-c", "net1"), recorded("net-a", "net2"), recorded("net-b", "net3")
    )
    change = change_of(current, "net-a")
    assert names(change.remove) == [("blue/net-c", "net1"), ("blue/net-b", "net3")]


def test_a_network_added_in_front_keeps_the_others_on_their_names() -> None:
    change = change_of(record(recorded("net-a", "net1")), "net-b", "net-a")
    # The plan would put net-b on net1, which net-a keeps: net-b takes the next free name.
    assert names(change.wanted) == [("blue/net-b", "net2"), ("blue/net-a", "net1")]
    assert names(change.add) == [("blue/net-b", "net2")]


def test_a_reordered_selection_keeps_both_and_moves_neither() -> None:
    current = record(recorded("net-a", "net1"), recorded("net-b", "net2"))
    change = change_of(current, "net-b", "net-a")
    assert names(change.wanted) == [("blue/net-b", "net2"), ("blue/net-a", "net1")]
    assert change.add == ()
    assert change.remove == ()


def test_a_changed_config_is_a_removal_and_an_addition_on_the_same_name() -> None:
    old = recorded("net-a", "net1", config=network("net-a", master="eth1").raw)
    change = change_of(record(old), "net-a")
    assert change.remove == (old,)
    assert names(change.add) == [("blue/net-a", "net1")]


@pytest.mark.parametrize(
    "field",
    [
        {"result": None},  # an ADD that never finished may be half made
        {"gateways": ("10.0.0.1",)},
        {"capability_args": {"mac": "0a:00:00:00:00:01"}},
        {"status_name": "blue/other"},
    ],
    ids=["unfinished", "gateways", "capability-args", "other-nad"],
)
def test_an_attachment_that_is_not_what_the_plan_makes_is_replaced(field: dict[str, Any]) -> None:
    old = recorded("net-a", "net1", **field)
    change = change_of(record(old), "net-a")
    assert change.keep == ()
    assert change.remove == (old,)
    assert names(change.add) == [("blue/net-a", "net1")]


def test_a_requested_name_kept_as_recorded() -> None:
    kept = recorded("net-a", "eth1")
    change = change_of(record(kept), "net-a@eth1")
    assert change.keep == (kept,)
    assert change.add == ()
    assert change.remove == ()


def test_a_changed_requested_name_moves_the_attachment() -> None:
    old = recorded("net-a", "net1")
    change = change_of(record(old), "net-a@data0")
    assert change.remove == (old,)
    assert names(change.add) == [("blue/net-a", "data0")]


def test_a_generated_name_now_requested_by_another_selection_is_given_up() -> None:
    old = recorded("net-a", "net1")
    change = change_of(record(old), "net-b@net1", "net-a")
    assert change.remove == (old,)
    assert names(change.wanted) == [("blue/net-b", "net1"), ("blue/net-a", "net2")]


def test_the_same_network_twice_keeps_one_and_adds_the_other() -> None:
    change = change_of(record(recorded("net-a", "net1")), "net-a", "net-a")
    assert names(change.keep) == [("blue/net-a", "net1")]
    assert names(change.add) == [("blue/net-a", "net2")]


def test_a_busy_name_is_not_given_to_a_new_attachment() -> None:
    change = change_of(record(), "net-a", busy=frozenset({"net1", "net2"}))
    assert names(change.add) == [("blue/net-a", "net3")]


def test_a_name_that_is_not_generated_falls_back_to_net1_and_up() -> None:
    in_use = {"net1", "eth0"}
    assert replug._free_name("data0", {"data0", *in_use}) == "net2"
    assert replug._free_name("data0", in_use) == "data0"
    assert replug._free_name("net7", {"net7", "net8"}) == "net9"


@pytest.mark.parametrize(
    ("written", "says"),
    [
        (("net-a@eth0",), "interface 'eth0' is the cluster default network's interface"),
        (("net-a@data0", "net-b@data0"), "interface 'data0' is requested twice"),
    ],
)
def test_colliding_requested_names_fail_before_anything_changes(
    written: tuple[str, ...], says: str
) -> None:
    with pytest.raises(errors.InvalidSelectionError, match=says):
        change_of(record(recorded("net-a", "net1")), *written)


def test_a_plan_that_does_not_match_the_selections_is_an_internal_error() -> None:
    attachments, selections = select("net-a", "net-b")
    with pytest.raises(errors.InternalError, match="a plan of 1 attachments for 2 selections"):
        replug.build_change(record(), attachments[:1], selections)


def test_the_default_attachment_in_the_plan_is_left_out() -> None:
    attachments, selections = select("net-a")
    default = planned("cluster-default", "eth0")._replace(is_default=True)
    change = replug.build_change(record(), [default, *attachments], selections)
    assert names(change.add) == [("blue/net-a", "net1")]


NADS = st.sampled_from(["net-a", "net-b", "net-c"])


@given(before=st.lists(NADS, max_size=4), after=st.lists(NADS, max_size=4))
def test_any_change_keeps_or_removes_each_recorded_attachment_once(
    before: list[str], after: list[str]
) -> None:
    attachments, _ = select(*before)
    current = record(*(recorded(p.status_name[len("blue/") :], p.ifname) for p in attachments))
    change = change_of(current, *after)
    # Every recorded secondary attachment is kept or removed, never both.
    assert sorted(names(change.keep) + names(change.remove)) == sorted(
        names(current.attachments[1:])
    )
    # The new selection in order, each on a name of its own that is not the default's.
    assert [w.status_name for w in change.wanted] == [f"blue/{n}" for n in after]
    ifnames = [w.ifname for w in change.wanted]
    assert len(set(ifnames)) == len(ifnames)
    assert "eth0" not in ifnames
    # As many kept as the two selections share.
    shared = sum(min(before.count(n), after.count(n)) for n in set(after))
    assert len(change.keep) == shared


@given(selected=st.lists(NADS, max_size=4))
def test_the_record_of_a_plan_diffs_to_nothing_against_it(selected: list[str]) -> None:
    attachments, _ = select(*selected)
    current = record(*(recorded(p.status_name[len("blue/") :], p.ifname) for p in attachments))
    change = change_of(current, *selected)
    assert change.add == ()
    assert change.remove == ()
    assert change.keep == current.attachments[1:]


# --- differs ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kept", "now", "expected"),
    [
        ("net-a", "net-a", False),
        ("net-a", "net-a,net-b", True),
        ("net-a", "", True),
        ("", "", False),
        ("net-a", " net-a", True),  # the text is compared as written
    ],
)
def test_a_record_that_kept_its_selection_differs_when_the_text_does(
    kept: str, now: str, expected: bool
) -> None:
    current = record(recorded("net-a", "net1"), selection=kept)
    assert replug.differs(current, builders.pod(now or None)) is expected


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        ("net-a,net-b", False),
        ("net-b,net-a", False),
        ("net-a@net1,net-b", False),
        ("net-a@data0,net-b", True),
        ("net-a", True),
        ("net-a,net-b,net-c", True),
        ("", True),
        ("net-a/b/c", True),  # unreadable: the replug reports it
    ],
)
def test_an_older_record_is_compared_with_what_is_attached(now: str, expected: bool) -> None:
    current = record(recorded("net-a", "net1"), recorded("net-b", "net2"))
    assert replug.differs(current, builders.pod(now)) is expected
