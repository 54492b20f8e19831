#!/usr/bin/env bash
# Build the netattach shim (src/netattach/shim) in the forms a node's host runs it as:
#
#   build-shim.sh native OUT       the static C program (netattach-shim.c): what the image carries
#                                  and `netattach daemon` installs by default; no libc, loader or
#                                  interpreter needed on the host
#   build-shim.sh sanitized OUT    the same file with AddressSanitizer + UBSan (dynamic; tests only)
#   build-shim.sh zipapp OUT       the Python form, for hosts with python3 >= 3.9; shebang
#                                  `/usr/bin/env python3`
#   build-shim.sh measure CMD...   start-up of 50 runs of `CNI_COMMAND=VERSION CMD` (after 5 warm-up)
#
# CC (default cc) compiles the native forms; PYTHON (default .venv/bin/python) builds the zipapp.
#
# The native shim's flags are part of its code: C11, every warning an error, fortified, static.
# Static with glibc: it runs on any x86_64 Linux kernel, whatever the host's libc (RHEL 8, Amazon
# Linux 2, Talos, Bottlerocket, Flatcar), and in a mount namespace that holds nothing but itself
# and the daemon's socket; glibc's strerror texts are Python's, so both forms word an errno
# alike. It reads nothing of the system (no NSS, no locale).
#
# Start-up, `measure` on this project's 2-core machine (2026-11-26, CNI VERSION, mean of 50):
#   native (static C)                                              ~0.6 ms
#   python3.11 -I -S netattach-shim.pyz                            ~12 ms
#   (the Nuitka and PyInstaller builds this replaced: 20 and 48 ms, and they needed the build
#   host's glibc on the node)
#
# The zipapp's shebang is `/usr/bin/env python3`: a PATH whose python3 is a wrapper script
# (pyenv's shims) costs ~70 ms more per call.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SRC="$ROOT/src"
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi

usage() {
  sed -n '2,12s/^#//p' "$0" >&2
  exit 2
}

# The zipapp is built by the same code the daemon uses when it has no native shim to install.
build_zipapp() {
  PYTHONPATH="$SRC" "$PYTHON" -c 'import sys; from pathlib import Path
from netattach.daemon import shim_install
print("built", shim_install.build_zipapp(Path(sys.argv[1])))' "$1"
}

NATIVE_FLAGS=(-std=c11 -O2 -Wall -Wextra -Werror -D_FORTIFY_SOURCE=2 -static)
SANITIZER_FLAGS=(-std=c11 -O1 -g -Wall -Wextra -Werror -fno-omit-frame-pointer
  -fsanitize=address,undefined -fno-sanitize-recover=all)

build_native() {
  local out="$1" flags=("${@:2}")
  mkdir -p "$(dirname "$out")"
  # Written beside and renamed: a daemon installing from OUT never copies half a program.
  "${CC:-cc}" "${flags[@]}" -o "$out.tmp" "$SRC/netattach/shim/netattach-shim.c"
  mv -f "$out.tmp" "$out"
  echo "built $out"
}

measure() {
  "$PYTHON" - "$@" <<'EOF'
import os, statistics, subprocess, sys, time
command = sys.argv[1:]
env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CNI_COMMAND": "VERSION"}
config = b'{"cniVersion": "1.0.0"}'
times = []
for _ in range(55):
    start = time.perf_counter()
    subprocess.run(command, input=config, env=env, stdout=subprocess.DEVNULL, check=True)
    times.append((time.perf_counter() - start) * 1000)
times = times[5:]  # the first runs warm the page cache
print(f"{' '.join(command)}: mean {statistics.mean(times):.1f} ms, "
      f"median {statistics.median(times):.1f} ms, min {min(times):.1f} ms (50 runs)")
EOF
}

case "${1:-}" in
  native) [ $# -eq 2 ] || usage; build_native "$2" "${NATIVE_FLAGS[@]}" ;;
  sanitized) [ $# -eq 2 ] || usage; build_native "$2" "${SANITIZER_FLAGS[@]}" ;;
  zipapp) [ $# -eq 2 ] || usage; build_zipapp "$2" ;;
  measure) [ $# -ge 2 ] || usage; shift; measure "$@" ;;
  *) usage ;;
esac
