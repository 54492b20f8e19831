"""The nft helper: a long-lived process running nft commands through libnftables, each in the
network namespace its request names (`policy.apply.NftHelper` starts it and talks to it).

Run as a program (`python -I -S nft_helper.py`), standard library only. Each `nsenter` + `nft`
pair costs two execs and nft's start-up (~2.5 ms of CPU) before any rule is read; this process
pays that once. A request is served in the netns it names: the process enters it, makes a
libnftables context there (its netlink socket stays bound to that netns), enters its own netns
again, runs the commands and frees the context, so no socket keeps a pod's netns alive between
requests. Requests are served one at a time, by one thread: nothing else runs while it is inside
a pod's netns.

Sockets are closed by other threads, after the reply. A write that deletes anything (an element,
a rule, a table) leaves the kernel with objects to free after an RCU grace period, and releasing
any nf_tables netlink socket while such work is pending, in whatever netns, waits for it: ~13
ms here. libnftables closes its socket in `nft_ctx_free`, so that wait was most of every request
under churn. The helper keeps a duplicate of each context's socket, so `nft_ctx_free` returns at
once, and hands the duplicate to a few closer threads, where the waits overlap each other and
the next requests. A pod's netns is held by its socket only until then (milliseconds).

Frames, both ways: a 4-byte big-endian length, then that many bytes of JSON.
    hello     {"ready": true} or {"unavailable": "<why>"} (then it exits)
    request   {"netns": "<path>", "commands": "<nft script>", "json": <bool>, "file": <bool>}
              (file: read as `nft -f` reads a script; else as nft's arguments)
    reply     {"status": 0 or 1, "stdout": "...", "stderr": "..."} (nft's exit status and text)
It exits when its input ends: the daemon closed the pipe, or died (no parent-death signal: that
follows the thread that started it, and the daemon starts it from a worker thread).
"""

from __future__ import annotations

import ctypes
import json
import os
import queue
import struct
import sys
import threading
from typing import Any, BinaryIO

LIBRARY = "libnftables.so.1"
CLONE_NEWNET = 0x40000000
NFT_CTX_OUTPUT_JSON = 1 << 4
FRAME_MAX = 64 * 1024 * 1024  # a request longer than this is refused
_HEADER = struct.Struct(">I")
HEADER_SIZE = _HEADER.size
CLOSERS = 8  # threads closing sockets: each close may wait for a grace period, side by side
HELD_MAX = 256  # sockets waiting for a closer; beyond this a request closes its own


def frame_header(size: int) -> bytes:
    return _HEADER.pack(size)


def frame_size(header: bytes) -> int:
    """The length a frame's header announces (refused beyond `FRAME_MAX`)."""
    (size,) = _HEADER.unpack(header)
    if size > FRAME_MAX:
        raise ValueError(f"a frame of {size} bytes")
    return int(size)


class _Lib:
    """libnftables and the two libc calls the helper needs, through ctypes."""

    def __init__(self) -> None:
        nft = ctypes.CDLL(LIBRARY, use_errno=True)
        libc = ctypes.CDLL(None, use_errno=True)
        ptr = ctypes.c_void_p
        nft.nft_ctx_new.restype = ptr
        nft.nft_ctx_new.argtypes = [ctypes.c_uint32]
        nft.nft_ctx_free.argtypes = [ptr]
        nft.nft_ctx_buffer_output.argtypes = [ptr]
        nft.nft_ctx_buffer_error.argtypes = [ptr]
        nft.nft_ctx_output_set_flags.argtypes = [ptr, ctypes.c_uint]
        nft.nft_ctx_get_output_buffer.restype = ctypes.c_char_p
        nft.nft_ctx_get_output_buffer.argtypes = [ptr]
        nft.nft_ctx_get_error_buffer.restype = ctypes.c_char_p
        nft.nft_ctx_get_error_buffer.argtypes = [ptr]
        nft.nft_run_cmd_from_buffer.argtypes = [ptr, ctypes.c_char_p]
        nft.nft_run_cmd_from_filename.argtypes = [ptr, ctypes.c_char_p]
        libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
        self.nft = nft
        self.libc = libc

    def setns(self, fd: int) -> None:
        if self.libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))


