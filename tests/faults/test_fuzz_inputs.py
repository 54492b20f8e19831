"""Hypothesis against everything netattach reads from users: selection annotations, NAD configs,
settings files. Only the documented CNI errors may come out, never another exception.

    selection annotation   `attach.selection.parse_selections`: a selection, or 102
    a pod's whole plan     `pods.plan.build_plan` over fuzzed NADs (spec.config text) and a
                           fuzzed annotation, as an ADD runs it before any delegate: 7 (bad
                           config), 101 (NAD missing), 102 (bad selection or request)
    settings files         `settings.settings.load_settings` on fuzzed bytes, YAML and JSON: 5, 6, 7
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netattach.attach import selection
from netattach.cluster import model, store
from netattach.cni import errors
from netattach.pods import plan
from netattach.settings import network as network_mod
from netattach.settings import settings as settings_mod

POD_NS, POD = "blue", "web"
EXAMPLES = 300
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def raised(call: Callable[[], object]) -> errors.CNIError | None:
    """The CNI error `call` raised, None when it returned; any other exception propagates."""
    try:
        call()
    except errors.CNIError as exc:
        return exc
    return None


# -- strategies ------------------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=24)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=16,
)
names = st.sampled_from(["net-a", "net-b", "net-zz", "Net_A", "", "-a", "a" * 64, "a/b", "é"])
ifnames = st.sampled_from(["net1", "eth0", "", "a/b", "x" * 16, "é" * 8, ".", "..", "a b", "à"])
addresses = st.sampled_from(
    ["10.1.1.5", "10.1.1.5/24", "fd00::5/64", "10.0.0.300", "1.2.3.4/33", "::ffff:1.2.3.4", "x"]
)
macs = st.sampled_from(["02:00:00:00:00:01", "02-00-00-00-00-01", "0200.0000.0001", "02:00", ""])


def sometimes(plausible: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a plausible value, sometimes any JSON value at all."""
    return plausible | json_values


element_values: dict[str, st.SearchStrategy[Any]] = {
    "namespace": sometimes(st.sampled_from(["blue", "red", "", "Blue"])),
    "ips": sometimes(st.lists(addresses, max_size=3)),
    "mac": sometimes(macs),
    "interface": sometimes(ifnames),
    "interfaceRequest": sometimes(ifnames),
    "cni-args": sometimes(st.dictionaries(st.text(max_size=8), json_values, max_size=3)),
    "portMappings": sometimes(
        st.lists(
            st.fixed_dictionaries(
                {"hostPort": st.integers(-1, 70000), "containerPort": st.integers(-1, 70000)},
                optional={"protocol": st.sampled_from(["TCP", "udp", "sctp", "icmp"])},
            ),
            max_size=2,
        )
    ),
    "bandwidth": sometimes(
        st.dictionaries(
            st.sampled_from(["ingressRate", "ingressBurst", "egressRate", "egressBurst", "x"]),
            st.integers(-1, 2**40),
            max_size=4,
        )
    ),
    "default-route": sometimes(st.lists(addresses, max_size=3)),
    "infiniband-guid": sometimes(st.sampled_from(["00:11:22:33:44:55:66:77", "00:11"])),
    "ipam-claim-reference": sometimes(st.sampled_from(["claim-1", "Claim", "a.b", ""])),
    "org.example.key": json_values,
    "colour": json_values,
}
# Mostly valid selections (so that NAD resolution and the delegate config are reached too),
# then any keys with any values.
good_elements = st.fixed_dictionaries(
    {"name": st.sampled_from(["net-a", "net-b"])},
    optional={
        "interface": st.sampled_from(["net5", "eth1", "net1"]),
        "ips": st.lists(st.sampled_from(["10.1.1.5", "fd00::5/64"]), min_size=1, max_size=2),
        "mac": st.just("02:00:00:00:00:01"),
        "cni-args": st.dictionaries(st.text(max_size=8), json_values, max_size=3),
        "portMappings": st.just([{"hostPort": 8080, "containerPort": 80}]),
        "bandwidth": st.just({"ingressRate": 1000, "ingressBurst": 2000}),
    },
)
elements = (
    good_elements
    | st.fixed_dictionaries({"name": sometimes(names)}, optional=element_values)
    | json_values
)
annotation_texts = (
    st.lists(good_elements, min_size=1, max_size=3).map(json.dumps)
    | st.lists(st.sampled_from(["net-a", "net-b", "blue/net-a", "net-b@eth1"]), min_size=1).map(
        ",".join
    )
    | st.lists(elements, max_size=5).map(json.dumps)
    | st.lists(
        st.tuples(
            st.sampled_from(["", "blue/", "red/", "a/b/"]),
            names,
            st.sampled_from(["", "@net5", "@a/b", "@"]),
        ).map("".join),
        max_size=5,
    ).map(", ".join)
    | st.text(max_size=200)
)

