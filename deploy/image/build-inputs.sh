#!/usr/bin/env bash
# Build what deploy/image/install.sh installs into the image, into OUT:
#   OUT/wheels/                  netattach and every dependency as wheels (from the index pip uses),
#                                each at the version constraints.txt pins (`make lock`)
#   OUT/netattach-shim           the static C shim (scripts/build-shim.sh native; needs gcc and
#                                libc6-dev)
#   OUT/netattach-shim.pyz       the zipapp shim
#   OUT/install.sh, packages.txt the install step and the Debian packages it expects
# PYTHON (default: the repository's .venv, else python3) builds the wheels and the zipapp; its
# pip must know --build-constraint (pip >= 25.3: the pinned one, as `make venv` installs it).
# Used by deploy/Dockerfile's build stage and by scripts/build-image.sh, so both images hold the
# same things. The wheels must match the image's python3 (Debian 12: CPython 3.11).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${1:?usage: build-inputs.sh OUT}"
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
export PYTHON

mkdir -p "$OUT"
"$PYTHON" -m pip wheel --quiet --disable-pip-version-check --constraint "$ROOT/constraints.txt" \
  --build-constraint "$ROOT/constraints.txt" --wheel-dir "$OUT/wheels" "$ROOT"
bash "$ROOT/scripts/build-shim.sh" native "$OUT/netattach-shim"
bash "$ROOT/scripts/build-shim.sh" zipapp "$OUT/netattach-shim.pyz"
cp "$ROOT/deploy/image/install.sh" "$ROOT/deploy/image/packages.txt" "$OUT/"
