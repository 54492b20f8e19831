"""One judge (SEC-VALUES, issue 34 item 4): every case of tests/attack_corpus.py gets the same
verdict from `netattach validate --node`, the daemon's ADD (the thick orchestrator), the thin
plugin's ADD (`pods.thin.handle`, on a directory feed of the same manifests), hot-plug (the
NAD added to a running pod's selection, `Orchestrator.replug`) and, where CEL can say it
(`Attack.admission`, or a `resource` annotation), the generated ValidatingAdmissionPolicy; the
attacks are refused, the plain uses (`ALLOWED`) are not.

Every judge sees one node, `attack_corpus.node_facts()`, through the seam they all read it by
(`node_guard.read_node_facts`), and one live attachment of another pod holding
`attack_corpus.LIVE_ADDRESS` (a pod record in each judge's state directory). A refusal is known
the same way everywhere: CNI code 7 with "refused by the delegate policy" in its message (the
daemon, the thin plugin, hot-plug), a "refused by the delegate policy" problem of the NAD
(validate), a failed validation (admission). Two attacks (`type-path`, `nested-900-deep`) are
refused before the policy sees them, by the daemon's own decoder: "invalid spec.config" (code 7,
and validate's problem line) counts as a refusal too, and the judges of the node must give the
same one of the two. No plugin runs a real ADD: the plugins are stubs, so an ADD that is not
refused fails later, which is "not refused".

A judge that parts from the others is a product bug: `DISAGREEMENTS` names it, and its case is
an expected failure (strict) until it is fixed.
"""

from __future__ import annotations

import asyncio
import functools
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml

from netattach.cli import validate
from netattach.cluster import files, model, store
from netattach.cni import env, errors
from netattach.guard import admission, delegate_policy
from netattach.pods import call_log, locks, node_guard, orchestrator, records, thin
from netattach.runtime import chain
from netattach.settings import settings
from tests import attack_corpus, builders
from tests.attack_corpus import Attack
from tests.builders import Sink
from tests.unit.admission_fixtures import CompiledPolicy, nad
from tests.unit.fake_plugins import FakePlugins

pytestmark = pytest.mark.req("SEC-VALUES")

REFUSED = "refused by the delegate policy"
# What the daemon's decoder refuses before the policy sees the config (NAD-BADCONF): a refusal
# too (code 7, nothing runs), and the same one from each judge.
INVALID = "invalid spec.config"
NAMESPACE = "blue"
POD = "web"
UID = "u1"
ATTACK_NAD = "attack"
# The NAD the hot-plugged pod runs with before the attack is added to its selection.
PLAIN_NAD = "plain"
PLAIN_CONFIG = {"cniVersion": attack_corpus.CNI_VERSION, "type": "macvlan", "master": "eth1"}
CLUSTER_NETWORK = "cluster-default"
# Every plugin type the corpus names, as stubs: no ADD stops short at "not installed" before
# the node guard has judged it.
PLUGINS = (
    *delegate_policy.DEFAULT_TYPES,
    "host-device",
    "portmap",
    "firewall",
)

# Disagreements found: a product bug each (src/ is not changed to make them pass here).
# The attack, and the judges that part from the others' verdict, and why.
DISAGREEMENTS: dict[str, tuple[tuple[str, ...], str]] = {}


class KnownDisagreementError(AssertionError):
    """The judges of `DISAGREEMENTS` part from the others, and no other does."""


class Verdict(NamedTuple):
    refusal: str
    """REFUSED or INVALID when the judge refused the NAD (which of them), "" when it did not."""
    message: str

    @property
    def refused(self) -> bool:
        return bool(self.refusal)


def refusal_in(text: str) -> str:
    return next((kind for kind in (REFUSED, INVALID) if kind in text), "")


def _cases() -> list[Any]:
    cases = []
    for attack in (*attack_corpus.ATTACKS, *attack_corpus.ALLOWED):
        marks = []
        if attack.name in DISAGREEMENTS:
            judges, why = DISAGREEMENTS[attack.name]
            reason = f"{', '.join(judges)} disagree: {why}"
            marks.append(
                pytest.mark.xfail(strict=True, raises=KnownDisagreementError, reason=reason)
            )
        cases.append(pytest.param(attack, id=attack.name, marks=marks))
    return cases


