"""Tests of `netattach validate`: real files in tmp_path, checked as a user would check them.

Most tests call `validate.run` in-process with the output captured; one runs it as a subprocess
with real standard streams, as the command line does.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from netattach.cli import validate

GOOD_NAD = """\
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: macvlan-net
  namespace: ns1
spec:
  config: |
    {"cniVersion": "1.0.0", "type": "macvlan", "master": "eth0",
     "ipam": {"type": "host-local", "subnet": "10.10.0.0/24"}}
"""

BAD_CONFIG_NAD = """\
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: broken-net
  namespace: ns1
spec:
  config: '{"cniVersion": "1.0.0", "type": "../../usr/bin/evil"}'
"""

BAD_MAC_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: ns1
  annotations:
    k8s.v1.cni.cncf.io/networks: '[{"name": "macvlan-net", "mac": "02:00:00:00:00"}]'
spec:
  containers: [{name: web, image: nginx}]
"""

TWO_PROBLEM_SETTINGS = """\
clusterNetwork: kube-system/cluster-net
delegateTimeout: 0
feed:
  directory: /etc/netattach/cluster
logLevel: verbose
"""

GOOD_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: db
  namespace: ns1
  annotations:
    k8s.v1.cni.cncf.io/networks: macvlan-net@data0, ns2/storage-net
