# netattach: `make demo` runs the demo, `make test` runs every check. Both install what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
COMMA := ,
# The static C shim, built beside its source: the daemon installs it when --shim names none.
NATIVE_SHIM := src/netattach/shim/netattach-shim

.PHONY: deps venv test lint typecheck layers pytest demo bench-runtime bench bench-memory clean shim image k8s

deps:
	@scripts/install-deps.sh test

# The demo's packages only (no containerd, runc, mmdebstrap, umoci: those are the tests').
.PHONY: deps-demo
deps-demo:
	@scripts/install-deps.sh demo

# Every Python package at the version constraints.txt pins: pip first (the one that knows
# --build-constraint), then netattach with the extras $(1), built by the pinned setuptools.
CONSTRAINTS := constraints.txt
define install-extras
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --constraint $(CONSTRAINTS) --upgrade pip
	$(BIN)/python -m pip install --quiet --constraint $(CONSTRAINTS) \
		--build-constraint $(CONSTRAINTS) -e '.[$(1)]'
	@touch $@
endef

# The tests' and the demo's packages (`make venv`), or the demo's alone (`make demo`).
DEMO_STAMP := $(VENV)/.installed-demo
$(STAMP): pyproject.toml $(CONSTRAINTS)
	$(call install-extras,test$(COMMA)demo)
$(DEMO_STAMP): pyproject.toml $(CONSTRAINTS)
	$(call install-extras,demo)

# constraints.txt afresh: the newest releases pyproject.toml allows, resolved and frozen in a
# clean virtualenv of $(PYTHON) (scripts/lock-deps.sh); `make venv` then installs them.
.PHONY: lock
lock:
	@PYTHON=$(PYTHON) scripts/lock-deps.sh

$(NATIVE_SHIM): src/netattach/shim/netattach-shim.c scripts/build-shim.sh
	@scripts/build-shim.sh native $@

venv: deps $(STAMP) $(NATIVE_SHIM)

lint: venv
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: venv
	$(BIN)/mypy

layers: venv
	$(BIN)/lint-imports

# The real Kubernetes parts tests/kube runs on (kube-apiserver, etcd, ...), built from the Go
# module proxy; cached by version in build/k8s/ (docs/development.md).
k8s:
	@scripts/build-k8s.sh

pytest: venv k8s
	$(BIN)/python -m pytest --req-report $(PYTEST_ARGS)

# The reference CNI plugins at their current release (github.com/containernetworking/plugins from
# the Go module proxy; Debian's in /usr/lib/cni are 1.1.1), cached by version in build/cni-plugins/.
cni-plugins:
	@scripts/build-cni-plugins.sh

# The tests whose outcome is what the plugins do (the runtime's matrix at every CNI version, 1.1.0
# with STATUS and GC included; attach, CHECK, GC, capabilities, DEL, the node-safe refusals
# through the thin plugin) again with that release: NETATTACH_TEST_CNI_PATH names its directory.
# Why this subset: README.md (Tests).
CNI_CURRENT_TESTS := tests/netns/test_plugins.py tests/netns/test_chain_failures.py \
	tests/e2e/test_attach.py tests/e2e/test_gc_check.py tests/e2e/test_cni11_plugins.py \
	tests/e2e/test_runtime_requests.py tests/e2e/test_node_safe.py tests/e2e/test_teardown.py \
	tests/e2e/test_delegate_keys.py tests/e2e/test_node_values.py
pytest-cni-current: venv cni-plugins
	NETATTACH_TEST_CNI_PATH="$$(scripts/build-cni-plugins.sh dir)" \
		$(BIN)/python -m pytest -p no:cacheprovider $(CNI_CURRENT_TESTS)

test: lint typecheck layers pytest pytest-cni-current

demo: deps-demo $(DEMO_STAMP) $(NATIVE_SHIM)
	$(BIN)/netattach demo

.PHONY: cni-plugins pytest-cni-current bench-side-by-side bench-kubelet
.PHONY: bench-quick bench-breakdown bench-policy bench-policy-latency bench-policy-churn \
	bench-api-writes bench-ipam bench-burst bench-policy-scale

