"""The daemon's policy sync on real pod namespaces: tables read back with real `nft`.

The pods here are records and netns only (no interfaces needed: rules name interfaces, and
nft accepts names of links that do not exist). Traffic through the whole daemon is proven in
tests/e2e/test_policy_traffic.py; this tier pins down the convergence decisions themselves.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from netattach.attach import status
from netattach.cluster import model, store
from netattach.daemon import policy_sync
from netattach.pods import records
from netattach.policy import apply, groups
from netattach.policy.model import parse_policy
from tests import builders

pytestmark = pytest.mark.netns


def pod(ns: str, name: str, labels: dict[str, str] | None = None) -> model.KubeObject:
    return builders.pod(name=name, namespace=ns, uid=f"uid-{name}", labels=labels or {})


def policy(
    name: str, spec: dict[str, Any], *, ns: str = "ns1", networks: str = "blue"
) -> model.KubeObject:
    return builders.policy(name, spec, namespace=ns, policy_for=networks, typed=True)


def record(
    container_id: str, netns: str, p: model.KubeObject, ips: dict[str, str]
) -> records.PodRecord:
    """A completed ADD: eth0 on the default network, then net1, net2... per `ips` entry."""

    def attachment(name: str, ifname: str, ip: str, default: bool) -> records.AttachmentRecord:
        return records.AttachmentRecord(
            status_name=name,
            ifname=ifname,
            is_default=default,
            config={"cniVersion": "1.0.0", "name": name.replace("/", "-"), "plugins": []},
            capability_args={},
            result={
                "cniVersion": "1.0.0",
                "interfaces": [{"name": ifname, "sandbox": netns}],
                "ips": [{"address": ip, "interface": 0}],
            },
        )

    atts = [attachment("default-net", "eth0", "10.90.0.9/24", True)]
    for i, (net, ip) in enumerate(ips.items(), start=1):
        atts.append(attachment(net, f"net{i}", ip, False))
    return records.PodRecord(
        container_id=container_id,
        netns=netns,
        namespace=model.namespace_of(p),
        pod=model.name_of(p),
        uid=model.uid_of(p),
        attachments=tuple(atts),
        complete=True,
    )


class Node:
    def __init__(self, state: Path, make_pod: Callable[[], str]) -> None:
        self.view = store.ClusterStore()
        self.view.upsert(
            model.KubeObject(apiVersion="v1", kind="Namespace", metadata={"name": "ns1"})
        )
        self.view.mark_synced()
        self.records = records.PodRecords(state)
        self.make_pod = make_pod
        self.sync = self.new_sync()

    def new_sync(self) -> policy_sync.PolicySync:
        return policy_sync.PolicySync(
            view=self.view, records=self.records, status_entries=status.status_entries
        )

    def add(self, p: model.KubeObject, ips: dict[str, str]) -> records.PodRecord:
        self.view.upsert(p)
        rec = record(f"ctr-{model.namespace_of(p)}-{model.name_of(p)}", self.make_pod(), p, ips)
        self.records.save(rec)
        return rec

    def table(self, rec: records.PodRecord) -> str | None:
        return asyncio.run(apply.read_table(rec.netns))

    def converge(self) -> None:
        asyncio.run(self.sync.converge())


@pytest.fixture
def node(tmp_path: Path, make_pod: Callable[[], str]) -> Node:
    return Node(tmp_path / "state", make_pod)


BLUE = "ns1/blue"
RED = "ns1/red"


@pytest.mark.req("POL-SELECT", "POL-TAG")
def test_only_selected_pods_on_governed_networks_get_a_table(node: Node) -> None:
    web = node.add(pod("ns1", "web", {"app": "web"}), {BLUE: "10.91.0.2/24", RED: "10.92.0.2/24"})
    db = node.add(pod("ns1", "db", {"app": "db"}), {BLUE: "10.91.0.3/24"})
    node.view.upsert(
        policy(
            "deny-web", {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress"]}
        )
    )
    node.converge()
    text = node.table(web)
    assert text is not None
    assert '"net1"' in text
    assert '"net2"' not in text
    assert '"eth0"' not in text
    assert "uid-deny-web" in text
    assert node.table(db) is None
    state = node.sync.state(web.container_id)
    assert state == {
        "applied": True,
        "interfaces": ["net1"],
        "policies": ["ns1/deny-web"],
        "error": None,
    }
    assert node.sync.state(db.container_id) == {
        "applied": False,
        "interfaces": [],
        "policies": [],
        "error": None,
    }


@pytest.mark.req("POL-UPDATE", "POL-PEERS")
def test_peers_policy_changes_and_deletion_converge(node: Node) -> None:
    web = node.add(pod("ns1", "web", {"app": "web"}), {BLUE: "10.91.0.2/24"})
    node.add(pod("ns1", "client", {"role": "client"}), {BLUE: "10.91.0.7/24"})
    allow = policy(
        "allow-clients",
        {
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}],
        },
    )
    node.view.upsert(allow)
    node.converge()
    first = node.table(web)
    assert first is not None
    assert "10.91.0.7" in first

    # a new peer joins: its address is added
    node.add(pod("ns1", "client2", {"role": "client"}), {BLUE: "10.91.0.8/24"})
    node.converge()
    second = node.table(web)
    assert second is not None
    assert "10.91.0.8" in second

    # the first client is relabelled: it drops out
    node.view.upsert(pod("ns1", "client", {"role": "other"}))
    node.converge()
    third = node.table(web)
    assert third is not None
    assert "10.91.0.7" not in third
    assert "10.91.0.8" in third

    # the policy goes: so does the table
    node.view.remove("MultiNetworkPolicy", "ns1", "allow-clients")
    node.converge()
    assert node.table(web) is None


@pytest.mark.req("POL-UPDATE", "POL-TAG")
def test_start_up_reconcile_removes_a_stale_table_and_applies_a_missing_one(node: Node) -> None:
    stale = node.add(pod("ns1", "stale", {"app": "web"}), {BLUE: "10.91.0.2/24"})
    missing = node.add(pod("ns1", "missing", {"app": "db"}), {BLUE: "10.91.0.3/24"})
    node.view.upsert(
        policy(
            "deny-web", {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress"]}
        )
    )
    node.converge()
    assert node.table(stale) is not None
    # While "the daemon was down": the policy changed to select the other pod.
    node.view.upsert(
        policy(
            "deny-web", {"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress"]}
        )
    )
    restarted = node.new_sync()
    asyncio.run(restarted.reconcile())
    assert node.table(stale) is None
    text = node.table(missing)
    assert text is not None
    assert 'comment "isolated by uid-deny-web"' in text


@pytest.mark.req("POL-CRD")
def test_an_invalid_policy_is_reported_and_the_others_still_apply(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    web = node.add(pod("ns1", "web", {"app": "web"}), {BLUE: "10.91.0.2/24"})
    node.view.upsert(
        policy(
            "broken",
            {
                "podSelector": {},
                "ingress": [{"ports": [{"protocol": "TCP", "port": 90, "endPort": 80}]}],
            },
        )
    )
    node.view.upsert(policy("good", {"podSelector": {}, "policyTypes": ["Ingress"]}))
    with caplog.at_level("WARNING", logger="netattach.policy"):
        node.converge()
        node.converge()  # the same invalid content is reported once
    reports = [
        r.getMessage()
        for r in caplog.records
        if "ns1/broken" in r.getMessage() and r.levelname == "WARNING"
    ]
    assert len(reports) == 1
    assert "endPort" in reports[0]
    assert "90" in reports[0]
    text = node.table(web)
    assert text is not None
    assert "uid-good" in text
    assert "uid-broken" not in text


@pytest.mark.req("POL-SELECT")
def test_a_pod_of_another_namespace_or_a_namesake_is_not_governed(node: Node) -> None:
    node.view.upsert(model.KubeObject(apiVersion="v1", kind="Namespace", metadata={"name": "ns2"}))
    other = node.add(pod("ns2", "web", {"app": "web"}), {"ns2/blue": "10.91.1.2/24"})
    namesake = node.add(pod("ns1", "web", {"app": "web"}), {BLUE: "10.91.0.2/24"})
    # the view now holds a recreated ns1/web with another UID: the record is not that pod's
    recreated = pod("ns1", "web", {"app": "web"})
    recreated["metadata"]["uid"] = "uid-web-2"
    node.view.upsert(recreated)
    node.view.upsert(policy("deny", {"podSelector": {}, "policyTypes": ["Ingress"]}))
    node.converge()
    assert node.table(other) is None
    assert node.table(namesake) is None
    assert node.sync.state(other.container_id) == {
        "applied": False,
        "interfaces": [],
        "policies": [],
        "error": None,
    }
    assert node.sync.state(namesake.container_id) is None  # not a pod of the view


@pytest.mark.req("POL-UPDATE")
def test_a_policy_updated_into_an_invalid_one_stays_in_force_as_it_was(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    web = node.add(pod("ns1", "web", {"app": "web"}), {BLUE: "10.91.0.2/24"})
    valid = policy("deny", {"podSelector": {}, "policyTypes": ["Ingress"]})
    valid["metadata"]["resourceVersion"] = "1"
    node.view.upsert(valid)
    node.converge()
    before = node.table(web)
    assert before is not None

    broken = policy("deny", {"podSelector": {}, "policyTypes": ["Sideways"]})
    broken["metadata"]["resourceVersion"] = "2"
    node.view.upsert(broken)
    with caplog.at_level("WARNING", logger="netattach.policy"):
        node.converge()
    assert node.table(web) == before
    (report,) = [
        r.getMessage()
        for r in caplog.records
        if "ns1/deny" in r.getMessage() and r.levelname == "WARNING"
    ]
    assert "'Sideways'" in report
    assert report.endswith("its last valid version stays in force")
    assert node.sync.state(web.container_id) == {
        "applied": True,
        "interfaces": ["net1"],
        "policies": ["ns1/deny"],
        "error": None,
    }

    node.view.remove("MultiNetworkPolicy", "ns1", "deny")
    node.converge()
    assert node.table(web) is None
    # recreated invalid (no valid version since): skipped, nothing enforced
    node.view.upsert(broken)
    node.converge()
    assert node.table(web) is None


@pytest.mark.req("POL-UPDATE")
def test_a_relist_reads_every_policy_again(node: Node) -> None:
    """Policies are read again one by one as they change; a relist (the store replaced whole,
    no change of any one of them told) reads every one: a policy gone in it goes."""
    web = node.add(pod("ns1", "web", {"app": "web"}), {BLUE: "10.91.0.2/24"})
    node.view.upsert(policy("deny", {"podSelector": {}, "policyTypes": ["Ingress"]}))
    node.view.upsert(
        policy(
            "other", {"podSelector": {"matchLabels": {"app": "none"}}, "policyTypes": ["Ingress"]}
        )
    )
    node.converge()
    assert node.table(web) is not None
    kept = [*node.view.objects("Namespace"), *node.view.objects("Pod")]
    node.view.replace_all([*kept, policy("other", {"podSelector": {}, "policyTypes": ["Egress"]})])
    node.converge()
    text = node.table(web)
    assert text is not None
    assert "uid-deny" not in text  # gone with the relist
    assert "uid-other" in text  # changed in it: it selects web now
    assert node.sync.state(web.container_id) == {
        "applied": True,
        "interfaces": ["net1"],
        "policies": ["ns1/other"],
        "error": None,
    }


@pytest.mark.req("POL-UPDATE")
def test_a_set_changed_behind_our_back_is_written_whole_when_its_update_fails(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    """Peers coming and going are written in place, as netlink element changes; one the
    kernel refuses (the set no longer holds what we wrote) rewrites the table whole."""
    web = node.add(pod("ns1", "web", {"app": "web"}), {BLUE: "10.91.0.2/24"})
    node.add(pod("ns1", "client", {"role": "client"}), {BLUE: "10.91.0.7/24"})
    node.view.upsert(
        policy(
            "allow-clients",
            {
                "podSelector": {"matchLabels": {"app": "web"}},
                "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}],
            },
        )
    )
    node.converge()
    text = node.table(web)
    assert text is not None
    (set_name,) = {line.split()[1] for line in text.splitlines() if line.strip().startswith("set ")}
    # someone else deletes the element we hold there
    nft = ["nsenter", f"--net={web.netns}", "--", "nft"]
    done = subprocess.run(
        [*nft, "delete", "element", "inet", "netattach", set_name, "{ 10.91.0.7 }"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # the client leaves: deleting its element fails, and the table is written again
    node.view.upsert(pod("ns1", "client", {"role": "other"}))
    node.add(pod("ns1", "client2", {"role": "client"}), {BLUE: "10.91.0.8/24"})
    with caplog.at_level("WARNING", logger="netattach.policy"):
        node.converge()
    (warning,) = [r.getMessage() for r in caplog.records if "in-place" in r.getMessage()]
    assert f"delete element in set {set_name}: No such file or directory" in warning
    after = node.table(web)
    assert after is not None
    assert "10.91.0.7" not in after
    assert "10.91.0.8" in after
    assert node.sync.state(web.container_id) == {
        "applied": True,
        "interfaces": ["net1"],
        "policies": ["ns1/allow-clients"],
        "error": None,
    }


class StoreGroups:
    """The node's peer groups as its Kubernetes feed gives them: the PolicyPeerGroup objects
    the view holds (the feed lists the selected ones; here all are)."""

    def __init__(self, view: store.ClusterStore) -> None:
        self.view = view
        self.selected: set[str] = set()

    def select_groups(self, ids: set[str]) -> None:
        self.selected = set(ids)

    def published_groups(self) -> set[str]:
        return {
            model.labels(o)[model.PEER_GROUP_LABEL] for o in self.view.objects(model.PEER_GROUP)
        }

    async def wait_groups(self, ids: set[str], timeout: float) -> bool:
        deadline = asyncio.get_running_loop().time() + timeout
        while not ids <= self.published_groups():
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(0.01)
        return True


@pytest.mark.req("POL-CTRL", "POL-SPAN")
@pytest.mark.parametrize("fail_open", [False, True], ids=["failClosed", "failOpen"])
def test_a_pod_whose_peer_group_is_unpublished_fails_closed_or_open_then_gets_its_table(
    node: Node, monkeypatch: pytest.MonkeyPatch, fail_open: bool
) -> None:
    # the controller is down: db's policy names a group (app=web) no controller published;
    # web runs on another node, so the node knows of it only through that group
    monkeypatch.setattr(policy_sync, "GROUPS_WAIT", 0.2)
    source = StoreGroups(node.view)
    node.sync = policy_sync.PolicySync(
        view=node.view,
        records=node.records,
        status_entries=status.status_entries,
        groups=source,
        fail_open=fail_open,
    )
    spec = {
        "podSelector": {"matchLabels": {"app": "db"}},
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}],
    }
    made = policy("db-from-web", spec)
    node.view.upsert(made)
    db = node.add(pod("ns1", "db", {"app": "db"}), {BLUE: "10.91.0.3/24"})
    node.converge()
    text = node.table(db)
    if fail_open:
        assert text is None  # no table: every peer allowed, as for a pod no policy governs
    else:
        assert text is not None  # the table denies: web is nobody's peer yet
        assert "10.0.0.5" not in text

    # the controller is back and publishes the group: the right table, in either mode
    peer_groups = groups.PeerGroups()
    peer_groups.set_namespace("ns1", {})
    peer_groups.set_policies([parse_policy(made)])
    web = builders.addressed_pod("web", "ns1", {"app": "web"}, 5, v6=False, network=BLUE)
    peer_groups.set_pod(web)
    (write,) = peer_groups.take_writes()
    assert write.body is not None
    group = cast(model.KubeObject, write.body)
    node.view.upsert(group)
    assert source.selected == {model.labels(group)[model.PEER_GROUP_LABEL]}
    node.converge()
    text = node.table(db)
    assert text is not None
    assert "10.0.0.5" in text