# --- the cluster, the node and the settings every judge shares -----------------------------------


def namespace_doc(attack: Attack) -> dict[str, Any]:
    labels = {**attack.labels, delegate_policy.NAMESPACE_NAME_LABEL: NAMESPACE}
    return {
        "apiVersion": "v1",
        "kind": model.NAMESPACE,
        "metadata": {"name": NAMESPACE, "labels": labels},
    }


def nad_doc(name: str, config: str, resource: str = "") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": NAMESPACE}
    if resource:
        metadata["annotations"] = {model.RESOURCE_ANNOTATION: resource}
    return {
        "apiVersion": model.API_VERSIONS[model.NAD],
        "kind": model.NAD,
        "metadata": metadata,
        "spec": {"config": config},
    }


def selection(attack: Attack, *, plain: bool = False) -> str:
    """The pod's selection annotation: the attack's NAD (with its `cni-args`), after the plain
    one when `plain`."""
    elements: list[dict[str, Any]] = [{"name": PLAIN_NAD}] if plain else []
    element: dict[str, Any] = {"name": ATTACK_NAD}
    if attack.cni_args is not None:
        element["cni-args"] = dict(attack.cni_args)
    elements.append(element)
    return json.dumps(elements)


def pod_doc(annotation: str) -> model.KubeObject:
    return {
        "apiVersion": "v1",
        "kind": model.POD,
        "metadata": {
            "name": POD,
            "namespace": NAMESPACE,
            "uid": UID,
            "annotations": {model.NETWORKS_ANNOTATION: annotation},
        },
    }


class World:
    """The files every judge reads, below `root`: manifests, networks, plugins, state."""

    def __init__(self, root: Path, attack: Attack) -> None:
        self.root = root
        self.attack = attack
        self.manifests = root / "manifests"
        self.manifests.mkdir()
        self.plain = nad_doc(PLAIN_NAD, json.dumps(PLAIN_CONFIG))
        self.documents = [
            namespace_doc(attack),
            nad_doc(ATTACK_NAD, attack_corpus.config_text(attack), attack.resource),
            self.plain,
            pod_doc(selection(attack)),
        ]
        for index, document in enumerate(self.documents):
            (self.manifests / f"{index}-{document['kind'].lower()}.yaml").write_text(
                yaml.safe_dump(document, allow_unicode=True), encoding="utf-8"
            )
        networks = root / "networks"
        networks.mkdir()
        (networks / "default.conf").write_text(
            json.dumps({"cniVersion": "1.0.0", "name": CLUSTER_NETWORK, "type": "bridge"})
        )
        self.plugins = FakePlugins(root / "bin", PLUGINS)
        stubs_on_disk(self.plugins.directory)

    def settings(self, judge: str) -> dict[str, Any]:
        """The settings of one judge: its own state directory, holding the live attachment."""
        state = self.root / f"state-{judge}"
        live_attachment(state)
        return {
            "clusterNetwork": CLUSTER_NETWORK,
            "networksDir": str(self.root / "networks"),
            "binDirs": [str(self.plugins.directory)],
            "stateDir": str(state),
            "feed": {"directory": str(self.manifests)},
            "delegatePolicy": attack_corpus.corpus_settings(),
        }

    def orchestrator(self, judge: str, view: store.ClusterStore) -> orchestrator.Orchestrator:
        """The daemon's orchestrator on `view`, the plugins played by the stubs' executor."""
        cfg = settings.parse_settings(self.settings(judge), source=judge)
        state = cfg.runtime.state_dir
        return orchestrator.Orchestrator(
            settings=cfg,
            view=view,
            sink=Sink(),
            runtime=chain.Runtime(
                path=[str(self.plugins.directory)],
                cache_dir=state / "cache",
                executor=self.plugins,
            ),
            records=records.PodRecords(state),
            locks=locks.ContainerLocks(state),
        )

    def view(self) -> store.ClusterStore:
        """The cluster as the daemon's directory feed reads the manifests."""
        view = store.ClusterStore()
        problems = files.DirectoryFeed(self.manifests, view).load()
        assert problems == (), problems
        return view


