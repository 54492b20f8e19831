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

Element changes of hash sets (a peer joined, a peer left: most writes under churn) skip
libnftables: nft would parse the text and read the table's sets from the kernel before its
transaction. The helper writes them as nf_tables netlink messages itself, in one batch (one
transaction, all or nothing, as `nft -f`), and reads the kernel's errors as nft does: after the
send, whatever is queued (the kernel handles a batch inside the send).

Frames, both ways: a 4-byte big-endian length, then that many bytes of JSON.
    hello     {"ready": true} or {"unavailable": "<why>"} (then it exits)
    request   {"netns": "<path>", "commands": "<nft script>", "json": <bool>, "file": <bool>}
              (file: read as `nft -f` reads a script; else as nft's arguments)
              or {"netns": "<path>", "elements": "<verb> <set> <type> <address>,...\n..."}
              (a line per set and verb: verb "add" or "delete", type "ipv4_addr" or
              "ipv6_addr", in table inet netattach)
    reply     {"status": 0 or 1, "stdout": "...", "stderr": "..."} (nft's exit status and text)
    batch     {"batch": [request, ...]}, answered by {"batch": [reply, ...]} in the same order
              (one frame each way for the writes of a pass)
It exits when its input ends: the daemon closed the pipe, or died (no parent-death signal: that
follows the thread that started it, and the daemon starts it from a worker thread).
"""

from __future__ import annotations

import ctypes
import json
import os
import queue
import socket
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
TABLE = b"netattach"
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


# nf_tables over netlink (linux/netfilter/nfnetlink.h, nf_tables.h): what the helper needs to
# add and delete elements of a set of addresses.
NETLINK_NETFILTER = 12
SO_SNDBUFFORCE = 32  # (root) a send buffer beyond the system's maximum
SOL_NETLINK = 270
NETLINK_CAP_ACK = 10  # an error quotes the header of the message it is about, not all of it
NLMSG_ERROR = 2
NLM_F_REQUEST = 0x1
NLM_F_CREATE = 0x400
NLA_F_NESTED = 0x8000
NFNL_SUBSYS_NFTABLES = 10
NFNL_MSG_BATCH_BEGIN = 16
NFNL_MSG_BATCH_END = 17
NFT_MSG_NEWSETELEM = 12
NFT_MSG_DELSETELEM = 14
NFPROTO_INET = 1
NFTA_SET_ELEM_LIST_TABLE = 1
NFTA_SET_ELEM_LIST_SET = 2
NFTA_SET_ELEM_LIST_ELEMENTS = 3
NFTA_LIST_ELEM = 1
NFTA_SET_ELEM_KEY = 1
NFTA_DATA_VALUE = 1
ELEMENTS_PER_MESSAGE = 1024  # an attribute's length is 16 bits: 1,024 IPv6 keys fit
BATCH_BYTES_MAX = 4 * 1024 * 1024  # a longer element batch is refused (the send buffer is raised)
_NLMSG = struct.Struct("=IHHII")  # length, type, flags, sequence, port
_NFGEN = struct.Struct("=BBH")  # family, version, resource id (native order but for BATCH_*)
_VERBS = {
    "add": (NFT_MSG_NEWSETELEM, NLM_F_REQUEST | NLM_F_CREATE),
    "delete": (NFT_MSG_DELSETELEM, NLM_F_REQUEST),
}
_NEST = struct.Struct("=HH")


def _element_prefix(key_size: int) -> bytes:
    """What comes before an element's key: LIST_ELEM { KEY { VALUE <key> } }, all sized by it."""
    size = 12 + key_size
    return (
        _NEST.pack(size, NLA_F_NESTED | NFTA_LIST_ELEM)
        + _NEST.pack(size - 4, NLA_F_NESTED | NFTA_SET_ELEM_KEY)
        + _NEST.pack(size - 8, NFTA_DATA_VALUE)
    )


# by key type: (address family, what precedes each key)
_KEYS = {
    "ipv4_addr": (socket.AF_INET, _element_prefix(4)),
    "ipv6_addr": (socket.AF_INET6, _element_prefix(16)),
}
_HEADS: dict[str, bytes] = {}  # set name -> its table and set attributes (a pod's sets recur)


def _attr(kind: int, payload: bytes) -> bytes:
    size = 4 + len(payload)
    return _NEST.pack(size, kind) + payload + bytes(-size % 4)


def _head(set_name: str) -> bytes:
    found = _HEADS.get(set_name)
    if found is None:
        if len(_HEADS) > 65536:
            _HEADS.clear()
        found = _HEADS[set_name] = _NFGEN.pack(NFPROTO_INET, 0, 0) + (
            _attr(NFTA_SET_ELEM_LIST_TABLE, TABLE + b"\0")
            + _attr(NFTA_SET_ELEM_LIST_SET, set_name.encode() + b"\0")
        )
    return found


# an element change line -> its messages without their netlink headers (type, flags and the
# rest): a pass sends the same change to every pod whose table holds the set, so each line is
# encoded once, not once per pod
_ENCODED: dict[str, list[tuple[int, int, bytes, str]]] = {}
ENCODED_MAX = 4096


def _encoded(line: str) -> list[tuple[int, int, bytes, str]]:
    """What `line` (verb, set, key type, addresses joined by commas) makes: one message (type,
    flags, body, what it is about) per ELEMENTS_PER_MESSAGE addresses. Raises ValueError on a
    malformed line, an unknown verb or key type, or a bad address."""
    found = _ENCODED.get(line)
    if found is not None:
        return found
    words = line.split(" ")
    if len(words) != 4:
        raise ValueError(f"a malformed element change {line!r:.200}")
    verb, set_name, key_type, listed = words
    if verb not in _VERBS:
        raise ValueError(f"unknown element verb {verb!r}")
    if key_type not in _KEYS:
        raise ValueError(f"set {set_name}: elements of type {key_type!r} are not written here")
    msg_type = (NFNL_SUBSYS_NFTABLES << 8) | _VERBS[verb][0]
    flags = _VERBS[verb][1]
    family, prefix = _KEYS[key_type]
    head = _head(set_name)
    addresses = listed.split(",")
    found = []
    for start in range(0, len(addresses), ELEMENTS_PER_MESSAGE):
        chunk = addresses[start : start + ELEMENTS_PER_MESSAGE]
        try:
            # every element is its prefix and its key: the prefix joins the keys (in C)
            elements = prefix + prefix.join([socket.inet_pton(family, a) for a in chunk])
        except (OSError, TypeError) as exc:
            raise ValueError(f"set {set_name}: not a {key_type} in {chunk!r}") from exc
        body = head + _NEST.pack(4 + len(elements), NLA_F_NESTED | NFTA_SET_ELEM_LIST_ELEMENTS)
        found.append((msg_type, flags, body + elements, f"{verb} element in set {set_name}"))
    if len(_ENCODED) >= ENCODED_MAX:
        _ENCODED.clear()
    _ENCODED[line] = found
    return found


def _batch_marker(kind: int, seq: int) -> bytes:
    resource = struct.pack("!H", NFNL_SUBSYS_NFTABLES)
    return _NLMSG.pack(_NLMSG.size + 4, kind, NLM_F_REQUEST, seq, 0) + bytes(2) + resource


def element_batch(changes: str) -> tuple[bytes, list[str]]:
    """The batch (one transaction) making `changes` (lines of verb, set, key type and the
    addresses joined by commas), and what each of its sequence numbers is about. Raises
    ValueError."""
    if not isinstance(changes, str):
        raise ValueError(f"a malformed element change list {changes!r:.200}")
    about = ["the batch"]
    messages = [b""]
    for line in changes.splitlines():
        for msg_type, flags, body, what in _encoded(line):
            size = _NLMSG.size + len(body)
            messages.append(_NLMSG.pack(size, msg_type, flags, len(messages), 0) + body)
            about.append(what)
    messages[0] = _batch_marker(NFNL_MSG_BATCH_BEGIN, 0)
    messages.append(_batch_marker(NFNL_MSG_BATCH_END, len(messages)))
    about.append("the batch")
    return b"".join(messages), about


def netlink_errors(data: bytes) -> list[tuple[int, int]]:
    """(sequence number, errno) of each error among the netlink messages in `data`."""
    found = []
    offset = 0
    while offset + _NLMSG.size <= len(data):
        length, kind, _flags, seq, _port = _NLMSG.unpack_from(data, offset)
        if length < _NLMSG.size:
            break
        if kind == NLMSG_ERROR and offset + _NLMSG.size + 4 <= len(data):
            (code,) = struct.unpack_from("=i", data, offset + _NLMSG.size)
            if code:
                # the header of the message it answers follows the code
                inner = offset + _NLMSG.size + 4
                if inner + _NLMSG.size <= len(data):
                    seq = _NLMSG.unpack_from(data, inner)[3]
                found.append((seq, -code))
        offset += (length + 3) & ~3
    return found


def _failure(stderr: str) -> dict[str, object]:
    """The reply to a request that failed (as nft's exit status 1 with its message)."""
    return {"status": 1, "stdout": "", "stderr": stderr}


def _enter(lib: _Lib, netns: str) -> str | None:
    """Enter the netns at `netns`; what failed, else None (the caller goes home after)."""
    try:
        fd = os.open(netns, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        return f"cannot open {netns}: {exc.strerror}"
    try:
        lib.setns(fd)
    except OSError as exc:
        return f"cannot enter {netns}: {exc.strerror}"
    finally:
        os.close(fd)
    return None


def _write_elements(
    lib: _Lib, home: int, closer: _Closer, netns: str, changes: str
) -> dict[str, object]:
    """Element changes as one nf_tables batch sent on a netlink socket made in the netns."""
    try:
        batch, about = element_batch(changes)
    except ValueError as exc:
        return _failure(str(exc))
    if len(batch) > BATCH_BYTES_MAX:
        return _failure(f"a batch of {len(batch)} bytes")
    entering = _enter(lib, netns)
    if entering is not None:
        return _failure(entering)
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    except OSError as exc:
        return _failure(f"netlink socket in {netns}: {exc}")
    finally:
        try:
            lib.setns(home)  # home first, as for libnftables (`_serve`)
        except OSError:
            os._exit(3)
    failed: list[tuple[int, int]] = []
    try:
        sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)
        if len(batch) > 64 * 1024:
            sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 2 * len(batch))
        sock.sendto(batch, (0, 0))
        # The kernel ran the batch inside the send: its errors, if any, are queued already.
        sock.setblocking(False)
        while True:
            try:
                failed += netlink_errors(sock.recv(65536))
            except BlockingIOError:
                break
    except OSError as exc:
        return _failure(f"netlink batch in {netns}: {exc}")
    finally:
        closer.close_later(sock.detach())  # its close may wait for a grace period
    if not failed:
        return {"status": 0, "stdout": "", "stderr": ""}
    lines = [
        f"{about[seq] if 0 <= seq < len(about) else f'message {seq}'}: {os.strerror(code)}"
        for seq, code in failed
    ]
    return _failure("\n".join(lines))


def _serve(lib: _Lib, home: int, closer: _Closer, request: dict[str, Any]) -> dict[str, object]:
    netns = request["netns"]
    if "elements" in request:
        return _write_elements(lib, home, closer, netns, request["elements"])
    commands = request["commands"]
    entering = _enter(lib, netns)
    if entering is not None:
        return _failure(entering)
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
        return _failure("libnftables: cannot make a context")
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
        if "batch" in request:
            _write_frame(
                stdout, {"batch": [_serve(lib, home, closer, r) for r in request["batch"]]}
            )
        else:
            _write_frame(stdout, _serve(lib, home, closer, request))


if __name__ == "__main__":
    sys.exit(main())