class _Closer:
    """Closes the helper's spare socket descriptors in its own threads (see the module doc)."""

    def __init__(self, threads: int) -> None:
        self._fds: queue.SimpleQueue[int] = queue.SimpleQueue()
        for index in range(threads):
            threading.Thread(target=self._run, name=f"closer-{index}", daemon=True).start()

    def close_later(self, fd: int) -> None:
        if self._fds.qsize() >= HELD_MAX:
            os.close(fd)  # the closers are behind: this request waits, as it did without them
        else:
            self._fds.put(fd)

    def _run(self) -> None:
        while True:
            os.close(self._fds.get())


def _sockets() -> dict[str, int]:
    """The sockets this process holds, by the name /proc gives them (`socket:[inode]`)."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # closed meanwhile, by a closer
        if target.startswith("socket:"):
            found[target] = int(name)
    return found


def _hold_new_socket(before: dict[str, int]) -> int | None:
    """A duplicate of the one socket opened since `before` was taken (the context's), or None
    when there is not exactly one: the request then closes it itself, waiting as it may."""
    new = [fd for target, fd in _sockets().items() if target not in before]
    if len(new) != 1:
        return None
    try:
        return os.dup(new[0])
    except OSError:
        return None


def _read_frame(stream: BinaryIO) -> Any:
    """The next frame's value, or None at the end of the input."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    size = frame_size(header)
    body = stream.read(size)
    if len(body) < size:
        return None
    return json.loads(body)


def _write_frame(stream: BinaryIO, value: object) -> None:
    body = json.dumps(value).encode()
    stream.write(frame_header(len(body)) + body)
    stream.flush()


def _run_file(lib: _Lib, ctx: int, script: str) -> int:
    """`nft -f`: the script read as a file (a buffer run names the wrong line in errors)."""
    fd = os.memfd_create("nft-script")
    try:
        os.write(fd, script.encode())
        return int(lib.nft.nft_run_cmd_from_filename(ctx, f"/proc/self/fd/{fd}".encode()))
    finally:
        os.close(fd)


def _serve(lib: _Lib, home: int, closer: _Closer, request: dict[str, Any]) -> dict[str, object]:
    netns, commands = request["netns"], request["commands"]
    try:
        fd = os.open(netns, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        return {"status": 1, "stdout": "", "stderr": f"cannot open {netns}: {exc.strerror}"}
    try:
        lib.setns(fd)
    except OSError as exc:
        return {"status": 1, "stdout": "", "stderr": f"cannot enter {netns}: {exc.strerror}"}
    finally:
        os.close(fd)
    before = _sockets()
    try:
        ctx = lib.nft.nft_ctx_new(0)
    finally:
        # Back home before anything else: a helper stuck in a pod's netns would write the next
        # pod's table there. If that fails it cannot be trusted with another request.
        try:
            lib.setns(home)
        except OSError:
            os._exit(3)
    if not ctx:
        return {"status": 1, "stdout": "", "stderr": "libnftables: cannot make a context"}
    held = _hold_new_socket(before)
    try:
        lib.nft.nft_ctx_buffer_output(ctx)
        lib.nft.nft_ctx_buffer_error(ctx)
        if request.get("json"):
            lib.nft.nft_ctx_output_set_flags(ctx, NFT_CTX_OUTPUT_JSON)
        if request.get("file"):
            status = _run_file(lib, ctx, commands)
        else:
            status = lib.nft.nft_run_cmd_from_buffer(ctx, commands.encode())
        out = lib.nft.nft_ctx_get_output_buffer(ctx) or b""
        err = lib.nft.nft_ctx_get_error_buffer(ctx) or b""
    finally:
        lib.nft.nft_ctx_free(ctx)  # closes its descriptor; the socket stays open in `held`
        if held is not None:
            closer.close_later(held)
    return {
        "status": 0 if status == 0 else 1,
        "stdout": out.decode(errors="replace"),
        "stderr": err.decode(errors="replace"),
    }


def main() -> int:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    try:
        lib = _Lib()
        home = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        _write_frame(stdout, {"unavailable": str(exc)})
        return 0
    closer = _Closer(CLOSERS)
    _write_frame(stdout, {"ready": True})
    while True:
        request = _read_frame(stdin)
        if request is None:
            return 0
        _write_frame(stdout, _serve(lib, home, closer, request))


if __name__ == "__main__":
    sys.exit(main())