plugin_types = st.sampled_from(
    ["bridge", "macvlan", "../x", "/bin/sh", "a\0b", "", "..", "na\\x", "host-local"]
)
plugins = st.fixed_dictionaries(
    {"type": sometimes(plugin_types)},
    optional={
        "capabilities": sometimes(
            st.dictionaries(
                st.sampled_from(["ips", "mac", "portMappings", "bandwidth"]), st.booleans()
            )
        ),
        "args": sometimes(st.fixed_dictionaries({}, optional={"cni": json_values})),
        "ipam": json_values,
    },
)
nad_configs = st.fixed_dictionaries(
    {},
    optional={
        "cniVersion": sometimes(st.sampled_from(["0.3.1", "0.4.0", "1.0.0", "1.1.0", "9.9.9"])),
        "cniVersions": json_values,
        "name": sometimes(names),
        "type": sometimes(plugin_types),
        "plugins": sometimes(st.lists(plugins, max_size=3)),
        "capabilities": json_values,
        "disableCheck": json_values,
    },
)
good_plugins = st.fixed_dictionaries(
    {"type": st.sampled_from(["bridge", "macvlan", "tuning"])},
    optional={
        "capabilities": st.dictionaries(
            st.sampled_from(["ips", "mac", "portMappings", "bandwidth"]), st.booleans()
        ),
        "args": st.fixed_dictionaries({}, optional={"cni": json_values}),
    },
)
good_configs = st.fixed_dictionaries(
    {"cniVersion": st.sampled_from(["0.3.1", "0.4.0", "1.0.0"])},
    optional={"name": st.sampled_from(["net-a", "other"])},
).flatmap(
    lambda head: st.one_of(
        good_plugins.map(lambda plugin: {**head, **plugin}),
        st.lists(good_plugins, min_size=1, max_size=3).map(lambda ps: {**head, "plugins": ps}),
    )
)
spec_configs = (
    good_configs.map(json.dumps) | nad_configs.map(json.dumps) | st.text(max_size=100) | st.none()
)


# -- a pod's plan ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def networks_dir() -> Iterator[Path]:
    """A networks directory holding the default network (and a same-named fuzzed file or two are
    written beside it by no one: NADs without spec.config look here and find nothing)."""
    with tempfile.TemporaryDirectory(prefix="na-fuzz-") as directory:
        path = Path(directory)
        default = {"cniVersion": "1.0.0", "name": "cluster-default", "type": "bridge"}
        (path / "00-default.conf").write_text(json.dumps(default))
        yield path


def network_settings(networks_dir: Path) -> network_mod.NetworkSettings:
    raw = {
        "clusterNetwork": "cluster-default",
        "networksDir": str(networks_dir),
        "globalNamespaces": ["red"],
        "feed": {"directory": "/nonexistent/na-fuzz"},
    }
    return settings_mod.parse_settings(raw, source="fuzz").networks


def view_of(configs: dict[str, str | None]) -> store.ClusterStore:
    view = store.ClusterStore()
    for name, config in configs.items():
        nad: dict[str, Any] = {
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": model.NAD,
            "metadata": {"name": name, "namespace": POD_NS},
        }
        if config is not None:
            nad["spec"] = {"config": config}
        view.upsert(nad)  # type: ignore[arg-type]
    return view


PLAN_CODES = {7, 101, 102}


