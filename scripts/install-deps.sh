#!/usr/bin/env bash
# Install what netattach's demo and tests need on a Debian machine, only what is missing.
# Debian packages: containernetworking-plugins (/usr/lib/cni), iproute2, nftables, util-linux
# (nsenter), iputils-ping; python3-venv when the interpreter cannot make a virtualenv.
set -euo pipefail

need=()
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nft >/dev/null 2>&1 || need+=(nftables)
command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
command -v ping >/dev/null 2>&1 || need+=(iputils-ping)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)

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
