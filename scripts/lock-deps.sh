#!/usr/bin/env bash
# `make lock`: write constraints.txt, the exact version of every Python package netattach's
# installs may take, so a release published upstream between two runs changes none of them.
#
#   lock-deps.sh [OUT]     OUT defaults to constraints.txt at the repository's root
#
# What it pins: pyproject.toml's dependencies, its extras (`test`, `demo`) and its build-system
# requires, with everything they pull in, plus pip. They are resolved afresh (the newest releases
# that fit pyproject.toml) into a clean virtualenv of PYTHON (default python3) in a temporary
# directory, which is then frozen; netattach itself is not installed there and the checkout is
# not touched.
#
# Who installs from it: `make venv` (pip, then `-e .[test,demo]`, with `--constraint` and
# `--build-constraint`, so setuptools building the editable install is the pinned one too),
# `make demo` (`-e .[demo]`, the same way), deploy/image/build-inputs.sh (the image's wheels: `make image` and deploy/Dockerfile) and so CI
# (.ci/run: make test). Versions only, no hashes: a hash names one file, and the wheels of
# grpcio, msgspec, PyYAML, mypy, ruff... differ by Python version and platform; pins made on the
# Python 3.11 of Debian 12 (the image's) also hold elsewhere, where a package needed only on
# another Python would install unpinned rather than fail.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${1:-$ROOT/constraints.txt}"
PYTHON="${PYTHON:-python3}"

work="$(mktemp -d "${TMPDIR:-/tmp}/na-lock-XXXXXX")"
trap 'rm -rf "$work"' EXIT

"$PYTHON" -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip --quiet --disable-pip-version-check --no-input)
"${pip[@]}" install --upgrade pip
# Every requirement pyproject.toml states, as pip reads them (one a line).
"$work/venv/bin/python" - "$ROOT/pyproject.toml" >"$work/requirements.txt" <<'EOF'
import sys, tomllib
with open(sys.argv[1], "rb") as stream:
    pyproject = tomllib.load(stream)
extras = pyproject["project"]["optional-dependencies"].values()
for requirement in dict.fromkeys(
    pyproject["project"]["dependencies"]
    + [text for extra in extras for text in extra]
    + pyproject["build-system"]["requires"]
):
    print(requirement)
EOF
"${pip[@]}" install --requirement "$work/requirements.txt"
"${pip[@]}" check
version="$("$work/venv/bin/python" -c 'import platform; print(platform.python_version())')"

{
  echo "# Exact versions of netattach's runtime, test and build dependencies and of pip: what"
  echo "# \`make venv\`, \`make image\` (deploy/image/build-inputs.sh) and CI install. Written by"
  echo "# \`make lock\` (scripts/lock-deps.sh) on Python $version; do not edit: change pyproject.toml,"
  echo "# then run \`make lock\` and \`make venv\`."
  "${pip[@]}" freeze --all
} >"$OUT.tmp"
mv -f "$OUT.tmp" "$OUT"
echo "lock-deps: wrote $OUT ($(grep -c '==' "$OUT") pins, Python $version)"
