"""The native shim's own properties: a static program that needs nothing from the host.

The C form is what nodes install. It must run where the host has no Python and an old libc,
in a mount namespace that holds nothing but the program and the daemon's socket.
"""

import os
import struct
import subprocess
from pathlib import Path

import pytest

from netattach.cni import spec
from tests.shim.stub_daemon import StubDaemon, wire_reply

PT_INTERP = 3
PT_DYNAMIC = 2
DT_NEEDED = 1
RESULT = b'{"cniVersion": "1.0.0", "interfaces": [{"name": "eth0"}]}'


def program_headers(elf: bytes) -> list[tuple[int, int, int]]:
    """(type, file offset, file size) of each program header of a 64-bit little-endian ELF."""
    assert elf[:4] == b"\x7fELF", "not an ELF file"
    assert elf[4] == 2, "not a 64-bit ELF"
    assert elf[5] == 1, "not a little-endian ELF"
    (phoff,) = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    headers = []
    for index in range(phnum):
        p_type, _flags, p_offset = struct.unpack_from("<IIQ", elf, phoff + index * phentsize)
        (p_filesz,) = struct.unpack_from("<Q", elf, phoff + index * phentsize + 0x20)
        headers.append((p_type, p_offset, p_filesz))
    return headers


def needed_libraries(elf: bytes) -> int:
    """How many DT_NEEDED entries the dynamic section holds (0 without one)."""
    count = 0
    for p_type, offset, size in program_headers(elf):
        if p_type != PT_DYNAMIC:
            continue
        for at in range(offset, offset + size, 16):
            tag, _value = struct.unpack_from("<qQ", elf, at)
            count += tag == DT_NEEDED
    return count


def test_the_native_shim_is_static_with_no_interpreter_and_no_needed_library(
    native_path: Path,
) -> None:
    elf = native_path.read_bytes()
    types = [p_type for p_type, _, _ in program_headers(elf)]

    assert PT_INTERP not in types  # no dynamic loader named: the kernel runs it as it is
    assert needed_libraries(elf) == 0
    assert os.access(native_path, os.X_OK)


def test_the_sanitized_build_is_the_same_program_under_sanitizers(sanitized_path: Path) -> None:
    # Instrumented: it needs the sanitizer runtimes and calls their report hooks.
    elf = sanitized_path.read_bytes()

    assert needed_libraries(elf) > 0
    assert b"libasan.so" in elf
    assert b"__asan_report_load" in elf
    assert b"__ubsan_handle_" in elf


@pytest.mark.netns
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a mount namespace and chroot")
def test_the_native_shim_runs_alone_in_an_empty_mount_namespace(
    native_path: Path, daemon: StubDaemon, tmp_path: Path
) -> None:
    """A root holding only the program and the daemon's socket: no /lib, no /etc, no /proc."""
    daemon.answer = wire_reply(0, RESULT)
    root = tmp_path / "root"
    root.mkdir()
    stdin = b'{"cniVersion": "1.0.0", "daemonSocket": "/netattach.sock"}'
    script = (
        'set -e; mount -t tmpfs na-shim-root "$ROOT"; cp "$SHIM" "$ROOT/netattach"; '
        'touch "$ROOT/netattach.sock"; mount --bind "$SOCK" "$ROOT/netattach.sock"; '
        'ls -A "$ROOT" >&2; exec chroot "$ROOT" /netattach'
    )
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "ROOT": str(root),
        "SHIM": str(native_path),
        "SOCK": str(daemon.path),
        "CNI_CONTAINERID": "c0ffee",
    }
    runs = {}
    for command in ("VERSION", "ADD"):
        runs[command] = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            input=stdin,
            env={**env, "CNI_COMMAND": command},
            capture_output=True,
            timeout=60,
            check=False,
        )

    for done in runs.values():
        assert done.stderr.split() == [b"netattach", b"netattach.sock"], done.stderr
    assert runs["VERSION"].returncode == 0
    assert runs["VERSION"].stdout.startswith(b'{"cniVersion": "1.0.0", "supportedVersions": ')
    assert (runs["ADD"].returncode, runs["ADD"].stdout) == (0, RESULT)
    [request] = daemon.requests
    assert request.decoded() == ({"CNI_CONTAINERID": "c0ffee", "CNI_COMMAND": "ADD"}, stdin)
    assert not any(root.iterdir()), "the tmpfs went with the namespace"


def test_the_native_shim_knows_the_versions_the_python_vocabulary_lists(native_path: Path) -> None:
    # netattach-shim.c spells the supported versions out; cni/spec.py is where they are decided.
    done = subprocess.run(
        [str(native_path)],
        input=b"{}",
        env={"CNI_COMMAND": "VERSION"},
        capture_output=True,
        check=True,
    )
    assert done.stdout == (
        b'{"cniVersion": "%s", "supportedVersions": [%s]}'
        % (spec.CURRENT_VERSION.encode(), b", ".join(b'"%s"' % v.encode() for v in spec.VERSIONS))
    )
