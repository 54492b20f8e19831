"""Runtime requests of a selection reaching the real plugins: portMappings, bandwidth,
infiniband-guid, ipam-claim-reference, and a NAD whose config names its network differently.

What a plugin was given is read from its own stdin (tests/e2e/recorder_harness.py).
"""

from __future__ import annotations

import ipaddress
import re
import subprocess
from pathlib import Path

import pytest

from netattach.netns import links
from tests.e2e.harness import (
    DEFAULT_NETWORK,
    NOTHING,
    Cluster,
    Pod,
    assert_refused,
    bridge_list,
    host_local,
    net_a,
)
from tests.e2e.recorder_harness import (
    RECORDER,
    cache_record,
    install_recorder,
    pod_record,
    recorded,
    tee,
)

pytestmark = pytest.mark.netns


def grant_portmap(cluster: Cluster) -> None:
    """portmap opens the node's ports: a NAD gets it only when `types` lists it (SEC-NODE)."""
    policy = cluster.settings["delegatePolicy"]
    policy["types"] = [*policy["types"], "portmap"]


def in_node(cluster: Cluster, *argv: str) -> str:
    """stdout of `argv` run in the node namespace."""
    proc = subprocess.run(
        ["nsenter", f"--net={cluster.node.path}", "--", *argv],
        capture_output=True,
        check=False,
        timeout=10,
    )
    assert proc.returncode == 0, (argv, proc.stderr.decode(errors="replace"))
    return proc.stdout.decode()


INVALID_SELECTION = "[blue/web/uid-web] invalid network selection annotation of pod blue/web"


def refused_before_anything_ran(
    cluster: Cluster, pod: Pod, log: Path, msg: str, details: str | None = None
) -> None:
    """The pod's ADD is refused with 102, `msg` (and `details`), before any plugin ran."""
    reply = assert_refused(cluster.add(pod), msg)
    if details is not None:
        assert reply.out["details"] == details
    cluster.nothing_ran()
    assert recorded(log) == []


def add_capable_nad(
    cluster: Cluster, nad: str, plugin: str, capability: str, log: Path | None = None
) -> None:
    """The NAD blue/`nad`: bridge and host-local, then `plugin` declaring `capability`; its
    calls recorded to `log` (a tee in front of it) where given."""
    if log is not None:
        tee(cluster, plugin, log)
    chained = {"type": plugin, "capabilities": {capability: True}}
    cluster.add_nad(
        "blue", nad, bridge_list(None, host_local(cluster.ipam, "10.81.0.0/24"), chained)
    )


def attachment_ip(cluster: Cluster, pod: Pod, ifname: str) -> str:
    """The bare IPv4 address the status gives the pod's interface `ifname`."""
    status = cluster.written_status(pod.ns, pod.name)
    (entry,) = [e for e in status if e["interface"] == ifname]
    (address,) = entry["ips"]
    return str(ipaddress.ip_interface(address).ip)


def node_link_kinds(cluster: Cluster) -> dict[str, str]:
    return {name: s.kind for name, s in links.read_interfaces(cluster.node.path).items()}


# -- SEL-PORTMAP ------------------------------------------------------------------------------

MAPPING = {"hostPort": 18081, "containerPort": 80, "protocol": "TCP"}
# What the kubelet puts in the thin plugin's own config: for the default network only.
KUBELET_MAPPING = {"hostPort": 18082, "containerPort": 8080, "protocol": "tcp"}
PORTMAP_CHECK_BUG = "plugin portmap failed (check): could not check ipv6 dnat: "


def dnat_rules(cluster: Cluster, port: int) -> list[str]:
    rules = in_node(cluster, "iptables-save", "-t", "nat")
    return [
        line
        for line in rules.splitlines()
        if re.search(rf"--dport {port}\b", line) and "-j DNAT" in line
    ]


