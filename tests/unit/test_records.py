"""Tests of netattach.pods.records: the pod record DEL undoes from (RT-ATOMIC, RT-DEL).

Real files in tmp_path. Whatever bytes a record file holds, `load` returns a record, None, or
raises CorruptPodRecordError (code 6) quoting the path: DEL relies on that to fall back to the
attachment cache instead of crashing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netattach.cni import errors
from netattach.pods import records

CID = "c0ffee1234"


def _record(container_id: str = CID, *, complete: bool = True) -> records.PodRecord:
    return records.PodRecord(
        container_id=container_id,
        netns="/var/run/netns/cni-1234",
        namespace="ns1",
        pod="pod1",
        uid="uid-1",
        complete=complete,
        attachments=(
            records.AttachmentRecord(
                status_name="cluster-net",
                ifname="eth0",
                is_default=True,
                config={"cniVersion": "1.0.0", "name": "cluster-net", "plugins": []},
                capability_args={"portMappings": [{"hostPort": 80, "containerPort": 8080}]},
                result={"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.5/24"}]},
            ),
            records.AttachmentRecord(
                status_name="ns1/net-a",
                ifname="net1",
                is_default=False,
                config={"cniVersion": "1.0.0", "name": "net-a", "type": "macvlan"},
                capability_args={},
                gateways=("10.1.1.1",),
                result=None,
            ),
        ),
    )


def _raw() -> dict[str, Any]:
    return _record().to_raw()


def _write(store: records.PodRecords, data: bytes, container_id: str = CID) -> Path:
    path = store.path_for(container_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _assert_corrupt(store: records.PodRecords, path: Path, container_id: str = CID) -> None:
    with pytest.raises(records.CorruptPodRecordError) as caught:
        store.load(container_id)
    assert caught.value.code == 6
    assert isinstance(caught.value, errors.DecodingFailureError)
    assert repr(str(path)) in caught.value.msg
    assert caught.value.path == path


# ---------------------------------------------------------------------------------------------
# round trip


@pytest.mark.req("RT-ATOMIC")
def test_a_saved_record_loads_back_equal(tmp_path: Path) -> None:
    store = records.PodRecords(tmp_path)
    record = _record()
    store.save(record)
    assert store.load(CID) == record
    assert store.path_for(CID) == tmp_path / "pods" / f"{CID}.json"
    assert json.loads(store.path_for(CID).read_bytes())["kind"] == records.KIND


@pytest.mark.req("RT-ATOMIC")
def test_saving_again_replaces_the_record_and_leaves_no_temp_file(tmp_path: Path) -> None:
    store = records.PodRecords(tmp_path)
    store.save(_record(complete=False))
    store.save(_record(complete=True))
    loaded = store.load(CID)
    assert loaded is not None
    assert loaded.complete is True
    assert sorted(p.name for p in (tmp_path / "pods").iterdir()) == [f"{CID}.json"]


def test_loading_a_missing_record_gives_none(tmp_path: Path) -> None:
    assert records.PodRecords(tmp_path).load(CID) is None


def test_delete_removes_the_record_and_tolerates_a_missing_one(tmp_path: Path) -> None:
    store = records.PodRecords(tmp_path)
    store.save(_record())
    store.delete(CID)
    assert store.load(CID) is None
    store.delete(CID)  # already gone: no error


def test_an_unchanged_record_is_not_parsed_again_and_a_changed_one_is(tmp_path: Path) -> None:
    store = records.PodRecords(tmp_path)
    other = records.PodRecords(tmp_path)  # another process: `netattach gc`, a thin call
    store.save(_record(complete=False))
    first = store.load(CID)
    assert first is not None
    assert store.load(CID) is first  # the file is the same: what was parsed is kept

    other.save(_record(complete=True))  # a new file renamed over the old one
    again = store.load(CID)
    assert again is not None
    assert again.complete
    assert store.load(CID) is again

    _write(store, b"{not json")  # rewritten in place: its size and mtime differ
    _assert_corrupt(store, store.path_for(CID))

    other.save(_record())
    other.delete(CID)
    assert store.load(CID) is None
    assert list(store.container_ids()) == []


def test_container_ids_lists_every_record_file_by_name(tmp_path: Path) -> None:
    store = records.PodRecords(tmp_path)
    assert list(store.container_ids()) == []  # no directory yet
    store.save(_record("bbb"))
    store.save(_record("aaa"))
    _write(store, b"not json", "ccc")  # unreadable records are listed too
    (tmp_path / "pods" / ".aaa.json.123.deadbeef.tmp").write_bytes(b"")
    (tmp_path / "pods" / ".hidden.json").write_bytes(b"{}")
    (tmp_path / "pods" / "notes.txt").write_bytes(b"")
    assert list(store.container_ids()) == ["aaa", "bbb", "ccc"]


@pytest.mark.parametrize("bad", ["../x", "a/b", "", ".hidden", "x y"])
def test_path_for_refuses_what_is_not_a_container_id(tmp_path: Path, bad: str) -> None:
    store = records.PodRecords(tmp_path)
    with pytest.raises(errors.InvalidEnvironmentError) as caught:
        store.path_for(bad)
    assert caught.value.code == 4
    assert repr(bad) in caught.value.msg


def test_save_and_load_refuse_a_traversing_container_id(tmp_path: Path) -> None:
    store = records.PodRecords(tmp_path / "state")
    with pytest.raises(errors.InvalidEnvironmentError):
        store.save(_record("../x"))
    with pytest.raises(errors.InvalidEnvironmentError):
        store.load("../x")
    assert not (tmp_path / "state" / "x.json").exists()


# ---------------------------------------------------------------------------------------------
# corrupt records: RT-ATOMIC


@pytest.mark.req("RT-ATOMIC")
def test_a_truncated_record_is_corrupt(tmp_path: Path) -> None:
    store = records.PodRecords(tmp_path)
    store.save(_record())
    path = store.path_for(CID)
    path.write_bytes(path.read_bytes()[:-7])
    _assert_corrupt(store, path)


@pytest.mark.req("RT-ATOMIC")
@pytest.mark.parametrize(
    "data",
    [b"", b"not json", b"\xff\xfe\x00garbage", b"[" * 100_000, b"null", b"[]", b'"text"'],
    ids=["empty", "text", "binary", "deep", "null", "list", "string"],
)
def test_what_is_not_a_json_record_object_is_corrupt(tmp_path: Path, data: bytes) -> None:
    store = records.PodRecords(tmp_path)
    _assert_corrupt(store, _write(store, data))


@pytest.mark.req("RT-ATOMIC")
@pytest.mark.parametrize("kind", [None, "netattachPodV2", 1])
def test_a_record_of_another_kind_is_corrupt(tmp_path: Path, kind: object) -> None:
    store = records.PodRecords(tmp_path)
    raw = _raw()
    if kind is None:
        del raw["kind"]
    else:
        raw["kind"] = kind
    path = _write(store, json.dumps(raw).encode())
    with pytest.raises(records.CorruptPodRecordError) as caught:
        store.load(CID)
    assert records.KIND in caught.value.details
    assert caught.value.path == path


def _set(raw: dict[str, Any], dotted: str, value: object) -> dict[str, Any]:
    """`raw` with the key at `dotted` (`attachments.0.config`) set to `value`; `...` removes it."""
    target: Any = raw
    *parents, last = dotted.split(".")
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    key: Any = int(last) if isinstance(target, list) else last
    if value is ...:
        del target[key]
    else:
        target[key] = value
    return raw


@pytest.mark.req("RT-ATOMIC")
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("containerId", 5),
        ("containerId", ...),
        ("netns", None),
        ("namespace", ["ns1"]),
        ("pod", ...),
        ("uid", {"a": 1}),
        ("attachments", {"0": {}}),
        ("attachments", ...),
        ("attachments.0", "eth0"),
        ("attachments.0.statusName", 3),
        ("attachments.0.ifname", ...),
        ("attachments.0.default", ...),
        ("attachments.0.config", "{}"),
        ("attachments.0.config", ...),
        ("attachments.0.capabilityArgs", []),
        ("attachments.0.result", "ok"),
        ("attachments.1.gateways", "10.1.1.1"),
        ("attachments.1.gateways", [1]),
    ],
)
def test_a_field_missing_or_of_the_wrong_type_makes_the_record_corrupt(
    tmp_path: Path, field: str, value: object
) -> None:
    store = records.PodRecords(tmp_path)
    path = _write(store, json.dumps(_set(_raw(), field, value)).encode())
    _assert_corrupt(store, path)


@pytest.mark.req("RT-ATOMIC")
@pytest.mark.parametrize(
    "field", ["complete", "attachments.0.default"], ids=["complete", "default"]
)
def test_a_non_boolean_flag_makes_the_record_corrupt(tmp_path: Path, field: str) -> None:
    store = records.PodRecords(tmp_path)
    path = _write(store, json.dumps(_set(_raw(), field, "false")).encode())
    _assert_corrupt(store, path)


@pytest.mark.req("RT-ATOMIC")
def test_a_record_naming_another_container_is_corrupt(tmp_path: Path) -> None:
    store = records.PodRecords(tmp_path)
    store.save(_record("other"))
    path = _write(store, store.path_for("other").read_bytes(), CID)
    with pytest.raises(records.CorruptPodRecordError) as caught:
        store.load(CID)
    assert "other" in caught.value.details
    assert caught.value.path == path


@pytest.mark.req("RT-ATOMIC")
def test_an_unreadable_record_is_corrupt(tmp_path: Path) -> None:
    store = records.PodRecords(tmp_path)
    path = store.path_for(CID)
    path.mkdir(parents=True)  # a directory where the file should be
    _assert_corrupt(store, path)


@pytest.mark.req("RT-ATOMIC")
@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(min_value=0, max_value=10_000))
def test_every_truncation_of_a_record_is_corrupt(tmp_path: Path, cut: int) -> None:
    store = records.PodRecords(tmp_path)
    data = json.dumps(_raw(), separators=(",", ":")).encode()
    cut = cut % len(data)
    path = _write(store, data[:cut])
    _assert_corrupt(store, path)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)
_FIELDS = [
    "containerId",
    "netns",
    "namespace",
    "pod",
    "uid",
    "complete",
    "attachments",
    "attachments.0",
    "attachments.0.statusName",
    "attachments.0.ifname",
    "attachments.0.default",
    "attachments.0.config",
    "attachments.0.capabilityArgs",
    "attachments.0.result",
    "attachments.1.gateways",
]


@pytest.mark.req("RT-ATOMIC")
@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(_FIELDS), value=_JSON)
def test_any_value_in_any_field_loads_or_is_corrupt_never_another_error(
    tmp_path: Path, field: str, value: object
) -> None:
    store = records.PodRecords(tmp_path)
    _write(store, json.dumps(_set(_raw(), field, value)).encode())
    corrupt: records.CorruptPodRecordError | None = None
    loaded: records.PodRecord | None = None
    try:
        loaded = store.load(CID)
    except records.CorruptPodRecordError as exc:
        corrupt = exc
    if corrupt is not None:
        assert corrupt.code == 6
    else:
        assert loaded is not None
        assert loaded.container_id == CID
