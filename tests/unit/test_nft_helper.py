"""`policy.apply.NftHelper` without root: its frames, and what it does when the helper cannot
serve (libnftables missing, a helper that never answers, one that dies)."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import struct
import sys
import time
from pathlib import Path

import pytest

from netattach.cni import errors
from netattach.policy import apply, nft_helper

pytestmark = pytest.mark.req("POL-UPDATE")


def test_a_frame_is_a_length_and_its_bytes() -> None:
    header = nft_helper.frame_header(5)
    assert len(header) == nft_helper.HEADER_SIZE
    assert nft_helper.frame_size(header) == 5


def test_a_frame_longer_than_the_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="frame"):
        nft_helper.frame_size(nft_helper.frame_header(nft_helper.FRAME_MAX + 1))


def _program(tmp_path: Path, body: str) -> list[str]:
    script = tmp_path / "helper.py"
    script.write_text(body)
    return [sys.executable, "-I", "-S", str(script)]


HELLO = """
import json, struct, sys, time
def send(value):
    body = json.dumps(value).encode()
    sys.stdout.buffer.write(struct.pack(">I", len(body)) + body)
    sys.stdout.buffer.flush()
"""


def test_without_libnftables_nft_runs_as_a_program(tmp_path: Path) -> None:
    helper = apply.NftHelper(_program(tmp_path, HELLO + 'send({"unavailable": "no lib"})\n'))
    found = asyncio.run(helper.run("/nowhere", "list tables", json_output=False, timeout=5.0))
    assert found is None
    assert helper.unavailable == "no lib"
    assert helper.pid is None


def test_a_helper_that_never_answers_is_ended_and_the_write_fails(tmp_path: Path) -> None:
    helper = apply.NftHelper(_program(tmp_path, HELLO + 'send({"ready": True})\ntime.sleep(60)\n'))

    async def main() -> None:
        with pytest.raises(errors.PolicyApplyError, match="helper stopped"):
            await apply.apply_ruleset("/nowhere", "list tables\n", timeout=0.5, helper=helper)

    asyncio.run(main())
    assert helper.pid is None


def test_a_helper_that_dies_fails_the_write_and_the_next_one_starts_again(tmp_path: Path) -> None:
    helper = apply.NftHelper(_program(tmp_path, HELLO + 'send({"ready": True})\nsys.exit(0)\n'))

    async def main() -> list[int | None]:
        pids = []
        for _ in range(2):
            with pytest.raises(errors.PolicyApplyError, match="helper stopped"):
                await apply.apply_ruleset("/nowhere", "list tables\n", helper=helper)
            pids.append(helper.pid)
        return pids

    assert asyncio.run(main()) == [None, None]


ECHO = HELLO + (
    'send({"ready": True})\n'
    "frames = 0\n"
    "def echo(req):\n"
    '    return {"status": 0, "stdout": f"{req[\'netns\']} {req[\'commands\']} {frames}",'
    ' "stderr": ""}\n'
    "while True:\n"
    "    head = sys.stdin.buffer.read(4)\n"
    "    if len(head) < 4: break\n"
    '    req = json.loads(sys.stdin.buffer.read(struct.unpack(">I", head)[0]))\n'
    "    frames += 1\n"
    '    if "batch" in req:\n'
    '        send({"batch": [echo(r) for r in req["batch"]]})\n'
    "    else:\n"
    "        send(echo(req))\n"
)


def test_replies_come_back_to_their_requests_in_order(tmp_path: Path) -> None:
    helpers = apply.NftHelpers(2)
    for h in helpers.helpers:
        h._argv = _program(tmp_path, ECHO)

    async def main() -> list[tuple[int, str, str] | None]:
        # each helper started, and its frame 1 sent
        await asyncio.gather(
            *(h.run("/ns", "started", json_output=False, timeout=5.0) for h in helpers.helpers)
        )
        return await asyncio.gather(
            *(
                helpers.run(f"/ns{i}", "x" * (i * 30000), json_output=False, timeout=5.0)
                for i in range(6)
            )
        )

    replies = asyncio.run(main())
    # Made in one turn of the loop, the six went to the two helpers in turn, in one frame each.
    assert [r[1] if r else None for r in replies] == [
        f"/ns{i} " + "x" * (i * 30000) + " 2" for i in range(6)
    ]
    helpers.close()
    assert helpers.pids == []


def test_a_batch_answered_wrongly_stops_the_helper_and_fails_its_requests(
    tmp_path: Path,
) -> None:
    short = HELLO + (
        'send({"ready": True})\n'
        "while True:\n"
        "    head = sys.stdin.buffer.read(4)\n"
        "    if len(head) < 4: break\n"
        '    req = json.loads(sys.stdin.buffer.read(struct.unpack(">I", head)[0]))\n'
        '    send({"batch": []})\n'
    )
    helper = apply.NftHelper(_program(tmp_path, short))

    async def main(count: int) -> list[BaseException | tuple[int, str, str] | None]:
        return await asyncio.gather(
            *(helper.run(f"/ns{i}", "x", json_output=False, timeout=5.0) for i in range(count)),
            return_exceptions=True,
        )

    for count in (1, 3):  # one request, given a batch's reply; three, given too few replies
        replies = asyncio.run(main(count))
        assert len(replies) == count
        assert all(isinstance(r, apply._HelperGoneError) for r in replies), replies
        assert helper.pending == 0
        assert helper.pid is None


def test_the_socket_a_context_opens_is_held_and_only_that_one() -> None:
    before = nft_helper._sockets()
    opened = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        held = nft_helper._hold_new_socket(before)
        assert held is not None
        try:
            # The same socket under another descriptor: it outlives the original's close.
            assert os.fstat(held).st_ino == os.fstat(opened.fileno()).st_ino
        finally:
            os.close(held)
        again = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            # Two new sockets: which one is the context's is not known, so none is held.
            assert nft_helper._hold_new_socket(before) is None
        finally:
            again.close()
    finally:
        opened.close()
    assert nft_helper._hold_new_socket(nft_helper._sockets()) is None  # none opened


def test_held_sockets_are_closed_by_the_closers_and_at_once_when_they_are_behind() -> None:
    closer = nft_helper._Closer(2)
    held = [os.dup(s.fileno()) for s in [socket.socket(socket.AF_UNIX)] for _ in range(20)]
    for fd in held:
        closer.close_later(fd)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_is_open(fd) for fd in held):
        time.sleep(0.01)
    assert not any(_is_open(fd) for fd in held)

    stalled = nft_helper._Closer(0)  # no thread: every descriptor waits, up to HELD_MAX
    read_end, write_end = os.pipe()
    waiting = [os.dup(read_end) for _ in range(nft_helper.HELD_MAX)]
    try:
        for fd in waiting:
            stalled.close_later(fd)
        one_more = os.dup(read_end)
        stalled.close_later(one_more)
        assert not _is_open(one_more)  # closed by the caller: the queue was full
        assert all(_is_open(fd) for fd in waiting)
    finally:
        for fd in (*waiting, read_end, write_end):
            os.close(fd)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_element_changes_are_lines_of_verb_set_type_and_addresses() -> None:
    batch, about = nft_helper.element_batch(
        "delete s1_a4 ipv4_addr 10.0.0.1,10.0.0.2\nadd s1_a6 ipv6_addr fd00::1"
    )
    assert about == [
        "the batch",
        "delete element in set s1_a4",
        "add element in set s1_a6",
        "the batch",
    ]
    assert batch.count(b"s1_a4\0") == 1
    assert batch.count(b"s1_a6\0") == 1
    # each address's key, in network order, after its element's attribute headers
    assert bytes([10, 0, 0, 1]) in batch
    assert bytes([10, 0, 0, 2]) in batch


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (["add", "s", "ipv4_addr", ["10.0.0.1"]], "a malformed element change list"),
        ("add s ipv4_addr", "a malformed element change 'add s ipv4_addr'"),
        ("add s ipv4_addr 10.0.0.1 extra", "a malformed element change"),
        ("move s ipv4_addr 10.0.0.1", "unknown element verb 'move'"),
        ("add s inet_service 80", "set s: elements of type 'inet_service' are not written here"),
        ("add s ipv4_addr 10.0.0.1,", "set s: not a ipv4_addr in ['10.0.0.1', '']"),
    ],
)
def test_a_malformed_element_change_is_refused_by_name(changes: object, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        nft_helper.element_batch(changes)  # type: ignore[arg-type]


def test_a_change_sent_to_many_pods_is_encoded_once_and_numbered_per_batch() -> None:
    line = "add s2_a4 ipv4_addr 10.0.0.7,10.0.0.8"
    alone, _ = nft_helper.element_batch(line)
    after, _ = nft_helper.element_batch(f"delete s2_a4 ipv4_addr 10.0.0.9\n{line}")
    assert nft_helper._encoded(line) is nft_helper._encoded(line)  # kept, not made again
    # the same message body, under the sequence number of where it stands in each batch
    (_, add_alone, _), (_, _, add_after, _) = _messages(alone), _messages(after)
    assert add_alone[0] == 1
    assert add_after[0] == 2
    assert add_alone[1] == add_after[1]


def _messages(batch: bytes) -> list[tuple[int, bytes]]:
    """(sequence number, body) of each netlink message of a batch."""
    out = []
    offset = 0
    while offset < len(batch):
        length, _, _, seq, _ = struct.unpack_from("=IHHII", batch, offset)
        out.append((seq, batch[offset + 16 : offset + length]))
        offset += length
    return out