def stubs_on_disk(directory: Path) -> None:
    """PLUGINS as executable files in `directory`, for the thin plugin: its exec is the real one,
    which finds plugins on disk. One runs only in an allowed case, failing: no refusal either."""
    directory.mkdir(parents=True)
    for name in PLUGINS:
        stub = directory / name
        stub.write_text("#!/bin/sh\nexit 99\n")
        stub.chmod(0o755)


def live_attachment(state: Path) -> None:
    """Another pod's attachment, live on the node, holding `LIVE_ADDRESS`."""
    result = {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "net1", "sandbox": "/run/netns/live"}],
        "ips": [{"address": f"{attack_corpus.LIVE_ADDRESS}/24", "interface": 0}],
    }
    attachment = records.AttachmentRecord(
        status_name="green/data",
        ifname="net1",
        is_default=False,
        config={"cniVersion": "1.0.0", "name": "data", "type": "macvlan", "master": "eth1"},
        capability_args={},
        result=result,
    )
    records.PodRecords(state).save(
        builders.pod_record(
            "live-pod",
            attachment,
            netns="/run/netns/live",
            namespace="green",
            pod="db",
            uid="u-live",
            complete=True,
        )
    )


@pytest.fixture(autouse=True)
def the_corpus_node(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every judge reads `attack_corpus.node_facts()` as this node's."""
    # Each orchestrator's node guard reads the node at its first ADD that needs it.
    monkeypatch.setattr(node_guard, "read_node_facts", attack_corpus.node_facts)
    # The thin plugin sets these from its settings: put them back.
    names = ("netattach", call_log.log.name)
    levels = {name: logging.getLogger(name).level for name in names}
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


# --- the judges ----------------------------------------------------------------------------------


def cni_verdict(code: int, msg: str) -> Verdict:
    return Verdict(refusal_in(msg) if code == 7 else "", f"{code} {msg}")


def judge_validate(world: World) -> Verdict:
    settings_file = world.root / "settings.yaml"
    settings_file.write_text(yaml.safe_dump(world.settings("validate")), encoding="utf-8")
    assert settings.settings_problems(world.settings("validate")) == ()
    out = io.StringIO()
    paths = [str(settings_file), *sorted(str(p) for p in world.manifests.iterdir())]
    validate.run(paths, stdin=io.StringIO(), stdout=out, node=True)
    # The NAD judged alone, and the pod's selection of it planned as at ADD (its cni-args).
    subjects = (f"{model.NAD} {NAMESPACE}/{ATTACK_NAD}: ", f"{model.POD} {NAMESPACE}/{POD}: ")
    lines = [line for line in out.getvalue().splitlines() if any(s in line for s in subjects)]
    found = sorted({refusal_in(line) for line in lines} - {""})
    return Verdict(found[0] if found else "", " | ".join(lines) or out.getvalue().splitlines()[-1])


def add_call(container_id: str, netns: str = "/run/netns/na-one-judge") -> env.Environment:
    return env.Environment(
        command="ADD",
        container_id=container_id,
        netns=netns,
        ifname="eth0",
        args=(("K8S_POD_NAMESPACE", NAMESPACE), ("K8S_POD_NAME", POD), ("K8S_POD_UID", UID)),
    )


def judge_daemon(world: World) -> Verdict:
    orch = world.orchestrator("daemon", world.view())
    try:
        asyncio.run(orch.add(add_call("c-daemon"), {"cniVersion": "1.0.0"}))
    except errors.CNIError as exc:
        return cni_verdict(exc.code, exc.msg)
    return Verdict("", "attached")


def judge_thin(world: World) -> Verdict:
    environ = {
        "CNI_COMMAND": "ADD",
        "CNI_CONTAINERID": "c-thin",
        "CNI_NETNS": "/run/netns/na-one-judge",
        "CNI_IFNAME": "eth0",
        "CNI_ARGS": f"K8S_POD_NAMESPACE={NAMESPACE};K8S_POD_NAME={POD};K8S_POD_UID={UID}",
        "CNI_PATH": str(world.plugins.directory),
    }
    netconf = {
        "cniVersion": "1.0.0",
        "name": "netattach",
        "type": "netattach",
        "settings": world.settings("thin"),
    }
    reply = thin.handle(environ, json.dumps(netconf).encode())
    if reply.exit_code == 0:
        return Verdict("", "attached")
    error = json.loads(reply.stdout)
    return cni_verdict(error["code"], error["msg"])


def judge_hotplug(world: World) -> Verdict:
    """The pod runs with the plain NAD; then its selection adds the attack's."""
    view = world.view()
    view.upsert(pod_doc(json.dumps([{"name": PLAIN_NAD}])))
    orch = world.orchestrator("hotplug", view)
    sandbox = world.root / "sandbox"  # hot-plug acts on a pod whose sandbox is there
    sandbox.write_text("")
    asyncio.run(orch.add(add_call("c-hotplug", str(sandbox)), {"cniVersion": "1.0.0"}))
    view.upsert(pod_doc(selection(world.attack, plain=True)))
    try:
        done = asyncio.run(orch.replug("c-hotplug"))
    except errors.CNIError as exc:
        return cni_verdict(exc.code, exc.msg)
    record = orch.records.load("c-hotplug")
    assert record is not None
    attached = [attachment.status_name for attachment in record.attachments]
    # A pass that acted: the attack's attachment made (or made and failed, and undone).
    assert not done or f"{NAMESPACE}/{ATTACK_NAD}" in attached, attached
    return Verdict("", f"replugged: {', '.join(attached)}" if done else "an attachment failed")


@functools.cache
def compiled_policy() -> CompiledPolicy:
    return CompiledPolicy(admission.build_policy(attack_corpus.corpus_policy())[0])


def judge_admission(attack: Attack) -> Verdict:
    annotations = {model.RESOURCE_ANNOTATION: attack.resource} if attack.resource else None
    document = nad(NAMESPACE, attack_corpus.config_text(attack), annotations)
    messages = compiled_policy().messages(document, dict(attack.labels))
    return Verdict("the admission policy" if messages else "", " | ".join(messages) or "admitted")


def admission_judges(attack: Attack) -> bool:
    """Whether the admission policy's verdict is compared: CEL can say it from the NAD (its
    config, or its resourceName annotation, which the kube test does not post)."""
    return attack.admission or bool(attack.resource)


# --- one verdict ---------------------------------------------------------------------------------


@pytest.mark.parametrize("attack", _cases())
def test_every_judge_gives_the_same_verdict(tmp_path: Path, attack: Attack) -> None:
    world = World(tmp_path, attack)
    verdicts = {
        "validate --node": judge_validate(world),
        "daemon ADD": judge_daemon(world),
        "thin ADD": judge_thin(world),
        "hot-plug": judge_hotplug(world),
    }
    node_judges = {verdict.refusal for verdict in verdicts.values()}
    if admission_judges(attack):
        verdicts["admission"] = judge_admission(attack)
    expected = attack not in attack_corpus.ALLOWED
    table = "\n".join(
        f"  {judge}: {verdict.refusal or 'not refused'}: {verdict.message[:400]}"
        for judge, verdict in verdicts.items()
    )
    said = f"{attack.name} ({attack.does or 'a plain use'}):\n{table}"
    wrong = tuple(judge for judge, verdict in verdicts.items() if verdict.refused is not expected)
    if wrong and wrong == DISAGREEMENTS.get(attack.name, ((), ""))[0]:
        raise KnownDisagreementError(said)
    # One verdict, and for the judges of the node one reason (the policy, or the decoder).
    assert len(node_judges) == 1, said
    assert all(verdict.refused is expected for verdict in verdicts.values()), said


def test_the_corpus_names_each_case_once() -> None:
    names = [a.name for a in (*attack_corpus.ATTACKS, *attack_corpus.ALLOWED)]
    assert len(names) == len(set(names))
    assert set(DISAGREEMENTS) <= set(names)
    assert all(judges for judges, _ in DISAGREEMENTS.values())