bench-runtime: venv
	$(BIN)/python -m bench.runtime_latency

# Every scenario in one run (root, ~10 min on 2 cores): floor, thick (directory and Kubernetes
# feeds), thin and NETATTACH_BENCH_PEER; then netattach beside Multus on a real API server (the
# control plane `make k8s` builds); prints a table, writes bench/results/<date>.json.
bench: venv shim k8s
	$(BIN)/python -m bench

# The same with tiny sizes (a smoke run, ~1.5 min).
bench-quick: venv k8s
	$(BIN)/python -m bench --quick

# netattach thick and thin beside Multus thin and thick (NETATTACH_BENCH_MULTUS) on a real API
# server, alone (root, ~3 min; docs/performance.md).
bench-side-by-side: venv shim k8s
	$(BIN)/python -m bench.side_by_side

# Pod start through the real kubelet (tests/node's node, deploy/'s DaemonSet from the node image):
# no netattach, default network only, default + 2 NADs (root, ~7 min; bench/README.md).
bench-kubelet: venv shim k8s
	$(BIN)/python -m bench.kubelet_pod_start

# Where thick mode's time goes: the daemon under timing probes, without fsync, and under strace.
bench-breakdown: venv shim
	@command -v strace >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends strace >/dev/null; }
	$(BIN)/python -m bench.breakdown

# Policy compile + render at scale (1,000 MultiNetworkPolicies over 500 pods; no root needed).
bench-policy: venv
	$(BIN)/python -m bench.policy_scale

# Policy under churn (root): 5,000 pods, 1,000 policies, 110 local pods with real nft; a stream of
# relabels, policy edits and pod churn; change -> enforced p50/p99, CPU, RSS, equality at the end.
bench-policy-churn: venv
	$(BIN)/python -m bench.policy_churn

# From a MultiNetworkPolicy change to its enforcement in the pod's netns, both feeds (root).
bench-policy-latency: venv
	$(BIN)/python -m bench.policy_latency

# A pod's status PATCH through httpx and through the daemon's lean writes (api_writes), after idle gaps.
bench-api-writes: venv
	$(BIN)/python -m bench.api_writes

# netattach's IPAM (root): ADD beside host-local on one node; 1,000 pods over 10 simulated nodes
# on the real API server (`make k8s`): total time, claims, API requests per allocation.
bench-ipam: venv shim k8s
	$(BIN)/python -m bench.ipam

# MultiNetworkPolicy at cluster scale on the real API server (`make k8s`): 10k Node objects, 150k
# pods, 1,000 policies, 30 pod changes/s; the policy controller and one node daemon in each mode.
bench-policy-scale: venv k8s
	$(BIN)/python -m bench.policy_span

# A burst of 50 pods x 3 networks to the daemon in a memory cgroup of deploy/'s limit (root):
# Debian's plugins, a heavy stand-in, and the heavy one without the admission by memory.
bench-burst: venv shim
	$(BIN)/python -m bench.burst

# The daemon's memory on the Kubernetes feed, idle and with 5,000 pods + 1,000 NADs cached (root).
bench-memory: venv
	$(BIN)/python -m bench.daemon_memory

# The shim in the forms nodes run: dist/netattach-shim (static C) and dist/netattach-shim.pyz.
shim: venv
	scripts/build-shim.sh native dist/netattach-shim
	PYTHON=$(BIN)/python scripts/build-shim.sh zipapp dist/netattach-shim.pyz

# The node image as an OCI archive, dist/netattach-image.tar, with no container registry: a Debian
# root filesystem (mmdebstrap) holding netattach and its shim, packed by umoci (root, ~1 min).
# Load it with `ctr -n k8s.io images import dist/netattach-image.tar` (docs/deploy.md).
image: venv
	PYTHON=$(BIN)/python scripts/build-image.sh dist/netattach-image.tar

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis $(NATIVE_SHIM)
