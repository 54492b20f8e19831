"""The kernel side effect of policy: netattach's nftables table inside a pod's netns.

Every call runs nft in a process of its own, so no thread of ours ever changes namespace: given
an `NftHelper`, in its long-lived helper process (`policy.nft_helper`, libnftables: one request
over a pipe, not two execs per write); else, or where the helper cannot load libnftables, as
`nsenter --net=<netns path> -- nft ...`. netattach owns exactly one table per pod netns,
`table inet netattach`; a rendered script replaces it whole in a single nft transaction
(`add table` + `delete table` + the new definition), so a failing script leaves the previous
table exactly as it was.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import subprocess
import sys
import weakref
from typing import Any, TypeAlias

from netattach import process
from netattach.cni import errors
from netattach.policy import nft_helper, update

log = logging.getLogger("netattach.policy")

TABLE = "netattach"
FAMILY = "inet"
NFT = "nft"
NSENTER = "nsenter"
READ_CHUNK = 65536
STDERR_TAIL = 2000  # characters of nft's stderr quoted in an error


def _tail(text: str) -> str:
    text = text.strip()
    if len(text) <= STDERR_TAIL:
        return text
    return "..." + text[-STDERR_TAIL:]


BATCH_MAX = 32  # requests sent in one frame at most


def _command(netns_path: str, commands: str, json_output: bool, file: bool) -> dict[str, object]:
    """A helper request running nft `commands` (`file`: a script) in the netns."""
    return {"netns": netns_path, "commands": commands, "json": json_output, "file": file}


class _HelperGoneError(Exception):
    """The helper process ended, or timed out and was killed, before it replied."""


_Waiting: TypeAlias = asyncio.Future[dict[str, Any]] | list[asyncio.Future[dict[str, Any]]]


class NftHelper:
    """One `policy.nft_helper` process, started when first needed and again after it dies.

    Requests made in one turn of the event loop are written to it as one frame at its end (a
    batch: it serves them in order, one at a time, and answers with one frame), and its replies
    are read by the running event loop, so the helper never waits for the daemon between two
    writes; no thread is involved. `close` ends it; so does the daemon's exit (the
    helper's input ends).
    """

    def __init__(self, argv: list[str] | None = None) -> None:
        self._argv = argv or [sys.executable, "-I", "-S", nft_helper.__file__]
        self.unavailable: str | None = None  # why libnftables cannot be used (nsenter is)
        self._child: subprocess.Popen[bytes] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # what each frame sent waits for (one request's reply, or a batch's, one per request),
        # and the timer ending a helper that does not answer it in time
        self._waiting: collections.deque[tuple[_Waiting, asyncio.TimerHandle]] = collections.deque()
        self._pending = 0  # requests sent or queued, not answered yet
        # requests made in this turn of the event loop, sent as one frame at its end (or when
        # there are BATCH_MAX of them): a pass's writes cost the two processes a few wake-ups
        self._queued: list[tuple[dict[str, object], asyncio.Future[dict[str, Any]], float]] = []
        # frames not yet written, the first one maybe in part (a full table is ~0.5 MB; a pipe
        # takes 64 KiB at a time, and cutting the written part off a buffer of several
        # tables would copy all of them each time)
        self._outgoing: collections.deque[memoryview] = collections.deque()
        self._incoming = bytearray()
        # The running helper, also held by a finalizer: a helper nobody closed ends with its
        # owner.
        self._slot: list[subprocess.Popen[bytes] | None] = [None]
        weakref.finalize(self, _stop_helper, self._slot)

    @property
    def pid(self) -> int | None:
        """The helper's pid while it runs (its CPU is not a reaped child's: benchmarks read
        it from /proc)."""
        child = self._child
        return child.pid if child is not None and child.poll() is None else None

    async def run(
        self,
        netns_path: str,
        commands: str,
        *,
        json_output: bool,
        timeout: float,
        file: bool = False,
    ) -> tuple[int, str, str] | None:
        """(exit status, stdout, stderr) of `commands` (`file`: a script, as `nft -f` reads
        one; else nft's arguments) in the netns; None when libnftables
        cannot be used here (run nft as a program instead)."""
        return await self.request(_command(netns_path, commands, json_output, file), timeout)

    async def request(
        self, request: dict[str, object], timeout: float
    ) -> tuple[int, str, str] | None:
        """(status, stdout, stderr) of one request (`policy.nft_helper` says what it holds);
        None when the helper cannot be used here."""
        if self.unavailable is not None:
            return None
        loop = asyncio.get_running_loop()
        if self._child is None or self._child.poll() is not None or self._loop is not loop:
            hello = await self._start(loop, timeout)
            if "ready" not in hello:
                self.unavailable = str(hello.get("unavailable", hello))
                log.warning("libnftables unavailable (%s): nft runs as a program", self.unavailable)
                self.close()
                return None
        try:
            reply = await self._send(request, timeout)
        except _HelperGoneError:
            if self.unavailable is not None:
                return None  # sent while the helper was starting: nft runs as a program
            raise
        try:
            return int(reply["status"]), str(reply["stdout"]), str(reply["stderr"])
        except (KeyError, TypeError, ValueError):
            self.close()  # not a reply: nothing it says is trusted
            raise _HelperGoneError(f"a malformed reply {str(reply)[:200]!r}") from None

    @property
    def pending(self) -> int:
        """Requests sent (or about to be) and not yet answered."""
        return self._pending

    def close(self, *, kill: bool = False, why: str = "the nft helper stopped") -> None:
        """End the helper (`kill`: at once, it is stuck); every request waiting for it fails
        (`why`)."""
        if self._child is not None and self._loop is not None and not self._loop.is_closed():
            assert self._child.stdout is not None
            self._loop.remove_reader(self._child.stdout.fileno())
            if self._child.stdin is not None:
                self._loop.remove_writer(self._child.stdin.fileno())
        _stop_helper(self._slot, kill=kill)
        self._child = self._loop = None
        self._outgoing.clear()
        self._incoming.clear()
        waiting, self._waiting = self._waiting, collections.deque()
        queued, self._queued = self._queued, []
        self._pending = 0
        futures = [f for _, f, _ in queued]
        for entry, timer in waiting:
            timer.cancel()
            futures += entry if isinstance(entry, list) else [entry]
        for future in futures:
            if not future.done():
                future.set_exception(_HelperGoneError(why))

    def _start(
        self, loop: asyncio.AbstractEventLoop, timeout: float
    ) -> asyncio.Future[dict[str, Any]]:
        """Start the helper; its hello, to come within `timeout`."""
        self.close()
        child = subprocess.Popen(
            self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True
        )
        assert child.stdin is not None
        assert child.stdout is not None
        self._child = self._slot[0] = child
        self._loop = loop
        os.set_blocking(child.stdin.fileno(), False)
        os.set_blocking(child.stdout.fileno(), False)
        hello: asyncio.Future[dict[str, Any]] = loop.create_future()
        self._waiting.append((hello, loop.call_later(timeout, self._timed_out, timeout)))
        self._pending = 1
        loop.add_reader(child.stdout.fileno(), self._readable)
        return hello

    def _send(self, request: dict[str, object], timeout: float) -> asyncio.Future[dict[str, Any]]:
        loop = self._loop
        if loop is None:
            raise _HelperGoneError("the nft helper exited")  # right after its hello
        future = loop.create_future()
        if not self._queued:
            loop.call_soon(self._flush)
        self._queued.append((request, future, timeout))
        self._pending += 1
        if len(self._queued) >= BATCH_MAX:
            self._flush()
        return future

    def _flush(self) -> None:
        """Send the queued requests: one as itself, several as one batch frame."""
        queued, self._queued = self._queued, []
        if not queued or self._loop is None:
            return  # sent already, or the helper stopped (and failed them)
        entry: _Waiting
        if len(queued) == 1:
            value, entry, timeout = queued[0]
        else:
            value = {"batch": [request for request, _, _ in queued]}
            entry = [future for _, future, _ in queued]
            timeout = max(t for _, _, t in queued)
        body = json.dumps(value).encode()
        was_idle = not self._outgoing
        self._outgoing.append(memoryview(nft_helper.frame_header(len(body)) + body))
        self._waiting.append((entry, self._loop.call_later(timeout, self._timed_out, timeout)))
        if was_idle:
            self._writable()

    def _timed_out(self, timeout: float) -> None:
        """A frame went unanswered for `timeout`: the helper is stuck. Killed, not waited for
        (that would hold the event loop), whatever it was doing; the next request starts a
        new one."""
        self.close(kill=True, why=f"no reply within {timeout:g}s")

    def _writable(self) -> None:
        child, loop = self._child, self._loop
        assert child is not None
        assert child.stdin is not None
        assert loop is not None
        fd = child.stdin.fileno()
        while self._outgoing:
            try:
                written = os.write(fd, self._outgoing[0])
            except BlockingIOError:
                break
            except OSError:
                self.close()
                return
            if written < len(self._outgoing[0]):
                self._outgoing[0] = self._outgoing[0][written:]
                break
            self._outgoing.popleft()
        if self._outgoing:
            loop.add_writer(fd, self._writable)
        else:
            loop.remove_writer(fd)

    def _readable(self) -> None:
        child = self._child
        assert child is not None
        assert child.stdout is not None
        try:
            data = os.read(child.stdout.fileno(), READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.close()  # it exited: the waiting requests fail, the next one starts it again
            return
        self._incoming += data
        while len(self._incoming) >= nft_helper.HEADER_SIZE:
            try:
                size = nft_helper.frame_size(bytes(self._incoming[: nft_helper.HEADER_SIZE]))
            except ValueError:
                self.close()
                return
            end = nft_helper.HEADER_SIZE + size
            if len(self._incoming) < end:
                return
            value = json.loads(self._incoming[nft_helper.HEADER_SIZE : end])
            del self._incoming[:end]
            entry, timer = self._waiting.popleft()
            timer.cancel()
            if isinstance(entry, list):
                replies = value.get("batch") if isinstance(value, dict) else None
                if not isinstance(replies, list) or len(replies) != len(entry):
                    # not the answer to what was asked: nothing it says is trusted
                    self._waiting.appendleft((entry, timer))  # (failed with the others)
                    self.close(why="a batch answered with the wrong number of replies")
                    return
                answered = zip(entry, replies, strict=True)
            else:
                answered = zip([entry], [value], strict=True)
            for future, reply in answered:
                self._pending -= 1
                if not future.done():
                    future.set_result(reply)


class NftHelpers:
    """A few `NftHelper`s, each request given to the one with the fewest waiting: a write
    spends most of its time waiting for the kernel's commit (not on a CPU), so tables of
    different pods are written side by side, as separate nft programs were."""

    def __init__(self, count: int) -> None:
        self.helpers = [NftHelper() for _ in range(count)]

    @property
    def pids(self) -> list[int]:
        return [pid for h in self.helpers if (pid := h.pid) is not None]

    async def run(
        self,
        netns_path: str,
        commands: str,
        *,
        json_output: bool,
        timeout: float,
        file: bool = False,
    ) -> tuple[int, str, str] | None:
        return await self.request(_command(netns_path, commands, json_output, file), timeout)

    async def request(
        self, request: dict[str, object], timeout: float
    ) -> tuple[int, str, str] | None:
        helper = min(self.helpers, key=lambda h: h.pending)
        return await helper.request(request, timeout)

    def close(self) -> None:
        for helper in self.helpers:
            helper.close()


def _stop_helper(slot: list[subprocess.Popen[bytes] | None], *, kill: bool = False) -> None:
    """End the helper in `slot`: closing its input ends it, and one that does not end within a
    second (or is known stuck: `kill`) is killed."""
    child, slot[0] = slot[0], None
    if child is None:
        return
    for pipe in (child.stdin, child.stdout):
        if pipe is not None:
            pipe.close()
    if not kill:
        try:
            child.wait(timeout=1.0)
            return
        except subprocess.TimeoutExpired:
            pass
    child.kill()
    child.wait()


async def _ask(
    helper: NftHelper | NftHelpers, request: dict[str, object], timeout: float, what: str
) -> tuple[int, str, str] | None:
    """The helper's (status, stdout, stderr) for `request`; None when it cannot be used here.
    A helper that stops first fails `what` with PolicyApplyError."""
    try:
        return await helper.request(request, timeout)
    except _HelperGoneError as exc:
        raise errors.PolicyApplyError(f"{what} failed: the nft helper stopped", str(exc)) from None


async def _nft(
    netns_path: str,
    *args: str,
    stdin: bytes | None = None,
    timeout: float,
    helper: NftHelper | NftHelpers | None = None,
) -> tuple[int, str, str]:
    """Run `nft args...` inside the netns at `netns_path`: (exit status, stdout, stderr)."""
    if helper is not None:
        json_output = args[:1] == ("-j",)
        words = args[1:] if json_output else args
        script = words == ("-f", "-")
        commands = (stdin or b"").decode() if script else " ".join(words)
        found = await _ask(
            helper,
            _command(netns_path, commands, json_output, script),
            timeout,
            f"nft {' '.join(args)} in {netns_path}",
        )
        if found is not None:
            return found
    argv = [NSENTER, f"--net={netns_path}", "--", NFT, *args]
    try:
        done = await process.run_in_loop(argv, dict(os.environ), stdin or b"", timeout)
    except process.TimedOutError:
        raise errors.PolicyApplyError(
            f"nft {' '.join(args)} in {netns_path} timed out after {timeout:g}s"
        ) from None
    except OSError as exc:
        raise errors.PolicyApplyError(
            f"cannot run {NSENTER} {NFT} in {netns_path}", str(exc)
        ) from exc
    return (
        done.returncode,
        done.stdout.decode(errors="replace"),
        done.stderr.decode(errors="replace"),
    )


def _failed(what: str, netns_path: str, status: int, stderr: str) -> errors.PolicyApplyError:
    return errors.PolicyApplyError(
        f"{what} in {netns_path} failed (nft exit {status})", _tail(stderr) or "(no stderr)"
    )


async def apply_ruleset(
    netns_path: str,
    script: str,
    *,
    timeout: float = 10.0,
    helper: NftHelper | NftHelpers | None = None,
) -> None:
    """Run `script` with `nft -f -` in the netns: one transaction, all of it or none.

    The script replaces netattach's table itself (it starts with `add table inet netattach`
    and `delete table inet netattach`). Failure raises `PolicyApplyError` quoting nft.
    """
    status, _, err = await _nft(
        netns_path, "-f", "-", stdin=script.encode(), timeout=timeout, helper=helper
    )
    if status != 0:
        raise _failed("applying the policy ruleset", netns_path, status, err)


async def update_elements(
    netns_path: str,
    changes: list[update.SetChange],
    *,
    timeout: float = 10.0,
    helper: NftHelper | NftHelpers | None = None,
) -> None:
    """Delete and add elements of hash sets of netattach's table in the netns, in one
    transaction: as netlink messages by the helper, else as an nft script."""
    if not changes:
        return
    if helper is not None:
        # One line per set and verb (a string, not lists of strings: a pass's frame of element
        # changes cost the daemon its encoding, and the helper its decoding, string by string)
        lines = [
            *(f"delete {c.name} {c.kind} {','.join(c.gone)}" for c in changes if c.gone),
            *(f"add {c.name} {c.kind} {','.join(c.added)}" for c in changes if c.added),
        ]
        request: dict[str, object] = {"netns": netns_path, "elements": "\n".join(lines)}
        found = await _ask(helper, request, timeout, f"updating set elements in {netns_path}")
        if found is not None:
            status, _, err = found
            if status != 0:
                raise _failed("updating set elements", netns_path, status, err)
            return
    script = update.changes_text(changes)
    if script is not None:
        await apply_ruleset(netns_path, script, timeout=timeout)


async def list_tables(
    netns_path: str, *, timeout: float = 10.0, helper: NftHelper | NftHelpers | None = None
) -> list[str]:
    """The netns's nftables tables as `"<family> <name>"`, in nft's order."""
    status, out, err = await _nft(
        netns_path, "-j", "list", "tables", timeout=timeout, helper=helper
    )
    if status != 0:
        raise _failed("listing nftables tables", netns_path, status, err)
    try:
        doc: Any = json.loads(out)
        items = doc["nftables"]
        tables: list[str] = []
        for item in items:
            table = item.get("table") if isinstance(item, dict) else None
            if isinstance(table, dict):
                tables.append(f"{table['family']} {table['name']}")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise errors.PolicyApplyError(
            f"cannot parse `nft -j list tables` in {netns_path}", _tail(out)
        ) from exc
    return tables


async def _present(netns_path: str, timeout: float, helper: NftHelper | NftHelpers | None) -> bool:
    return f"{FAMILY} {TABLE}" in await list_tables(netns_path, timeout=timeout, helper=helper)


async def read_table(
    netns_path: str, *, timeout: float = 10.0, helper: NftHelper | NftHelpers | None = None
) -> str | None:
    """`nft list table inet netattach` as nft prints it, or None when there is no table."""
    status, out, err = await _nft(
        netns_path, "list", "table", FAMILY, TABLE, timeout=timeout, helper=helper
    )
    if status == 0:
        return out
    if not await _present(netns_path, timeout, helper):
        return None
    raise _failed(f"reading table {FAMILY} {TABLE}", netns_path, status, err)


async def remove_table(
    netns_path: str, *, timeout: float = 10.0, helper: NftHelper | NftHelpers | None = None
) -> bool:
    """Delete netattach's table if present; True when it existed. Idempotent."""
    status, _, err = await _nft(
        netns_path, "delete", "table", FAMILY, TABLE, timeout=timeout, helper=helper
    )
    if status == 0:
        return True
    if not await _present(netns_path, timeout, helper):
        return False
    raise _failed(f"deleting table {FAMILY} {TABLE}", netns_path, status, err)