@pytest.mark.req("SEL-PORTMAP", "SEL-CAPS")
def test_port_mapping_reaches_portmap_and_the_node_firewall(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = tmp_path / "portmap.calls"
    grant_portmap(cluster)
    add_capable_nad(cluster, "net-p", "portmap", "portMappings", log)
    pod = cluster.pod("blue", "web", [{"name": "net-p", "portMappings": [MAPPING]}])
    # The kubelet's own portMappings; the default network has no portmap to carry them.
    config = cluster.config(runtimeConfig={"portMappings": [KUBELET_MAPPING]})

    reply = cluster.add(pod, config=config)
    assert reply.rc == 0, reply

    ip = attachment_ip(cluster, pod, "net1")
    dnat = dnat_rules(cluster, 18081)
    assert len(dnat) == 1, dnat
    assert re.search(rf"-p tcp .*-j DNAT --to-destination {re.escape(ip)}:80$", dnat[0]), dnat
    assert dnat_rules(cluster, 18082) == []  # the kubelet's mapping went nowhere
    assert "18082" not in in_node(cluster, "iptables-save", "-t", "nat")

    # portmap's stdin: exactly the annotation's mapping, protocol lower-cased (SEL-PORTMAP),
    # nothing of the kubelet's (SEL-CAPS); it is the only portmap call, on net1.
    (add,) = recorded(log, command="ADD")
    assert add["env"]["CNI_IFNAME"] == "net1"
    assert add["stdin"]["runtimeConfig"] == {
        "portMappings": [{"hostPort": 18081, "containerPort": 80, "protocol": "tcp"}]
    }
    assert add["stdin"]["name"] == "net-p"
    assert [c["env"]["CNI_IFNAME"] for c in recorded(log)] == ["net1"]
    wanted = {"portMappings": [{"hostPort": 18081, "containerPort": 80, "protocol": "tcp"}]}
    assert cache_record(cluster, "net-p", pod, "net1")["capabilityArgs"] == wanted
    attachments = pod_record(cluster, pod)["attachments"]
    assert [a["statusName"] for a in attachments] == [DEFAULT_NETWORK, "blue/net-p"]
    assert attachments[1]["capabilityArgs"] == wanted
    # The default network keeps the kubelet's args, which its bridge does not declare.
    assert attachments[0]["capabilityArgs"] == {"portMappings": [KUBELET_MAPPING]}

    # CHECK hands portmap the same mapping. Debian's portmap 1.1.1 then looks for IPv6 rules
    # it never made and fails (containernetworking/plugins#819, see tests/netns): only that.
    check = cluster.check(pod, config=config)
    if check.rc != 0:
        assert PORTMAP_CHECK_BUG in check.text, check
    (checked,) = recorded(log, command="CHECK")
    assert checked["stdin"]["runtimeConfig"] == wanted

    assert cluster.delete(pod).rc == 0
    # portmap's DEL had the same mapping to find its rules by, and they are gone.
    (delete,) = recorded(log, command="DEL")
    assert delete["env"]["CNI_IFNAME"] == "net1"
    assert delete["stdin"]["runtimeConfig"] == wanted
    assert dnat_rules(cluster, 18081) == []
    assert "18081" not in in_node(cluster, "iptables-save", "-t", "nat")
    assert ip not in in_node(cluster, "iptables-save", "-t", "nat")
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("SEL-PORTMAP")
def test_port_mapping_defaults_and_host_ip_reach_portmap(cluster: Cluster, tmp_path: Path) -> None:
    log = tmp_path / "portmap.calls"
    grant_portmap(cluster)
    add_capable_nad(cluster, "net-p", "portmap", "portMappings", log)
    mappings = [
        {"hostPort": 18083, "containerPort": 53, "protocol": "Udp", "hostIP": "10.99.0.1"},
        {"hostPort": 18084, "containerPort": 443},  # protocol defaults to TCP
        {"hostPort": 18085, "containerPort": 80, "hostIP": ""},  # "" is every host address
    ]
    pod = cluster.pod("blue", "web", [{"name": "net-p", "portMappings": mappings}])

    reply = cluster.add(pod)
    assert reply.rc == 0, reply

    (add,) = recorded(log, command="ADD")
    assert add["stdin"]["runtimeConfig"] == {
        "portMappings": [
            {"hostPort": 18083, "containerPort": 53, "protocol": "udp", "hostIP": "10.99.0.1"},
            {"hostPort": 18084, "containerPort": 443, "protocol": "tcp"},
            {"hostPort": 18085, "containerPort": 80, "protocol": "tcp"},
        ]
    }
    ip = re.escape(attachment_ip(cluster, pod, "net1"))
    (udp,) = dnat_rules(cluster, 18083)
    assert re.search(rf"-d 10\.99\.0\.1/32 -p udp .*-j DNAT --to-destination {ip}:53$", udp)
    (tcp,) = dnat_rules(cluster, 18084)
    assert re.search(rf"-p tcp .*-j DNAT --to-destination {ip}:443$", tcp), tcp
    assert " -d " not in tcp
    (every,) = dnat_rules(cluster, 18085)
    assert re.search(rf"-p tcp .*-j DNAT --to-destination {ip}:80$", every), every
    assert " -d " not in every

    assert cluster.delete(pod).rc == 0
    assert not re.search(r"\b1808[345]\b", in_node(cluster, "iptables-save", "-t", "nat"))
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("SEL-CAPS")
def test_kubelet_port_mappings_never_reach_a_selected_network(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A NAD whose portmap declares the capability, selected without portMappings: the
    kubelet's own mappings (for the default network) do not reach it."""
    log = tmp_path / "portmap.calls"
    grant_portmap(cluster)
    add_capable_nad(cluster, "net-p", "portmap", "portMappings", log)
    pod = cluster.pod("blue", "web", "net-p")
    config = cluster.config(runtimeConfig={"portMappings": [KUBELET_MAPPING]})

    reply = cluster.add(pod, config=config)
    assert reply.rc == 0, reply

    (add,) = recorded(log, command="ADD")
    assert add["env"]["CNI_IFNAME"] == "net1"
    assert "runtimeConfig" not in add["stdin"]
    assert cache_record(cluster, "net-p", pod, "net1")["capabilityArgs"] == {}
    assert "18082" not in in_node(cluster, "iptables-save", "-t", "nat")

    assert cluster.delete(pod, config=config).rc == 0
    (delete,) = recorded(log, command="DEL")
    assert "runtimeConfig" not in delete["stdin"]
    assert cluster.leftovers() == NOTHING


# -- SEL-BANDWIDTH -----------------------------------------------------------------------------

BANDWIDTH = {
    "ingressRate": 2_000_000,
    "ingressBurst": 400_000,
    "egressRate": 3_000_000,
    "egressBurst": 600_000,
}


def tbf(cluster: Cluster, dev: str) -> list[str]:
    out = in_node(cluster, "tc", "qdisc", "show", "dev", dev)
    return [line for line in out.splitlines() if line.startswith("qdisc tbf ")]


@pytest.mark.req("SEL-BANDWIDTH", "SEL-CAPS")
def test_bandwidth_request_shapes_the_host_veth_and_the_ifb(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = tmp_path / "bandwidth.calls"
    add_capable_nad(cluster, "net-b", "bandwidth", "bandwidth", log)
    pod = cluster.pod("blue", "web", [{"name": "net-b", "bandwidth": BANDWIDTH}])
    # The kubelet's own bandwidth request is the default network's, which cannot carry it.
    kubelet = {"ingressRate": 10_000_000, "ingressBurst": 1_000_000}
    config = cluster.config(runtimeConfig={"bandwidth": kubelet})

    reply = cluster.add(pod, config=config)
    assert reply.rc == 0, reply

    (add,) = recorded(log, command="ADD")
    assert add["env"]["CNI_IFNAME"] == "net1"
    assert add["stdin"]["runtimeConfig"] == {"bandwidth": BANDWIDTH}
    # bridge's result went to bandwidth; bandwidth appended its ifb device.
    result = cache_record(cluster, "net-b", pod, "net1")["result"]
    names = [i["name"] for i in result["interfaces"]]
    assert len(names) == 4, names
    _, host_veth, pod_side, ifb = names
    assert pod_side == "net1"
    kinds = node_link_kinds(cluster)
    assert kinds[host_veth] == "veth"
    assert [name for name, kind in kinds.items() if kind == "ifb"] == [ifb]

    # Ingress (towards the pod) is shaped on the host veth, egress on bandwidth's ifb; rates in
    # bits/s, bursts in bits (tc shows bytes).
    (ingress,) = tbf(cluster, host_veth)
    assert re.search(r" rate 2Mbit burst 50000b ", ingress), ingress
    (egress,) = tbf(cluster, ifb)
    assert re.search(r" rate 3Mbit burst 75000b ", egress), egress
    # Nothing else is shaped: not the default network's veth (the kubelet's 10Mbit).
    assert "10Mbit" not in in_node(cluster, "tc", "qdisc", "show")
    (default_veth,) = [v for v in cluster.host_veths() if v != host_veth]
    assert tbf(cluster, default_veth) == []

    # CHECK gives bandwidth the same request, which it compares with the qdiscs.
    check = cluster.check(pod, config=config)
    assert check.rc == 0, check
    (checked,) = recorded(log, command="CHECK")
    assert checked["stdin"]["runtimeConfig"] == {"bandwidth": BANDWIDTH}

    assert cluster.delete(pod).rc == 0
    (delete,) = recorded(log, command="DEL")
    assert delete["stdin"]["runtimeConfig"] == {"bandwidth": BANDWIDTH}
    assert "tbf" not in in_node(cluster, "tc", "qdisc", "show")
    assert [name for name, kind in node_link_kinds(cluster).items() if kind == "ifb"] == []
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("SEL-BANDWIDTH")
@pytest.mark.parametrize("direction", ["ingress", "egress"])
def test_burst_without_its_rate_is_refused_before_anything_runs(
    cluster: Cluster, tmp_path: Path, direction: str
) -> None:
    log = tmp_path / "bandwidth.calls"
    add_capable_nad(cluster, "net-b", "bandwidth", "bandwidth", log)
    other = "egress" if direction == "ingress" else "ingress"
    request = {f"{direction}Burst": 400_000, f"{other}Rate": 1_000_000, f"{other}Burst": 1000}
    pod = cluster.pod("blue", "web", [{"name": "net-b", "bandwidth": request}])

    refused_before_anything_ran(
        cluster,
        pod,
        log,
        INVALID_SELECTION,
        details=f"networks[0].bandwidth: '{direction}Burst' is given without '{direction}Rate'",
    )


@pytest.mark.req("SEL-BANDWIDTH", "RT-ADDFAIL", "RT-DEL")
@pytest.mark.parametrize(
    "request_",
    [
        pytest.param({"egressRate": 1_000_000}, id="rate-without-burst"),
        pytest.param({"ingressRate": 1_000_000, "ingressBurst": 0}, id="zero-burst"),
        pytest.param({"ingressRate": 0, "ingressBurst": 400_000}, id="zero-rate"),
        pytest.param({"ingressRate": 1_000_000, "ingressBurst": 2**35}, id="burst-over-4GB"),
    ],
)
def test_bandwidth_the_plugin_refuses_leaks_nothing(
    cluster: Cluster, request_: dict[str, int]
) -> None:
    add_capable_nad(cluster, "net-b", "bandwidth", "bandwidth")
    pod = cluster.pod("blue", "web", [{"name": "net-b", "bandwidth": request_}])

    reply = cluster.add(pod)

    # The bandwidth plugin refuses these on ADD *and* DEL, so an attachment it refused could
    # never be deleted: netattach refuses them first, before anything runs.
    assert reply.rc == 1
    assert reply.code == 102
    cluster.nothing_ran()
    assert cluster.leftovers() == NOTHING
    assert cluster.delete(pod).rc == 0


# -- SEL-IBGUID -------------------------------------------------------------------------------

GUID = "c2:11:22:33:44:55:66:77"


@pytest.mark.req("SEL-IBGUID", "SEL-CAPS")
def test_infiniband_guid_reaches_the_plugin_declaring_it(cluster: Cluster, tmp_path: Path) -> None:
    log = tmp_path / "probe.calls"
    install_recorder(cluster, RECORDER, log)
    probe = {"type": RECORDER, "capabilities": {"infinibandGUID": True}}
    cluster.add_nad(
        "blue", "net-i", bridge_list(None, host_local(cluster.ipam, "10.81.0.0/24"), probe)
    )
    pod = cluster.pod("blue", "web", [{"name": "net-i", "infiniband-guid": GUID}])

    reply = cluster.add(pod)
    assert reply.rc == 0, reply

    (add,) = recorded(log, command="ADD")
    assert add["env"]["CNI_IFNAME"] == "net1"
    assert add["stdin"]["runtimeConfig"] == {"infinibandGUID": GUID}
    assert [i["name"] for i in add["stdin"]["prevResult"]["interfaces"]][2] == "net1"
    assert cache_record(cluster, "net-i", pod, "net1")["capabilityArgs"] == {"infinibandGUID": GUID}
    status = cluster.written_status("blue", "web")
    assert [e["interface"] for e in status] == ["eth0", "net1"]

    assert cluster.delete(pod).rc == 0
    (delete,) = recorded(log, command="DEL")
    assert delete["stdin"]["runtimeConfig"] == {"infinibandGUID": GUID}
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("SEL-IBGUID", "SEL-CAPS")
def test_infiniband_guid_without_the_capability_is_refused(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = tmp_path / "probe.calls"
    install_recorder(cluster, RECORDER, log)
    cluster.add_nad(
        "blue",
        "net-i",
        bridge_list(None, host_local(cluster.ipam, "10.81.0.0/24"), {"type": RECORDER}),
    )
    pod = cluster.pod("blue", "web", [{"name": "net-i", "infiniband-guid": GUID}])

    refused_before_anything_ran(
        cluster,
        pod,
        log,
        "[blue/web/uid-web] network 'net-i' cannot carry the requested 'infinibandGUID': "
        "no plugin of its config list declares the capability (declared: none)",
    )


# -- SEL-CLAIM --------------------------------------------------------------------------------

CLAIM_KEY = "ipam-claim-reference"  # plan.py: args.cni["ipam-claim-reference"]


@pytest.mark.req("SEL-CLAIM")
def test_ipam_claim_reference_reaches_every_plugin_in_args_cni(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = tmp_path / "calls"
    # bridge and host-local (which bridge runs through CNI_PATH) are teed, the probe records.
    tee(cluster, "bridge", log)
    tee(cluster, "host-local", log)
    install_recorder(cluster, RECORDER, log)
    cluster.add_nad(
        "blue",
        "net-c",
        bridge_list(None, host_local(cluster.ipam, "10.81.0.0/24"), {"type": RECORDER}),
    )
    pod = cluster.pod("blue", "web", [{"name": "net-c", CLAIM_KEY: "claim-a"}])

    reply = cluster.add(pod)
    assert reply.rc == 0, reply

    adds = recorded(log, command="ADD", ifname="net1")
    assert [c["plugin"] for c in adds] == ["bridge", "host-local", RECORDER]
    for call in adds:
        assert call["stdin"]["args"] == {"cni": {CLAIM_KEY: "claim-a"}}, call
        assert "runtimeConfig" not in call["stdin"]
    # The default network's plugins get nothing of the selection.
    defaults = recorded(log, command="ADD", ifname="eth0")
    assert [c["plugin"] for c in defaults] == ["bridge", "host-local"]
    assert all("args" not in c["stdin"] for c in defaults)
    record = cache_record(cluster, "net-c", pod, "net1")
    assert record["capabilityArgs"] == {}
    for plugin in record["config"]["plugins"]:
        assert plugin["args"] == {"cni": {CLAIM_KEY: "claim-a"}}
    assert cluster.allocations() == sorted(
        [
            f"{DEFAULT_NETWORK}/{attachment_ip(cluster, pod, 'eth0')}",
            f"net-c/{attachment_ip(cluster, pod, 'net1')}",
        ]
    )

    assert cluster.delete(pod).rc == 0
    # DEL runs the recorded config: the plugins see the claim again, in reverse order.
    deletes = recorded(log, command="DEL", ifname="net1")
    assert [c["plugin"] for c in deletes] == [RECORDER, "bridge", "host-local"]
    assert all(c["stdin"]["args"] == {"cni": {CLAIM_KEY: "claim-a"}} for c in deletes)
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("SEL-CLAIM")
def test_ipam_claim_reference_with_ips_is_refused(cluster: Cluster, tmp_path: Path) -> None:
    log = tmp_path / "calls"
    install_recorder(cluster, RECORDER, log)
    cluster.add_nad(
        "blue",
        "net-c",
        bridge_list(None, {"type": "static"}, {"type": RECORDER}, capabilities={"ips": True}),
    )
    selection = {"name": "net-c", "ips": ["10.81.0.7/24"], CLAIM_KEY: "claim-a"}
    pod = cluster.pod("blue", "web", [selection])

    refused_before_anything_ran(
        cluster,
        pod,
        log,
        INVALID_SELECTION,
        details="networks[0]: 'ips' and 'ipam-claim-reference' cannot both be given",
    )


# -- NAD-NAMEWARN -----------------------------------------------------------------------------


@pytest.mark.req("NAD-NAMEWARN")
def test_config_named_unlike_its_nad_proceeds_with_a_warning(cluster: Cluster) -> None:
    cluster.add_nad(
        "blue", "net-a", bridge_list("other-name", host_local(cluster.ipam, "10.81.0.0/24"))
    )
    pod = cluster.pod("blue", "web", "net-a")

    reply = cluster.add(pod)
    assert reply.rc == 0, reply

    status = cluster.written_status("blue", "web")
    assert [(e["name"], e["interface"]) for e in status] == [
        (DEFAULT_NETWORK, "eth0"),
        ("blue/net-a", "net1"),
    ]
    # The config is used as written: host-local keeps its files under the config's name, and
    # the attachment is cached under it.
    ip = attachment_ip(cluster, pod, "net1")
    assert f"other-name/{ip}" in cluster.allocations()
    assert sorted(p.name for p in cluster.ipam.iterdir()) == [DEFAULT_NETWORK, "other-name"]
    assert f"other-name:{pod.container_id}:net1" in cluster.cache_records()
    warnings = [
        line
        for line in reply.stderr.splitlines()
        if "WARNING" in line and "blue/net-a" in line and "other-name" in line
    ]
    assert len(warnings) == 1, reply.stderr

    assert cluster.delete(pod).rc == 0
    assert cluster.leftovers() == NOTHING


@pytest.mark.req("RT-DEL", "KUBE-ARGS")
def test_cni_args_without_ignore_unknown_still_attach_and_detach(cluster: Cluster) -> None:
    """The reference plugins refuse CNI_ARGS keys they do not know (K8S_POD_*) unless
    `IgnoreUnknown` is set: netattach sets it for its delegates when the runtime did not."""
    net_a(cluster)
    pod = cluster.pod("blue", "web", "net-a")

    added = cluster.run("ADD", pod, ignore_unknown=False)
    assert added.rc == 0, added
    assert sorted(cluster.interfaces(pod.netns)) == ["eth0", "net1"]
    deleted = cluster.run("DEL", pod, ignore_unknown=False)
    assert (deleted.rc, deleted.out) == (0, None), deleted
    assert cluster.leftovers() == NOTHING