"""

GOOD_SETTINGS = """\
clusterNetwork: flannel
feed: {kubernetes: {}}
"""


def _write(tmp_path: Path, name: str, *documents: str) -> Path:
    path = tmp_path / name
    path.write_text("---\n".join(documents), encoding="utf-8")
    return path


def _run(*paths: str | Path, stdin: str = "") -> tuple[int, list[str]]:
    out = io.StringIO()
    status = validate.run([str(p) for p in paths], stdin=io.StringIO(stdin), stdout=out)
    return status, out.getvalue().splitlines()


# ---------------------------------------------------------------------------------------------
# A mixed file, as an operator keeps them


def test_a_mixed_file_reports_each_problem_on_its_own_line(tmp_path: Path) -> None:
    path = _write(
        tmp_path, "cluster.yaml", GOOD_NAD, BAD_CONFIG_NAD, BAD_MAC_POD, TWO_PROBLEM_SETTINGS
    )
    status, lines = _run(path)
    assert status == 1
    assert lines == [
        f"{path} NetworkAttachmentDefinition ns1/broken-net: invalid spec.config: plugin type "
        "'../../usr/bin/evil' must be a plain file name (no '/', '\\', '..' or NUL)",
        f"{path} Pod ns1/web: networks[0].mac: '02:00:00:00:00' is not a 6-byte Ethernet or "
        "20-byte InfiniBand address",
        f"{path} Settings #4: delegateTimeout: must be a number of seconds, more than 0 and at "
        "most 3600, got 0",
        f"{path} Settings #4: logLevel: must be one of debug, info, warning, error, got 'verbose'",
        "4 objects checked, 4 problems",
    ]


def test_good_files_pass_with_a_summary(tmp_path: Path) -> None:
    nads = _write(tmp_path, "nads.yaml", GOOD_NAD, GOOD_POD)
    config = _write(tmp_path, "config.yaml", GOOD_SETTINGS)
    assert _run(nads, config) == (0, ["3 objects checked, 0 problems"])


# ---------------------------------------------------------------------------------------------
# NetworkAttachmentDefinitions


@pytest.mark.req("NAD-BADCONF")
@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ("{not json", "invalid spec.config: not valid JSON"),
        ('{"cniVersion": "1.0.0", "master": "eth0"}', "has neither 'type'"),
        ('{"cniVersion": "1.0.0", "type": "/opt/cni/bin/macvlan"}', "must be a plain file name"),
        ('["macvlan"]', "must be a JSON object, not a list"),
        (
            '{"cniVersion": "1.0.0", "plugins": [{"type": "bridge"}, {"type": "a/../b"}]}',
            "plugins[1].type: plugin type 'a/../b'",
        ),
    ],
    ids=["not-json", "no-type", "path-in-type", "a-list", "path-in-a-chained-type"],
)
def test_a_bad_spec_config_is_reported_naming_the_nad(
    tmp_path: Path, config: str, problem: str
) -> None:
    nad = {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": "data-net", "namespace": "tenant-a"},
        "spec": {"config": config},
    }
    path = tmp_path / "nad.json"
    path.write_text(json.dumps(nad), encoding="utf-8")
    status, lines = _run(path)
    assert status == 1
    assert len(lines) == 2
    assert lines[0].startswith(f"{path} NetworkAttachmentDefinition tenant-a/data-net: ")
    assert problem in lines[0]
    assert lines[1] == "1 objects checked, 1 problems"


def test_a_spec_config_written_as_a_yaml_mapping_is_refused(tmp_path: Path) -> None:
    # An easy mistake: without `|` the JSON object becomes a YAML mapping, not a string.
    path = _write(
        tmp_path,
        "nad.yaml",
        textwrap.dedent(
            """\
            kind: NetworkAttachmentDefinition
            metadata: {name: net, namespace: ns1}
            spec:
              config: {"type": "bridge"}
            """
        ),
    )
    status, lines = _run(path)
    assert status == 1
    assert lines[0] == (
        f"{path} NetworkAttachmentDefinition ns1/net: spec.config: must be a string holding "
        "the CNI config as JSON (in YAML, a block scalar 'config: |'), got {'type': 'bridge'}"
    )


@pytest.mark.parametrize(
    "spec",
    ["", "spec: {}\n", "spec:\n  config: ''\n"],
    ids=["no-spec", "no-config", "empty-config"],
)
def test_a_nad_without_spec_config_names_a_network_on_disk_and_is_fine(
    tmp_path: Path, spec: str
) -> None:
    path = _write(
        tmp_path,
        "nad.yaml",
        "kind: NetworkAttachmentDefinition\nmetadata: {name: sriov-net, namespace: ns1}\n" + spec,
    )
    assert _run(path) == (0, ["1 objects checked, 0 problems"])


def test_nad_names_and_api_version_are_checked(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "nad.yaml",
        textwrap.dedent(
            """\
            apiVersion: k8s.cni.cncf.io/v1beta1
            kind: NetworkAttachmentDefinition
            metadata: {name: Data_Net, namespace: Tenant}
            """
        ),
        "kind: NetworkAttachmentDefinition\nmetadata: {namespace: ns1}\n",
    )
    status, lines = _run(path)
    assert status == 1
    assert lines == [
        f"{path} NetworkAttachmentDefinition Tenant/Data_Net: apiVersion: must be "
        "'k8s.cni.cncf.io/v1', got 'k8s.cni.cncf.io/v1beta1'",
        f"{path} NetworkAttachmentDefinition Tenant/Data_Net: metadata.name: must be a DNS-1123 "
        "label (at most 63 lower-case letters, digits and '-', starting and ending with a letter "
        "or digit), got 'Data_Net'",
        f"{path} NetworkAttachmentDefinition Tenant/Data_Net: metadata.namespace: must be a "
        "DNS-1123 label (at most 63 lower-case letters, digits and '-', starting and ending with "
        "a letter or digit), got 'Tenant'",
        f"{path} NetworkAttachmentDefinition #2: metadata.name: required, got nothing",
        "2 objects checked, 4 problems",
    ]


def test_a_config_named_unlike_its_nad_is_a_warning_not_a_problem(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "nad.yaml",
        "kind: NetworkAttachmentDefinition\nmetadata: {name: net-a}\n"
        'spec: {config: \'{"name": "net-b", "type": "bridge"}\'}\n',
    )
    status, lines = _run(path)
    assert status == 0
    assert lines[0].startswith(
        f"{path} NetworkAttachmentDefinition net-a: warning: spec.config names its network "
        "'net-b', not 'net-a'"
    )
    assert lines[1] == "1 objects checked, 0 problems"


# ---------------------------------------------------------------------------------------------
# The selection annotation: Pods and pod templates


def test_every_selection_problem_is_its_own_line(tmp_path: Path) -> None:
    annotation = json.dumps(
        [
            {"name": "net-a", "ips": ["10.0.0.300/24"], "interface": "eth0/1"},
            {"name": "Net-B", "namespace": "ns; networks[9]"},
        ]
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "app",
            "namespace": "ns1",
            "annotations": {"k8s.v1.cni.cncf.io/networks": annotation},
        },
    }
    path = tmp_path / "pod.json"
    path.write_text(json.dumps(pod), encoding="utf-8")
    status, lines = _run(path)
    assert status == 1
    subject = f"{path} Pod ns1/app: "
    assert [line.removeprefix(subject).split(":")[0] for line in lines[:-1]] == [
        "networks[0].interface",
        "networks[0].ips[0]",
        "networks[1].name",
        "networks[1].namespace",
    ]
    assert all(line.startswith(subject) for line in lines[:-1])
    assert "'10.0.0.300/24'" in lines[1]
    # A "; " inside a quoted value stays in its problem's line.
    assert "'ns; networks[9]'" in lines[3]
    assert lines[-1] == "1 objects checked, 4 problems"


def test_an_unquoted_json_annotation_is_refused(tmp_path: Path) -> None:
    # Unquoted in YAML, the JSON form is a list, which Kubernetes does not take as an annotation.
    path = _write(
        tmp_path,
        "pod.yaml",
        textwrap.dedent(
            """\
            kind: Pod
            metadata:
              name: app
              annotations:
                k8s.v1.cni.cncf.io/networks: [{"name": "net-a"}]
            """
        ),
    )
    status, lines = _run(path)
    assert status == 1
    assert lines[0] == (
        f"{path} Pod app: metadata.annotations['k8s.v1.cni.cncf.io/networks']: must be a string "
        "(quote the JSON form in YAML), got [{'name': 'net-a'}]"
    )


def test_a_pod_without_the_annotation_is_fine(tmp_path: Path) -> None:
    path = _write(tmp_path, "pod.yaml", "kind: Pod\nmetadata: {name: plain, namespace: ns1}\n")
    assert _run(path) == (0, ["1 objects checked, 0 problems"])


@pytest.mark.parametrize(
    ("kind", "template_path"),
    [("Deployment", "spec.template"), ("CronJob", "spec.jobTemplate.spec.template")],
)
def test_a_workloads_pod_template_is_checked(tmp_path: Path, kind: str, template_path: str) -> None:
    template = {"metadata": {"annotations": {"k8s.v1.cni.cncf.io/networks": "net-a,,net-b"}}}
    first, *rest = template_path.split(".")
    nested: object = template
    for key in reversed(rest):
        nested = {key: nested}
    workload: dict[str, object] = {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": "w", "namespace": "n"},
        first: nested,
    }
    path = tmp_path / "workload.json"
    path.write_text(json.dumps(workload), encoding="utf-8")
    status, lines = _run(path)
    assert status == 1
    assert lines[0] == (
        f"{path} {kind} n/w: {template_path}: networks[1]: empty item in 'net-a,,net-b'"
    )


# ---------------------------------------------------------------------------------------------
# CNI configs, settings, lists, other kinds


def test_cni_config_files_are_checked(tmp_path: Path) -> None:
    good = tmp_path / "10-bridge.conflist"
    good.write_text(
        json.dumps({"cniVersion": "1.0.0", "name": "br", "plugins": [{"type": "bridge"}]})
    )
    bad = tmp_path / "20-macvlan.conf"
    bad.write_text(json.dumps({"cniVersion": "9.9.9", "name": "mv", "type": "macvlan"}))
    status, lines = _run(good, bad)
    assert status == 1
    assert lines == [
        f"{bad} NetworkConfig mv: invalid network configuration: cniVersion '9.9.9' is not a "
        "CNI version netattach supports",
        "2 objects checked, 1 problems",
    ]


def test_a_settings_document_without_cluster_network_is_still_settings(tmp_path: Path) -> None:
    path = _write(tmp_path, "config.yaml", "logLevel: info\nfeed: {directory: /srv}\n")
    status, lines = _run(path)
    assert status == 1
    assert lines[0].startswith(f"{path} Settings #1: clusterNetwork: required")


def test_a_kubectl_list_is_checked_item_by_item(tmp_path: Path) -> None:
    listing = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {"kind": "Pod", "metadata": {"name": "a", "namespace": "n"}},
            {
                "kind": "Pod",
                "metadata": {
                    "name": "b",
                    "namespace": "n",
                    "annotations": {"k8s.v1.cni.cncf.io/networks": "x@"},
                },
            },
            {"kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}},
        ],
        "metadata": {"resourceVersion": ""},
    }
    path = tmp_path / "pods.json"
    # Tab-indented: JSON, but not YAML, so this also proves JSON is read as JSON.
    path.write_text(json.dumps(listing, indent="\t"), encoding="utf-8")
    status, lines = _run(path)
    assert status == 1
    assert lines[0].startswith(f"{path} Pod n/b: networks[0].interface: '' is not a valid")
    assert lines[1] == f"{path} ConfigMap n/c: skipped, netattach does not check this kind"
    assert lines[2] == "2 objects checked, 1 problems"


def test_unknown_kinds_and_documents_are_skipped_not_problems(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "misc.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: svc, namespace: ns1}\n",
        "just a string\n",
        "{a: 1}\n",
        "",  # an empty document, as after a trailing ---
    )
    status, lines = _run(path)
    assert status == 0
    assert lines == [
        f"{path} Service ns1/svc: skipped, netattach does not check this kind",
        f"{path} document #2: skipped, 'just a string' is not a mapping",
        f"{path} document #3: skipped, neither a Kubernetes object (no 'kind'), netattach "
        "settings (no 'clusterNetwork') nor a CNI config (no 'type' or 'plugins')",
        "0 objects checked, 0 problems",
    ]


# ---------------------------------------------------------------------------------------------
# Input: stdin, unreadable files, text that does not parse


def test_dash_reads_standard_input() -> None:
    status, lines = _run("-", stdin=BAD_MAC_POD)
    assert status == 1
    assert lines[0].startswith("<stdin> Pod ns1/web: networks[0].mac: '02:00:00:00:00'")


def test_an_unreadable_file_is_status_2_and_the_others_are_still_checked(tmp_path: Path) -> None:
    good = _write(tmp_path, "good.yaml", GOOD_NAD)
    bad = _write(tmp_path, "bad.yaml", BAD_CONFIG_NAD)
    missing = tmp_path / "absent.yaml"
    loop = tmp_path / "loop.yaml"  # a directory is read as its files now: a link loop is not
    loop.symlink_to(loop)
    status, lines = _run(missing, good, bad, loop)
    assert status == 2
    assert lines[0].startswith(f"{missing}: cannot read: [Errno 2] No such file or directory")
    assert lines[1].startswith(f"{bad} NetworkAttachmentDefinition ns1/broken-net:")
    assert lines[2].startswith(f"{loop}: cannot read: [Errno 40] Too many levels of symbolic")
    assert lines[3] == "2 objects checked, 1 problems"


def test_a_file_that_is_not_utf8_is_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"kind: Pod\nmetadata: {name: caf\xe9}\n")
    status, lines = _run(path)
    assert status == 2
    assert lines[0].startswith(f"{path}: cannot read: not UTF-8 text")


def test_a_file_that_does_not_parse_is_one_problem_and_none_of_it_is_checked(
    tmp_path: Path,
) -> None:
    # As the directory feed reads it: a file is taken whole or not at all.
    path = _write(tmp_path, "broken.yaml", BAD_MAC_POD, "kind: Pod\nmetadata: {name: [x\n")
    status, lines = _run(path)
    assert status == 1
    assert lines[0].startswith(f"{path} document #1: not valid YAML or JSON: ")
    assert "expected ',' or ']'" in lines[0]
    assert lines[1] == "0 objects checked, 1 problems"


def test_no_input_named_is_status_2() -> None:
    status, lines = _run()
    assert status == 2
    assert lines == ["netattach validate: no input named (give files, or - for standard input)"]


# ---------------------------------------------------------------------------------------------
# As a process, with real standard streams


def test_validate_as_a_process(tmp_path: Path) -> None:
    path = _write(tmp_path, "cluster.yaml", GOOD_NAD, BAD_CONFIG_NAD, BAD_MAC_POD)
    script = (
        "import sys; from netattach.cli import validate; "
        "sys.exit(validate.run(sys.argv[1:], stdin=sys.stdin, stdout=sys.stdout))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path), "-"],
        input=TWO_PROBLEM_SETTINGS,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == [
        f"{path} NetworkAttachmentDefinition ns1/broken-net",
        f"{path} Pod ns1/web",
        "<stdin> Settings #1",
        "<stdin> Settings #1",
    ]
    assert lines[-1] == "4 objects checked, 4 problems"