@pytest.mark.req("SEL-LIMITS", "NAD-BADCONF", "SEL-INVALID")
@FUZZ
@given(annotation=annotation_texts, net_a=spec_configs, net_b=spec_configs)
def test_a_fuzzed_pod_and_nads_plan_or_fail_with_a_documented_code(
    networks_dir: Path, annotation: str, net_a: str | None, net_b: str | None
) -> None:
    pod: Any = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": POD,
            "namespace": POD_NS,
            "uid": "u-1",
            "annotations": {model.NETWORKS_ANNOTATION: annotation},
        },
    }
    planned: list[plan.PlannedAttachment] = []

    def build() -> None:
        planned.extend(
            plan.build_plan(
                pod=pod,
                default_ifname="eth0",
                runtime_config={},
                view=view_of({"net-a": net_a, "net-b": net_b}),
                cfg=network_settings(networks_dir),
            )
        )

    failure = raised(build)
    if failure is not None:
        assert failure.code in PLAN_CODES, failure
        # the code's error type, or a narrower one (a NAD not found: a 101 that names it)
        assert isinstance(failure, errors.BY_CODE[failure.code]), failure
        assert failure.msg, failure
        return
    assert planned[0].is_default
    ifnames = [p.ifname for p in planned]
    assert all(name for name in ifnames)


@pytest.mark.req("SEL-LIMITS", "SEL-INVALID")
@FUZZ
@given(annotation=annotation_texts)
def test_a_fuzzed_annotation_is_selections_or_102_naming_the_pod(annotation: str) -> None:
    found: list[selection.Selection] = []

    def parse() -> None:
        found.extend(selection.parse_selections(annotation, pod_namespace=POD_NS, pod=POD))

    failure = raised(parse)
    if failure is not None:
        assert isinstance(failure, errors.InvalidSelectionError), failure
        assert failure.code == 102
        assert failure.msg == f"invalid network selection annotation of pod {POD_NS}/{POD}"
        assert failure.details
        return
    assert all(isinstance(s, selection.Selection) for s in found)


# -- settings files --------------------------------------------------------------------------------

settings_values: dict[str, st.SearchStrategy[Any]] = {
    "clusterNetwork": sometimes(st.sampled_from(["cluster-default", "kube/net", "/etc/x.conf"])),
    "networksDir": sometimes(st.sampled_from(["/etc/cni/net.d", "relative", "/a\0b"])),
    "binDirs": sometimes(st.lists(st.sampled_from(["/opt/cni/bin", "bin", ""]), max_size=2)),
    "stateDir": sometimes(st.sampled_from(["/var/lib/netattach", "x"])),
    "delegateTimeout": sometimes(st.floats(allow_nan=True) | st.integers()),
    "feed": sometimes(
        st.sampled_from([{"directory": "/srv"}, {"kubernetes": {"kubeconfig": "/k"}}, {}])
    ),
    "nodeName": sometimes(st.sampled_from(["node-1", "Node_1", ""])),
    "daemonSocket": sometimes(st.sampled_from(["/run/x.sock", "/" + "s" * 200])),
    "maxConcurrentDelegates": sometimes(st.integers(-5, 5000)),
    "readiness": sometimes(
        st.fixed_dictionaries({}, optional={"mode": json_values, "timeout": json_values})
    ),
    "metrics": sometimes(
        st.fixed_dictionaries({}, optional={"address": json_values, "enabled": json_values})
    ),
    "logLevel": sometimes(st.sampled_from(["info", "verbose"])),
    "unknownKey": json_values,
}
settings_documents = st.fixed_dictionaries({}, optional=settings_values) | json_values


def yaml_text(value: Any) -> bytes:
    return yaml.safe_dump(value, allow_unicode=True).encode()


settings_files = (
    settings_documents.map(yaml_text)
    | settings_documents.map(lambda value: json.dumps(value).encode())
    | st.binary(max_size=300)
    | st.text(max_size=300).map(lambda text: text.encode("utf-8", "surrogatepass"))
    | st.sampled_from(
        [
            b"[" * 100_000,
            b"a: &a [*a]",
            b"--- 1\n--- 2\n",
            b"\xff\xfe",
            b"!!python/object:os.system x",
        ]
    )
)
SETTINGS_CODES = {5, 6, 7}


@FUZZ
@given(data=settings_files)
def test_a_fuzzed_settings_file_loads_or_fails_with_5_6_or_7_naming_the_file(data: bytes) -> None:
    with tempfile.NamedTemporaryFile(prefix="na-fuzz-", suffix=".yaml") as stream:
        stream.write(data)
        stream.flush()
        failure = raised(lambda: settings_mod.load_settings(Path(stream.name)))
    if failure is not None:
        assert failure.code in SETTINGS_CODES, failure
        assert type(failure) is errors.BY_CODE[failure.code], failure
        assert stream.name in failure.msg, failure
