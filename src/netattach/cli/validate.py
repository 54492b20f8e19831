"""`netattach validate FILE|DIR... [-]`: check manifests and configs before a node has to run them.

A directory stands for every `.yaml`, `.yml`, `.json`, `.conf` and `.conflist` file below it, in
name order (hidden ones and the directory feed's `status/` left out), so `netattach validate
examples/` checks what the directory feed, the settings and the networks directory would read.
Each file (`-` is standard input) holds YAML or JSON: one document, several separated by `---`,
or a list as `kubectl get -o yaml` prints it (`kind: List`, or the API's `PodList`, ... whose
items may omit their kind). Every document is checked as what it is:

    netattach settings                a mapping with `clusterNetwork` (or with settings keys
                                      only): every key, as the daemon reads them
    NetworkAttachmentDefinition       name and namespace (NAD-NAME); spec.config parsed by the
                                      daemon's own `resolve_delegate` (NAD-BADCONF) and judged
                                      by the daemon's own `delegate_guard.check_nad` (SEC-
                                      DELEGATE, SEC-KEYS, SEC-NODE, SEC-VALUES; the
                                      resourceName annotation included) under the delegate
                                      policy of the settings among the inputs (the defaults when
                                      none is), with the labels of the Namespaces among them;
                                      with `--node`, also by the node guard's `judge_config`
                                      against this machine as the daemon on it would see it at
                                      ADD (its addresses, gateways, links, forwarding, bridges,
                                      and the attachments recorded in the settings' stateDir)
    MultiNetworkPolicy                parsed by the daemon's own `policy.model.parse_policy`:
                                      the policy-for annotation, selectors, peers, ports
    Pod, and the pod template of a    the selection annotation, parsed by the daemon's own
    Deployment, DaemonSet, ...        `parse_selections`; each selection of a NAD among the
                                      inputs planned by the daemon's own `plan.selected`
                                      (`cni-args`, `ips`, `mac` merged as at ADD) and judged as
                                      the NAD is
    a CNI config or config list       a mapping with `type`, `plugins` or `cniVersion`

Other kinds are listed as skipped, which is not a problem. Output: one line per problem,

    <file> <Kind> <namespace>/<name>: <problem, quoting the bad value>

(`<name>` alone when the object names no namespace, `#<document>` when it has no name), warnings
the same way after `warning:`, then `N objects checked, M problems`. Exit status: 0 without
problems, 1 with problems, 2 when an input could not be read.
"""

import re
import reprlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO, cast

from netattach import names
from netattach.attach import delegate, selection
from netattach.cluster import documents, files, model
from netattach.cni import conf, errors
from netattach.guard import delegate_policy, node_state
from netattach.pods import delegate_guard, node_guard, plan, records
from netattach.policy import model as policy_model
from netattach.settings import network as network_settings
from netattach.settings import runtime as runtime_settings
from netattach.settings import settings

STDIN = "-"
_STDIN_LABEL = "<stdin>"

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_UNREADABLE = 2

# What a directory named on the command line stands for: manifests as the directory feed reads
# them, and CNI configs as a networks directory holds them.
_CHECKED_SUFFIXES = files.MANIFEST_SUFFIXES | {".conf", ".conflist"}

