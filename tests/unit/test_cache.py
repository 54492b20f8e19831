"""Atomic files and the attachment cache: no partial files, no temp leftovers, no crashes on rot."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from netattach import atomic
from netattach.cni import errors
from netattach.runtime import cache

KEY = cache.AttachmentKey(network_name="dbnet", container_id="ctr1", ifname="eth0")


def entry(key: cache.AttachmentKey = KEY, **overrides: Any) -> cache.CachedAttachment:
    fields: dict[str, Any] = {
        "key": key,
        "netns": "/run/netns/ns1",
        "config": {
            "cniVersion": "1.0.0",
            "name": key.network_name,
            "plugins": [{"type": "bridge", "x-vendor": {"keep": [1, 2]}}],
        },
        "cni_args": (("K8S_POD_NAME", "p"), ("K8S_POD_NAMESPACE", "ns")),
        "capability_args": {"portMappings": [{"hostPort": 80, "containerPort": 8080}]},
        "result": {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0"}], "ips": []},
    }
    fields.update(overrides)
    return cache.CachedAttachment(**fields)


@pytest.fixture
def store(tmp_path: Path) -> cache.AttachmentCache:
    return cache.AttachmentCache(tmp_path / "cache")


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- write_atomic --------------------------------------------------------------------------------


@pytest.mark.req("RT-ATOMIC")
@pytest.mark.usefixtures("umask_zero")
def test_write_atomic_writes_the_file_0600_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "dir" / "record"
    atomic.write_atomic(path, b'{"a": 1}')
    assert path.read_bytes() == b'{"a": 1}'
    assert mode_of(path) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["record"]


@pytest.mark.req("RT-ATOMIC")
@pytest.mark.usefixtures("umask_zero")
def test_write_atomic_replaces_an_existing_file_with_its_own_mode(tmp_path: Path) -> None:
    path = tmp_path / "record"
    path.write_bytes(b"old contents that are longer than the new ones")
    path.chmod(0o644)
    atomic.write_atomic(path, b"new")
    assert path.read_bytes() == b"new"
    assert mode_of(path) == 0o600
    atomic.write_atomic(path, b"newer", mode=0o640)
    assert mode_of(path) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["record"]


@pytest.mark.req("RT-ATOMIC")
@pytest.mark.parametrize(
    "exc", [OSError(28, "No space left on device"), KeyboardInterrupt()], ids=["oserror", "kbint"]
)
def test_write_atomic_failing_rename_keeps_the_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exc: BaseException
) -> None:
    path = tmp_path / "record"
    path.write_bytes(b"old")
    seen: list[str] = []

    def failing_replace(src: Any, dst: Any) -> None:
        seen.append(Path(src).name)
        assert Path(src).exists()  # the temp file was fully written before the rename
        raise exc

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(type(exc)):
        atomic.write_atomic(path, b"new")
    assert len(seen) == 1
    assert seen[0].startswith(".record.")
    assert seen[0].endswith(".tmp")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["record"]


@pytest.mark.req("RT-ATOMIC")
@pytest.mark.parametrize("failing", ["write", "fsync"])
def test_write_atomic_failing_write_keeps_the_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    path = tmp_path / "record"
    path.write_bytes(b"old")

    def boom(*args: Any) -> None:
        raise OSError(5, "I/O error")

    monkeypatch.setattr(os, failing, boom)
    with pytest.raises(OSError, match="I/O error"):
        atomic.write_atomic(path, b"new")
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["record"]


def test_write_atomic_handles_short_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = os.write

    def dribble(fd: int, data: Any) -> int:
        return real_write(fd, bytes(data[:3]))

    monkeypatch.setattr(os, "write", dribble)
    path = tmp_path / "record"
    atomic.write_atomic(path, b"0123456789abcdef")
    monkeypatch.undo()
    assert path.read_bytes() == b"0123456789abcdef"


@pytest.mark.req("RT-ATOMIC")
def test_a_reader_never_sees_a_partial_file(tmp_path: Path) -> None:
    path = tmp_path / "record"
    old = {"version": "old", "pad": "o" * 1_500_000}
    new = {"version": "new", "pad": "n" * 2_000_000, "more": list(range(1000))}
    payloads = [json.dumps(old).encode(), json.dumps(new).encode()]
    atomic.write_atomic(path, payloads[0])

    stop = threading.Event()
    failures: list[str] = []
    versions: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            data = path.read_bytes()
            try:
                value = json.loads(data)
            except ValueError:
                failures.append(f"partial read of {len(data)} bytes")
                continue
            if value not in (old, new):
                failures.append(f"unexpected value {value.get('version')!r}")
            versions.append(value["version"])

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(30):
            atomic.write_atomic(path, payloads[(i + 1) % 2])
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert failures == []
    assert versions  # the reader did read while the writer was busy
    assert json.loads(path.read_bytes()) == old  # 30 writes: the last one is the old payload
    assert [p.name for p in tmp_path.iterdir()] == ["record"]


def test_remove_reports_whether_the_file_was_there(tmp_path: Path) -> None:
    path = tmp_path / "record"
    atomic.write_atomic(path, b"x")
    assert atomic.remove(path) is True
    assert not path.exists()
    assert atomic.remove(path) is False


# --- AttachmentCache: round trip -----------------------------------------------------------------


@pytest.mark.req("CNI-CACHE")
def test_save_then_load_round_trips(store: cache.AttachmentCache) -> None:
    saved = entry()
    store.save(saved)
    assert store.load(KEY) == saved


@pytest.mark.req("CNI-CACHE")
def test_a_record_without_result_round_trips(store: cache.AttachmentCache) -> None:
    pending = entry(result=None, cni_args=(), capability_args={})
    store.save(pending)
    assert store.load(KEY) == pending
    done = entry()
    store.save(done)
    assert store.load(KEY) == done


@pytest.mark.req("CNI-CACHE")
@pytest.mark.usefixtures("umask_zero")
def test_records_live_in_results_named_by_network_container_and_ifname(
    store: cache.AttachmentCache, tmp_path: Path
) -> None:
    store.save(entry())
    path = tmp_path / "cache" / "results" / "dbnet:ctr1:eth0"
    assert store.path_for(KEY) == path
    assert mode_of(path) == 0o600
    raw = json.loads(path.read_bytes())
    assert raw == {
        "kind": "netattachCacheV1",
        "networkName": "dbnet",
        "containerId": "ctr1",
        "ifName": "eth0",
        "netns": "/run/netns/ns1",
        "config": entry().config,
        "cniArgs": [["K8S_POD_NAME", "p"], ["K8S_POD_NAMESPACE", "ns"]],
        "capabilityArgs": entry().capability_args,
        "result": entry().result,
    }
    assert [p.name for p in path.parent.iterdir()] == ["dbnet:ctr1:eth0"]


@pytest.mark.req("CNI-CACHE")
def test_load_of_a_missing_record_is_none(store: cache.AttachmentCache) -> None:
    assert store.load(KEY) is None  # the directory does not even exist yet
    store.save(entry())
    other = cache.AttachmentKey(network_name="dbnet", container_id="ctr2", ifname="eth0")
    assert store.load(other) is None


@pytest.mark.req("CNI-CACHE")
def test_delete_removes_the_record(store: cache.AttachmentCache) -> None:
    store.save(entry())
    store.delete(KEY)
    assert store.load(KEY) is None
    store.delete(KEY)  # deleting twice is fine
    assert list(store.entries()) == []


@pytest.mark.req("CNI-CACHE")
def test_save_failure_is_an_io_failure(
    store: cache.AttachmentCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*args: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(errors.IOFailureError) as info:
        store.save(entry())
    assert info.value.code == 5
    assert info.value.msg == "cannot write attachment record for 'dbnet:ctr1:eth0'"
    assert "No space left on device" in info.value.details


# --- AttachmentCache: corrupt records ------------------------------------------------------------

GOOD = json.dumps(entry().to_raw()).encode()


def record(**changes: Any) -> bytes:
    raw = entry().to_raw()
    for name, value in changes.items():
        if value is ...:
            del raw[name]
        else:
            raw[name] = value
    return json.dumps(raw).encode()


CORRUPT: dict[str, bytes] = {
    "empty": b"",
    "truncated": GOOD[: len(GOOD) // 2],
    "truncated-by-one": GOOD[:-1],
    "not-json": b"\x00\x01 this is not json",
    "invalid-utf8": b'{"kind": "\xff\xfe"}',
    "json-list": b"[1, 2, 3]",
    "json-string": b'"netattachCacheV1"',
    "json-null": b"null",
    "wrong-kind": record(kind="somethingElse"),
    "no-kind": record(kind=...),
    "network-name-int": record(networkName=5),
    "container-id-missing": record(containerId=...),
    "ifname-null": record(ifName=None),
    "config-missing": record(config=...),
    "config-list": record(config=[1]),
    "result-string": record(result="ok"),
    "capability-args-list": record(capabilityArgs=[]),
    "cni-args-int": record(cniArgs=5),
    "cni-args-null": record(cniArgs=None),
    "cni-args-triple": record(cniArgs=[["a", "b", "c"]]),
    "cni-args-single": record(cniArgs=[["a"]]),
}


@pytest.mark.req("CNI-CACHE")
@pytest.mark.req("RT-ATOMIC")
@pytest.mark.parametrize("data", list(CORRUPT.values()), ids=list(CORRUPT))
def test_a_corrupt_record_is_a_decoding_failure_quoting_the_path(
    store: cache.AttachmentCache, data: bytes
) -> None:
    path = store.path_for(KEY)
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    with pytest.raises(cache.CorruptRecordError) as info:
        store.load(KEY)
    err = info.value
    assert isinstance(err, errors.DecodingFailureError)
    assert err.code == 6
    assert err.msg == f"corrupt attachment record {str(path)!r}"
    assert err.path == path
    assert err.details  # the reason


@pytest.mark.req("CNI-CACHE")
@pytest.mark.req("RT-ATOMIC")
def test_an_unreadable_record_is_a_decoding_failure(store: cache.AttachmentCache) -> None:
    path = store.path_for(KEY)
    path.mkdir(parents=True)  # a directory where the file should be
    with pytest.raises(cache.CorruptRecordError) as info:
        store.load(KEY)
    assert info.value.msg == f"corrupt attachment record {str(path)!r}"
    assert info.value.details.startswith("unreadable")


@pytest.mark.req("CNI-CACHE")
@pytest.mark.req("RT-ATOMIC")
def test_entries_yield_good_records_and_errors_for_corrupt_ones(
    store: cache.AttachmentCache,
) -> None:
    a = entry(cache.AttachmentKey(network_name="a", container_id="c1", ifname="eth0"))
    c = entry(cache.AttachmentKey(network_name="c", container_id="c1", ifname="net1"))
    store.save(c)
    store.save(a)
    broken = store.directory / "b-c1-eth0"
    broken.write_bytes(GOOD[:10])
    subdir = store.directory / "d-c1-eth0"
    subdir.mkdir()
    (store.directory / ".a-c1-eth0.123.deadbeef.tmp").write_bytes(b"half a rec")
    (store.directory / ".hidden").write_bytes(b"{}")

    got = list(store.entries())

    assert len(got) == 4
    assert got[0] == a
    assert isinstance(got[1], cache.CorruptRecordError)
    assert got[1].path == broken
    assert got[1].msg == f"corrupt attachment record {str(broken)!r}"
    assert got[2] == c
    assert isinstance(got[3], cache.CorruptRecordError)
    assert got[3].path == subdir
    assert got[3].details.startswith("unreadable")


def test_entries_of_a_missing_directory_is_empty(store: cache.AttachmentCache) -> None:
    assert list(store.entries()) == []


# --- AttachmentCache: keys cannot escape the directory --------------------------------------------

BAD_KEYS: dict[str, tuple[cache.AttachmentKey, type[errors.CNIError]]] = {
    "network-dotdot": (
        cache.AttachmentKey(network_name="../x", container_id="c1", ifname="eth0"),
        errors.InvalidNetworkConfigError,
    ),
    "network-slash": (
        cache.AttachmentKey(network_name="a/b", container_id="c1", ifname="eth0"),
        errors.InvalidNetworkConfigError,
    ),
    "network-empty": (
        cache.AttachmentKey(network_name="", container_id="c1", ifname="eth0"),
        errors.InvalidNetworkConfigError,
    ),
    "container-slash": (
        cache.AttachmentKey(network_name="n", container_id="a/b", ifname="eth0"),
        errors.InvalidEnvironmentError,
    ),
    "container-dotdot": (
        cache.AttachmentKey(network_name="n", container_id="..", ifname="eth0"),
        errors.InvalidEnvironmentError,
    ),
    "ifname-slash": (
        cache.AttachmentKey(network_name="n", container_id="c1", ifname="a/b"),
        errors.InvalidEnvironmentError,
    ),
    "ifname-dotdot-slash": (
        cache.AttachmentKey(network_name="n", container_id="c1", ifname="../../x"),
        errors.InvalidEnvironmentError,
    ),
    "ifname-nul": (
        cache.AttachmentKey(network_name="n", container_id="c1", ifname="a\0b"),
        errors.InvalidEnvironmentError,
    ),
}


@pytest.mark.req("CNI-CACHE")
@pytest.mark.parametrize(("key", "error"), list(BAD_KEYS.values()), ids=list(BAD_KEYS))
def test_keys_that_would_escape_the_directory_are_refused(
    store: cache.AttachmentCache,
    tmp_path: Path,
    key: cache.AttachmentKey,
    error: type[errors.CNIError],
) -> None:
    for attempt in (
        lambda: store.path_for(key),
        lambda: store.save(entry(key)),
        lambda: store.load(key),
        lambda: store.delete(key),
    ):
        with pytest.raises(error):
            attempt()
    assert list(tmp_path.iterdir()) == []  # nothing was written anywhere


# --- hostile and ambiguous input ---


def test_distinct_keys_do_not_share_a_record(store: cache.AttachmentCache) -> None:
    first = entry(cache.AttachmentKey(network_name="net-a", container_id="x", ifname="eth0"))
    second = entry(cache.AttachmentKey(network_name="net", container_id="a-x", ifname="eth0"))
    store.save(first)
    store.save(second)
    assert store.load(first.key) == first
    assert store.load(second.key) == second


def test_a_deeply_nested_record_is_a_corrupt_record(store: cache.AttachmentCache) -> None:
    path = store.path_for(KEY)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"[" * 100_000)
    assert [type(e) for e in store.entries()] == [cache.CorruptRecordError]


@pytest.mark.parametrize(
    "data",
    [record(netns=None), record(netns=5), record(cniArgs=[[1, 2]]), record(cniArgs=["ab"])],
    ids=["netns-null", "netns-int", "cni-args-ints", "cni-args-two-char-string"],
)
def test_wrongly_typed_netns_and_cni_args_are_corrupt(
    store: cache.AttachmentCache, data: bytes
) -> None:
    path = store.path_for(KEY)
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    with pytest.raises(cache.CorruptRecordError):
        store.load(KEY)


@pytest.mark.req("RT-ATOMIC")
def test_only_durable_writes_and_removals_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_fsync = os.fsync
    synced: list[int] = []

    def counting(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting)
    path = tmp_path / "record"
    atomic.write_atomic(path, b"durable")
    assert len(synced) == 2  # the file, then its directory
    atomic.write_atomic(path, b"cheap", durable=False)
    assert atomic.remove(path, durable=False)
    assert len(synced) == 2
    atomic.write_atomic(path, b"again", durable=False)
    assert path.read_bytes() == b"again"
    assert atomic.remove(path)
    assert len(synced) == 3  # the directory
    assert list(tmp_path.iterdir()) == []


def test_the_runtime_cache_does_not_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its entries refine what the caller's durable record names (the daemon's pod record)."""
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", synced.append)
    store = cache.AttachmentCache(tmp_path)
    key = cache.AttachmentKey(network_name="net", container_id="ctr", ifname="net1")
    store.save(
        cache.CachedAttachment(
            key=key,
            netns="/run/netns/x",
            config={"cniVersion": "1.0.0", "name": "net", "plugins": []},
            cni_args=(),
            capability_args={},
            result=None,
        )
    )
    assert store.load(key) is not None
    store.delete(key)
    assert synced == []
