#!/usr/bin/env bash
# Install what netattach's demo and tests need on a Debian machine, only what is missing.
# Debian packages: containernetworking-plugins (/usr/lib/cni), iproute2, nftables, util-linux
# (nsenter), iputils-ping, graphviz (`dot`, for `netattach graph`); python3-venv when the
# interpreter cannot make a virtualenv; gcc and python3-dev for the shim's Nuitka build;
# containerd and runc for tests/node (a real runtime creating pod sandboxes; the tier starts its
# own containerd on its own socket: the package's service is not used) and libc6-dev for its
# static `pause` program; mmdebstrap and umoci for `make image` (the node image, built from Debian's
# packages with no container registry).
set -euo pipefail

need=()
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nft >/dev/null 2>&1 || need+=(nftables)
command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
command -v ping >/dev/null 2>&1 || need+=(iputils-ping)
command -v dot >/dev/null 2>&1 || need+=(graphviz)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
# The shim's self-contained build (Nuitka, `make shim`, its tests) compiles C against Python.h.
command -v gcc >/dev/null 2>&1 || need+=(gcc)
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || [ -e /usr/lib/aarch64-linux-gnu/libc.a ] || need+=(libc6-dev)
command -v containerd >/dev/null 2>&1 || need+=(containerd)
command -v runc >/dev/null 2>&1 || need+=(runc)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
command -v umoci >/dev/null 2>&1 || need+=(umoci)
python3 -c 'import os, sysconfig; raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_path("include"), "Python.h")))' \
  >/dev/null 2>&1 || need+=(python3-dev)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "netattach needs these Debian packages: ${need[*]} (run as root to install them)" >&2
  exit 1
fi
echo "installing Debian packages: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
