#!/usr/bin/env bash
# `make image`: the netattach node image as an OCI archive, built with no container registry.
#
#   build-image.sh [OUT]     OUT defaults to dist/netattach-image.tar
#
# 1. deploy/image/build-inputs.sh: netattach's wheels and the shim, built here
# 2. mmdebstrap: a Debian 12 root filesystem (minbase + deploy/image/packages.txt) from Debian's
#    mirror, into which deploy/image/install.sh installs step 1's products (a chroot hook)
# 3. umoci: an OCI image layout with that filesystem as its one layer, the DaemonSet's command as
#    its default, and the image's name (IMAGE, default: the one deploy/daemonset.yaml uses) in the
#    `io.containerd.image.name` and `org.opencontainers.image.ref.name` annotations
# 4. the layout as a tar archive: `ctr -n k8s.io images import OUT` loads it on a containerd
#    node, `podman load -i OUT` or `skopeo copy oci-archive:OUT docker://REGISTRY/...` elsewhere
#
# deploy/Dockerfile runs the same two deploy/image scripts for users with a registry.
# Needs root (mmdebstrap's chroot hook, umoci keeping file owners), mmdebstrap and umoci (both
# Debian packages, installed by scripts/install-deps.sh) and network access to Debian's mirror
# (MIRROR, default: mmdebstrap's) and to the Python package index pip uses.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${1:-$ROOT/dist/netattach-image.tar}"
IMAGE="${IMAGE:-$(sed -n 's/^ *image: *//p' "$ROOT/deploy/daemonset.yaml" | head -n1)}"
SUITE=bookworm
TAG="${IMAGE##*:}"

for tool in mmdebstrap umoci; do
  command -v "$tool" >/dev/null || { echo "build-image: $tool is not installed" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "build-image: run as root" >&2; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/na-image-XXXXXX")"
trap 'rm -rf "$work"' EXIT

echo "build-image: netattach's wheels and shim"
"$ROOT/deploy/image/build-inputs.sh" "$work/inputs"

echo "build-image: a Debian $SUITE root filesystem (mmdebstrap)"
packages="$(grep -v '^#' "$ROOT/deploy/image/packages.txt" | paste -sd, -)"
# shellcheck disable=SC2016  # $1 is mmdebstrap's: the root filesystem being built
mmdebstrap --quiet --variant=minbase --include="$packages" \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --customize-hook="copy-in $work/inputs /tmp" \
  --customize-hook='chroot "$1" sh /tmp/inputs/install.sh /tmp/inputs' \
  --customize-hook='rm -rf "$1/tmp/inputs"' \
  "$SUITE" "$work/rootfs" ${MIRROR:+"$MIRROR"}

echo "build-image: the OCI image $IMAGE (umoci)"
layout="$work/layout"
umoci init --layout "$layout"
umoci new --image "$layout:$TAG"
umoci insert --image "$layout:$TAG" "$work/rootfs" /
umoci config --image "$layout:$TAG" \
  --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --config.cmd netattach --config.cmd daemon --config.cmd --config \
  --config.cmd /etc/netattach/settings.yaml \
  --author netattach --history.comment "scripts/build-image.sh"
umoci gc --layout "$layout"
python3 - "$layout/index.json" "$IMAGE" <<'PY'
import json, sys
path, image = sys.argv[1], sys.argv[2]
index = json.load(open(path))
for manifest in index["manifests"]:
    manifest.setdefault("annotations", {})["io.containerd.image.name"] = image
json.dump(index, open(path, "w"))
PY

mkdir -p "$(dirname "$OUT")"
tar -C "$layout" -cf "$OUT.tmp" .
mv "$OUT.tmp" "$OUT"
echo "build-image: built $OUT ($IMAGE, $(du -h "$OUT" | cut -f1))"
