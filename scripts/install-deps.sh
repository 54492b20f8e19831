#!/usr/bin/env bash
# scripts/install-deps.sh [demo|test]: install what netattach's demo (`make demo`), or the demo
# and the tests (`make venv`, `make test`: the default), need on a Debian machine, only what is
# missing.
# The demo's Debian packages: containernetworking-plugins (/usr/lib/cni), iproute2, nftables,
# util-linux (nsenter), iputils-ping, graphviz (`dot`, for `netattach graph`); python3-venv when
# the interpreter cannot make a virtualenv; gcc and libc6-dev for the static C shim (and
# tests/node's static `pause` program). The tests' too: containerd and runc for tests/node (a
# real runtime creating pod
# sandboxes; the tier starts its own containerd on its own socket: the package's service is not
# used); mmdebstrap and umoci for `make image` (the node image, built from Debian's packages with
# no container registry).
set -euo pipefail

what=${1:-test}
case "$what" in
  demo | test) ;;
  *)
    echo "usage: scripts/install-deps.sh [demo|test] (got '$what')" >&2
    exit 2
    ;;
esac
need=()
# A package only the tests (and `make image`) use: not installed for the demo.
test_need() {
  if [ "$what" = test ]; then need+=("$@"); fi
}
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nft >/dev/null 2>&1 || need+=(nftables)
command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
command -v ping >/dev/null 2>&1 || need+=(iputils-ping)
command -v dot >/dev/null 2>&1 || need+=(graphviz)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
# The native shim is a static C program: a compiler, and libc's static archive to link it with.
command -v cc >/dev/null 2>&1 || need+=(gcc)
printf 'int main(void) { return 0; }\n' | cc -static -x c -o /dev/null - >/dev/null 2>&1 || need+=(libc6-dev)
command -v containerd >/dev/null 2>&1 || test_need containerd
command -v runc >/dev/null 2>&1 || test_need runc
command -v mmdebstrap >/dev/null 2>&1 || test_need mmdebstrap
command -v umoci >/dev/null 2>&1 || test_need umoci
# tests/kube makes its control plane's CA and certificates with the openssl CLI.
command -v openssl >/dev/null 2>&1 || test_need openssl

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "netattach's $what needs these Debian packages: ${need[*]} (run as root to install them)" >&2
  exit 1
fi
echo "installing Debian packages: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
