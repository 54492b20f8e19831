#!/bin/sh
# Install netattach into the image's root filesystem, from what build-inputs.sh made (BUILD, a
# directory holding wheels/, netattach-shim and netattach-shim.pyz). Runs as root inside
# that filesystem: a `RUN` of deploy/Dockerfile, or a chroot hook of scripts/build-image.sh
# (mmdebstrap). The Debian packages of packages.txt are installed before. No network is used.
#
#   /opt/netattach                          a venv holding netattach and its dependencies
#   /usr/local/bin/netattach{,-thin}        its commands
#   /usr/local/lib/netattach/netattach-shim the static C shim the DaemonSet installs
#   /usr/local/lib/netattach/netattach-shim.pyz  the zipapp shim, for hosts with python3
set -eu
BUILD="${1:?usage: install.sh BUILD_DIR}"

python3 -m venv /opt/netattach
/opt/netattach/bin/pip install --quiet --no-index --no-cache-dir --no-compile \
  --find-links "$BUILD/wheels" netattach
/opt/netattach/bin/python -m compileall -q /opt/netattach/lib >/dev/null
for command in netattach netattach-thin; do
  ln -sf "/opt/netattach/bin/$command" "/usr/local/bin/$command"
done
mkdir -p /usr/local/lib/netattach
rm -rf /usr/local/lib/netattach/netattach-shim
cp "$BUILD/netattach-shim" /usr/local/lib/netattach/netattach-shim
cp "$BUILD/netattach-shim.pyz" /usr/local/lib/netattach/netattach-shim.pyz
# what only the installation needed
/opt/netattach/bin/pip uninstall --quiet --yes pip >/dev/null 2>&1 || true
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