# Where each workload kind keeps the pod template whose annotations its pods get.
_POD_TEMPLATES: dict[str, tuple[str, ...]] = {
    "PodTemplate": ("template",),
    "ReplicationController": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
# Keys that make a mapping without `kind` a CNI network configuration (CNI spec "Configuration
# format"): a config has `type`, a list `plugins`, both `cniVersion`.
_CNI_KEYS = ("type", "plugins", "cniVersion", "cniVersions")
# parse_selections joins its problems with "; " in the details, and each starts with its path
# and ": " (`networks: `, `networks[0].mac: `); a "; " inside a quoted bad value is not followed
# by that, so it does not split.
_SELECTION_SPLIT = re.compile(r"; (?=networks[^\s:]*: )")
# parse_policy's problems likewise start with their field (or the policy-for annotation's name).
_POLICY_SPLIT = re.compile(
    r"; (?=(?:kind|apiVersion|metadata|spec|"
    + re.escape(policy_model.POLICY_FOR_ANNOTATION)
    + r")[\s.:\[])"
)
# What a policy's problem line may hold: parse_policy quotes whole values, which can be large.
_PROBLEM_CHARS = 400
_SHOW_CHARS = 80
# reprlib bounds the work as well as the text: YAML aliases let a few bytes stand for a structure
# far too large to repr in full ("billion laughs").
_REPR = reprlib.Repr()
_REPR.maxstring = _SHOW_CHARS
_REPR.maxother = _SHOW_CHARS
_REPR.maxlevel = 3


class _Report:
    """The lines printed so far and what they add up to."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.checked = 0
        self.problems = 0
        self.unreadable = False
        # SEC-DELEGATE: the policy NADs are checked against, and the namespaces' labels.
        self.policy = delegate_policy.DEFAULT_POLICY
        self.namespaces: dict[str, Mapping[str, object]] = {}
        self.nads: dict[tuple[str, str], model.KubeObject] = {}
        self.networks = network_settings.NetworkSettings(
            cluster_network=network_settings.ClusterNetworkRef(kind="name", name="validate")
        )
        self.state_dir = runtime_settings.DEFAULT_STATE_DIR
        # `--node`: the node's facts and live attachments, read once (None: not judged).
        self.node: tuple[node_state.NodeFacts, node_state.LiveAttachments] | None = None

    def lookup_namespace(self, name: str) -> Mapping[str, object] | None:
        """The Namespace `name` among the inputs (the daemon's view answers the same)."""
        return self.namespaces.get(name)

    def lookup_nad(self, namespace: str, name: str) -> model.KubeObject | None:
        """The NAD `namespace/name` among the inputs, when its spec.config is a string."""
        return self.nads.get((namespace, name))

    def judged(self, reference: str, raw: Mapping[str, object], resource: str) -> list[str]:
        """The delegate policy's refusals of the NAD `namespace/name` as it would run (`raw`):
        the daemon's `check_nad`, then, with --node, its node guard."""
        refusals = delegate_guard.check_nad(reference, raw, self.policy, self, resource)
        if not refusals and self.node is not None and self.policy.enabled:
            namespace = reference.partition("/")[0]
            labels = delegate_guard.namespace_labels(self, namespace)
            rules = self.policy.rules_for(namespace, labels)
            refusals = node_guard.judge_config(raw, rules, *self.node)
        return [f"refused by the delegate policy: {refusal}" for refusal in refusals]

    def line(self, text: str) -> None:
        # One line each, whatever a message holds: a line is one problem to a reader or a grep.
        print(text.replace("\r", " ").replace("\n", " "), file=self.out)

    def results(self, subject: str, problems: Sequence[str], warnings: Sequence[str] = ()) -> None:
        self.checked += 1
        self.problems += len(problems)
        for problem in problems:
            self.line(f"{subject}: {problem}")
        for warning in warnings:
            self.line(f"{subject}: warning: {warning}")

    def exit_status(self) -> int:
        if self.unreadable:
            return EXIT_UNREADABLE
        return EXIT_PROBLEMS if self.problems else EXIT_OK


def run(paths: Sequence[str], *, stdin: TextIO, stdout: TextIO, node: bool = False) -> int:
    """Check every document of every file in `paths` (`-` reads `stdin`); the exit status.
    `node`: judge NADs against this machine too, as its daemon would at ADD."""
    report = _Report(stdout)
    if not paths:
        report.line("netattach validate: no input named (give files, or - for standard input)")
        return EXIT_UNREADABLE
    texts: list[tuple[str, str | None, str]] = []  # label, text (None: unreadable), why not
    for path in _expand(paths):
        label = _STDIN_LABEL if path == STDIN else path
        if path != STDIN and Path(path).is_dir():
            texts.append(
                (label, None, "a directory with no .yaml, .yml, .json, .conf or .conflist file")
            )
            continue
        try:
            text = stdin.read() if path == STDIN else Path(path).read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            texts.append((label, None, f"not UTF-8 text ({exc})"))
            continue
        except OSError as exc:
            texts.append((label, None, str(exc)))
            continue
        texts.append((label, text, ""))
    _read_context([read for _, read, _ in texts if read is not None], report)
    if node:
        try:
            facts = node_guard.read_node_facts()
            live = node_guard.live_attachments(records.PodRecords(report.state_dir), "")
        except OSError as exc:
            report.line(f"netattach validate: --node: cannot read this node: {exc}")
            return EXIT_UNREADABLE
        report.node = (facts, live)
    for label, read, why in texts:
        if read is None:
            report.unreadable = True
            report.line(f"{label}: cannot read: {why}")
        else:
            _check_text(read, label, report)
    report.line(f"{report.checked} objects checked, {report.problems} problems")
    return report.exit_status()


def _expand(paths: Sequence[str]) -> list[str]:
    """`paths` with each directory replaced by the files below it that validate checks (the
    directory itself when it holds none, to be reported)."""
    expanded: list[str] = []
    for path in paths:
        directory = Path(path)
        if path == STDIN or not directory.is_dir():
            expanded.append(path)
            continue
        found = [
            str(found)
            for found in sorted(directory.rglob("*"))
            if found.suffix in _CHECKED_SUFFIXES
            and found.is_file()
            and not any(
                part.startswith(".") or part == files.STATUS_DIRECTORY
                for part in found.relative_to(directory).parts
            )
        ]
        expanded += found or [path]
    return expanded


def _read_context(texts: Sequence[str], report: _Report) -> None:
    """The delegate policy of the first valid settings among `texts`, and every Namespace's
    labels: what the NADs among them are checked against."""
    found_policy = False
    for text in texts:
        for document in _load_documents(text)[0]:
            if not isinstance(document, Mapping):
                continue
            if document.get("kind") == model.NAMESPACE:
                name = _names(document)[1]
                metadata = document.get("metadata")
                labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
                if name and isinstance(labels, Mapping):
                    clean = {str(k): str(v) for k, v in labels.items()}
                    report.namespaces[name] = {"metadata": {"name": name, "labels": clean}}
            elif (
                not found_policy
                and _is_settings(document)
                and not settings.settings_problems(document)
            ):
                parsed = settings.parse_settings(document, source="validate")
                report.policy, found_policy = parsed.networks.delegate_policy, True
                report.state_dir = parsed.runtime.state_dir
                report.networks = parsed.networks
            elif document.get("kind") == model.NAD:
                namespace, name = _names(document)
                spec = document.get("spec")
                if name and isinstance(spec, Mapping) and isinstance(spec.get("config"), str):
                    nad = cast("model.KubeObject", dict(document))  # checked as it is read
                    report.nads[(namespace or "default", name)] = nad


def _is_settings(document: Mapping[str, object]) -> bool:
    return "kind" not in document and (
        "clusterNetwork" in document
        or (
            not any(key in document for key in _CNI_KEYS)
            and any(key in document for key in settings.KEYS)
        )
    )


def _check_text(text: str, label: str, report: _Report) -> None:
    documents, broken = _load_documents(text)
    for index, document in enumerate(documents, start=1):
        _check_document(document, label, f"#{index}", report)
    if broken is not None:
        # The documents before the one that does not parse were still checked.
        report.problems += 1
        report.line(f"{label} document #{len(documents) + 1}: not valid YAML or JSON: {broken}")


def _load_documents(text: str) -> tuple[list[object], str | None]:
    """The documents of `text` and, when it does not parse, why (then none are read).

    The same bounded reader as the directory feed, so both agree on what a document is and a
    hostile file (deep nesting, alias bombs) is refused here too instead of hanging validate.
    """
    data = text.encode("utf-8", errors="surrogatepass")
    is_json = text.lstrip()[:1] in ("{", "[")
    try:
        return list(documents.parse_documents(data, is_json=is_json)), None
    except documents.DocumentsRefusedError as exc:
        if is_json:
            # YAML reads most JSON too (a JSON stream of several documents, for one)
            try:
                return list(documents.parse_documents(data, is_json=False)), None
            except documents.DocumentsRefusedError:
                pass
        return [], " ".join(exc.message.split())


def _check_document(document: object, label: str, where: str, report: _Report) -> None:
    if document is None:  # an empty document, as after a trailing `---`
        return
    if not isinstance(document, Mapping):
        report.line(f"{label} document {where}: skipped, {_show(document)} is not a mapping")
        return
    kind = document.get("kind")
    if isinstance(kind, str) and kind:
        _check_object(document, kind, label, where, report)
    elif "clusterNetwork" in document or (
        not any(key in document for key in _CNI_KEYS)
        and any(key in document for key in settings.KEYS)
    ):
        report.results(f"{label} Settings {where}", settings.settings_problems(document))
    elif any(key in document for key in _CNI_KEYS):
        report.results(*_cni_config_results(document, label, where))
    else:
        report.line(
            f"{label} document {where}: skipped, neither a Kubernetes object (no 'kind'), "
            "netattach settings (no 'clusterNetwork') nor a CNI config (no 'type' or 'plugins')"
        )


def _check_object(
    document: Mapping[str, object], kind: str, label: str, where: str, report: _Report
) -> None:
    items = document.get("items")
    if kind.endswith("List") and isinstance(items, list):
        # `kubectl get -o yaml` prints a `kind: List`; the API's own lists are `PodList`, ...
        # whose items of built-in kinds carry no kind or apiVersion of their own.
        item_kind = kind.removesuffix("List")
        api_version = document.get("apiVersion")
        for index, item in enumerate(items):
            typed = item
            if item_kind and isinstance(item, Mapping) and "kind" not in item:
                typed = {"kind": item_kind, **item}
                if isinstance(api_version, str) and "apiVersion" not in item:
                    typed["apiVersion"] = api_version
            _check_document(typed, label, f"{where}.items[{index}]", report)
        return
    subject = f"{label} {kind} {_identity(document, where)}"
    if kind == model.NAD:
        report.results(subject, *_nad_problems(document, report))
    elif kind == model.POLICY:
        report.results(subject, *_policy_problems(document))
    elif kind == model.POD:
        namespace, name = _names(document)
        report.results(subject, _selection_problems(document, namespace, name, "", report))
    elif kind in _POD_TEMPLATES:
        report.results(subject, _template_problems(document, _POD_TEMPLATES[kind], report))
    else:
        report.line(f"{subject}: skipped, netattach does not check this kind")


# --- NetworkAttachmentDefinition ---------------------------------------------------------------


def _nad_problems(document: Mapping[str, object], report: _Report) -> tuple[list[str], list[str]]:
    """The NAD's problems and warnings: its names, its apiVersion, its spec.config, and what
    of it the delegate policy refuses."""
    problems: list[str] = []
    warnings: list[str] = []
    expected = model.API_VERSIONS[model.NAD]
    api_version = document.get("apiVersion")
    if api_version is not None and api_version != expected:
        problems.append(f"apiVersion: must be {expected!r}, got {_show(api_version)}")
    metadata = document.get("metadata")
    if not isinstance(metadata, Mapping):
        problems.append(f"metadata: must be a mapping with a name, got {_show(metadata)}")
        metadata = {}
    name = metadata.get("name")
    if name is None:
        problems.append("metadata.name: required, got nothing")
    elif not names.is_label(name):
        problems.append(f"metadata.name: {_label_problem(name)}")
    namespace = metadata.get("namespace")
    if namespace is not None and not names.is_label(namespace):
        problems.append(f"metadata.namespace: {_label_problem(namespace)}")

    spec = document.get("spec")
    if spec is None:
        return problems, warnings  # NAD-IMPLICIT: a network the node has on disk
    if not isinstance(spec, Mapping):
        problems.append(f"spec: must be a mapping, got {_show(spec)}")
        return problems, warnings
    config = spec.get("config")
    if config is None or config == "":
        return problems, warnings  # resolved from the node's networks directory, by name
    if not isinstance(config, str):
        # The CRD makes spec.config a string; YAML makes a mapping of an unquoted JSON object.
        problems.append(
            "spec.config: must be a string holding the CNI config as JSON (in YAML, a block "
            f"scalar 'config: |'), got {_show(config)}"
        )
        return problems, warnings
    nad_namespace = namespace if isinstance(namespace, str) and namespace else "default"
    nad_name = name if isinstance(name, str) and name else "unnamed"
    nad = f"{model.NAD} {nad_namespace}/{nad_name}: "
    try:
        found = delegate.resolve_delegate(
            namespace=nad_namespace,
            name=nad_name,
            spec_config=config,
            has_spec=True,
            # Never read: a non-empty spec.config is all resolve_delegate looks at.
            networks_dir=network_settings.DEFAULT_NETWORKS_DIR,
        )
    except errors.CNIError as exc:
        problems.append(str(exc).removeprefix(nad))
    else:
        if found.name_mismatch is not None:
            warnings.append(found.name_mismatch.removeprefix(nad))
        # The daemon's own judges (one judge, SEC-VALUES): the NAD's config and resourceName,
        # then, with --node, what this node's state shows.
        reference = f"{nad_namespace}/{nad_name}"
        problems += report.judged(reference, found.network.raw, _resource(metadata))
    return problems, warnings


def _resource(metadata: Mapping[str, object]) -> str:
    """The NAD's resourceName annotation as the daemon reads it (`plan.resource_of`); "" when
    the annotations are no mapping of strings (the API server would not take them)."""
    annotations = metadata.get("annotations")
    if not isinstance(annotations, Mapping) or not all(
        isinstance(v, str) for v in annotations.values()
    ):
        return ""
    return plan.resource_of({"metadata": {"annotations": dict(annotations)}})


# --- MultiNetworkPolicy ------------------------------------------------------------------------


def _policy_problems(document: Mapping[str, object]) -> tuple[list[str], list[str]]:
    """The policy's problems, as the daemon's parser finds them, and warnings."""
    metadata = document.get("metadata")
    if not isinstance(metadata, Mapping):
        return [f"metadata: must be a mapping with a name, got {_show(metadata)}"], []
    problems = [
        f"metadata.{key}: must be a string, got {_show(metadata[key])}"
        for key in ("name", "namespace", "uid")
        if key in metadata and not isinstance(metadata[key], str)
    ]
    annotations = metadata.get("annotations")
    if annotations is not None and not isinstance(annotations, Mapping):
        problems.append(f"metadata.annotations: must be a mapping, got {_show(annotations)}")
    elif isinstance(annotations, Mapping):
        problems += [
            f"metadata.annotations[{key!r}]: must be a string, got {_show(value)}"
            for key, value in annotations.items()
            if not isinstance(value, str)
        ]
    if problems:
        return problems, []
    warnings: list[str] = []
    filled = dict(metadata)
    # Before the API server has it, a manifest has no namespace (kubectl's) and no uid (the
    # server's, or the directory feed's, derived from the policy's name): neither is missing.
    filled.setdefault("namespace", "default")
    if not filled.get("uid"):
        filled["uid"] = "validate-placeholder"
    policy: dict[str, object] = {**document, "metadata": filled}
    try:
        policy_model.parse_policy(policy)  # type: ignore[arg-type]  # the raw object, checked
    except errors.InvalidNetworkConfigError as exc:
        return [_bounded(_policy_field(p)) for p in _POLICY_SPLIT.split(exc.details)], warnings
    return [], warnings


def _policy_field(problem: str) -> str:
    # The policy-for problems name the annotation but not where it sits.
    if problem.startswith(policy_model.POLICY_FOR_ANNOTATION):
        return f"metadata.annotations[{policy_model.POLICY_FOR_ANNOTATION!r}]: {problem}"
    return problem


def _bounded(text: str) -> str:
    return text if len(text) <= _PROBLEM_CHARS else text[:_PROBLEM_CHARS] + "..."


# --- the selection annotation ------------------------------------------------------------------


def _template_problems(
    document: Mapping[str, object], path: tuple[str, ...], report: _Report
) -> list[str]:
    """The selection problems of a workload's pod template, in its pods' namespace."""
    template: object = document
    for key in path:
        template = template.get(key) if isinstance(template, Mapping) else None
    if template is None:
        return []
    where = ".".join(path)
    if not isinstance(template, Mapping):
        return [f"{where}: must be a mapping, got {_show(template)}"]
    namespace, name = _names(document)
    return _selection_problems(template, namespace, name, f"{where}.", report)


def _selection_problems(
    owner: Mapping[str, object], namespace: str, name: str, where: str, report: _Report
) -> list[str]:
    metadata = owner.get("metadata")
    if metadata is None:
        return []
    if not isinstance(metadata, Mapping):
        return [f"{where}metadata: must be a mapping, got {_show(metadata)}"]
    annotations = metadata.get("annotations")
    if annotations is None:
        return []
    if not isinstance(annotations, Mapping):
        return [f"{where}metadata.annotations: must be a mapping, got {_show(annotations)}"]
    text = annotations.get(model.NETWORKS_ANNOTATION)
    if text is None:
        return []
    key = f"{where}metadata.annotations[{model.NETWORKS_ANNOTATION!r}]"
    if not isinstance(text, str):
        # Unquoted in YAML, the JSON form becomes a list: Kubernetes refuses the object.
        return [f"{key}: must be a string (quote the JSON form in YAML), got {_show(text)}"]
    lead = f"{where.rstrip('.')}: " if where else ""
    try:
        chosen = selection.parse_selections(
            text, pod_namespace=namespace or "default", pod=name or "?"
        )
    except errors.InvalidSelectionError as exc:
        # A template's problems say which template: "spec.template: networks[0].mac: ...".
        return [f"{lead}{problem}" for problem in _SELECTION_SPLIT.split(exc.details)]
    return [f"{lead}{problem}" for problem in _planned_problems(chosen, report)]


def _planned_problems(chosen: Sequence[selection.Selection], report: _Report) -> list[str]:
    """What the delegate policy refuses of each selection of a NAD among the inputs, planned
    as the daemon plans it at ADD (the selection's `cni-args`, `ips` and `mac` merged into
    the config, SEL-CNIARGS): a pod author's part judged with the NAD's."""
    problems: list[str] = []
    for index, one in enumerate(chosen):
        if report.lookup_nad(one.namespace, one.name) is None:
            continue  # not among the inputs: the NAD itself is judged where it is
        try:
            planned = plan.selected(one, ifname=f"net{index + 1}", view=report, cfg=report.networks)
        except errors.CNIError as exc:
            problems.append(f"networks[{index}]: {exc.msg}")
            continue
        for problem in report.judged(planned.status_name, planned.network.raw, planned.resource):
            problems.append(f"networks[{index}] ({planned.status_name}): {problem}")
    return problems


# --- CNI configs -------------------------------------------------------------------------------


def _cni_config_results(
    document: Mapping[str, object], label: str, where: str
) -> tuple[str, list[str]]:
    kind = "NetworkConfigList" if "plugins" in document else "NetworkConfig"
    name = document.get("name")
    subject = f"{label} {kind} {name if isinstance(name, str) and name else where}"
    try:
        conf.parse_any({str(key): value for key, value in document.items()}, source=label)
    except errors.CNIError as exc:
        return subject, [str(exc).removeprefix(f"{label}: ")]
    return subject, []


# --- shared ------------------------------------------------------------------------------------


def _names(document: Mapping[str, object]) -> tuple[str, str]:
    """The object's namespace and name, "" for each it does not give as a string."""
    metadata = document.get("metadata")
    if not isinstance(metadata, Mapping):
        return "", ""
    namespace = metadata.get("namespace")
    name = metadata.get("name")
    return (
        namespace if isinstance(namespace, str) else "",
        name if isinstance(name, str) else "",
    )


def _identity(document: Mapping[str, object], where: str) -> str:
    namespace, name = _names(document)
    if not name:
        return where
    return f"{namespace}/{name}" if namespace else name


def _label_problem(value: object) -> str:
    # standard §3.3 (NAD-NAME): NAD names and namespaces are DNS-1123 labels.
    return f"must be a DNS-1123 label ({names.LABEL_RULE}), got {_show(value)}"


def _show(value: object) -> str:
    shown = _REPR.repr(value)
    if len(shown) > _SHOW_CHARS:
        return shown[:_SHOW_CHARS] + "..."
    return shown
