"""`netattach validate`: what `kubectl get -o yaml` prints (a `kind: List`, the API's typed
lists), multi-document files and stdin, with MultiNetworkPolicies checked by the daemon's own
parser; every problem names the object, the field and quotes the bad value."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.cli.harness import POLICY_FOR, netattach

KUBECTL_LIST = textwrap.dedent(
    f"""\
    apiVersion: v1
    kind: List
    metadata:
      resourceVersion: ""
    items:
    - apiVersion: k8s.cni.cncf.io/v1beta1
      kind: MultiNetworkPolicy
      metadata:
        name: good
        namespace: blue
        uid: 6f1f1a52-0b1e-4c55-9d55-0b5b3c1c8e01
        annotations:
          {POLICY_FOR}: net-a,other/net-b
      spec:
        podSelector:
          matchExpressions:
          - {{key: app, operator: In, values: [web]}}
        policyTypes: [Ingress, Egress]
        ingress:
        - from:
          - ipBlock: {{cidr: 10.0.0.0/8, except: [10.1.0.0/16, 10.2.0.0/16]}}
          ports:
          - {{protocol: TCP, port: 8000, endPort: 8080}}
        egress:
        - to:
          - namespaceSelector: {{matchLabels: {{team: a}}}}
            podSelector: {{}}
    - apiVersion: k8s.cni.cncf.io/v1beta1
      kind: MultiNetworkPolicy
      metadata:
        name: bad
        namespace: blue
        uid: 6f1f1a52-0b1e-4c55-9d55-0b5b3c1c8e02
        annotations:
          {POLICY_FOR}: "a/b/c"
      spec:
        podSelector: {{matchExpressions: [{{key: app, operator: Like}}]}}
        policyTypes: [Ingres]
        ingress:
        - from:
          - ipBlock: {{cidr: 10.0.0.0/33}}
          ports:
          - {{protocol: TCPX, port: 99999}}
    - apiVersion: v1
      kind: Pod
      metadata:
        name: web
        namespace: blue
        annotations:
          k8s.v1.cni.cncf.io/networks: '[{{"name": "net-a", "mac": "zz:00"}}]'
    """
)


def test_a_kubectl_list_on_stdin_checks_policies_pods_and_nads() -> None:
    done = netattach("validate", "-", stdin=KUBECTL_LIST)

    assert done.rc == 1
    subject = "<stdin> MultiNetworkPolicy blue/bad: "
    assert done.lines == [
        f"{subject}metadata.annotations['{POLICY_FOR}']: {POLICY_FOR} entry 'a/b/c' is not "
        "'net' or 'ns/net'",
        f"{subject}spec.podSelector.matchExpressions[0]: operator 'Like' is not one of In, "
        "NotIn, Exists, DoesNotExist",
        f"{subject}spec.policyTypes: 'Ingres' is not 'Ingress' or 'Egress'",
        f"{subject}spec.ingress[0].from[0].ipBlock.cidr: '10.0.0.0/33' is not a valid CIDR",
        f"{subject}spec.ingress[0].ports[0]: protocol 'TCPX' is not one of TCP, UDP, SCTP",
        f"{subject}spec.ingress[0].ports[0]: port 99999 is not in 1-65535",
        "<stdin> Pod blue/web: networks[0].mac: 'zz:00' is not a 6-byte Ethernet or 20-byte "
        "InfiniBand address",
        "3 objects checked, 7 problems",
    ]


def test_the_apis_typed_lists_whose_items_carry_no_kind(tmp_path: Path) -> None:
    pods = {
        "apiVersion": "v1",
        "kind": "PodList",
        "items": [
            {
                "metadata": {
                    "name": "web",
                    "namespace": "blue",
                    "annotations": {"k8s.v1.cni.cncf.io/networks": "x@"},
                }
            }
        ],
    }
    policies = {
        "apiVersion": "k8s.cni.cncf.io/v1beta1",
        "kind": "MultiNetworkPolicyList",
        "items": [
            {
                "metadata": {"name": "p", "namespace": "blue", "uid": "u-1"},
                "spec": {"podSelector": {}},
            }
        ],
    }
    path = tmp_path / "lists.yaml"
    path.write_text(json.dumps(pods) + "\n---\n" + json.dumps(policies) + "\n")

    done = netattach("validate", str(path))

    assert done.rc == 1
    assert done.lines[0].startswith(f"{path} Pod blue/web: networks[0].interface: ")
    assert done.lines[1] == (
        f"{path} MultiNetworkPolicy blue/p: metadata.annotations: '{POLICY_FOR}' is missing or "
        "empty"
    )
    assert done.lines[-1] == "2 objects checked, 2 problems"


def test_a_policy_manifest_without_uid_or_namespace_is_fine(tmp_path: Path) -> None:
    # Neither is missing: kubectl gives the namespace, the API server (or the directory feed,
    # from the policy's name) the uid.
    path = tmp_path / "policy.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            apiVersion: k8s.cni.cncf.io/v1beta1
            kind: MultiNetworkPolicy
            metadata:
              name: allow
              annotations: {{{POLICY_FOR}: net-a}}
            spec:
              podSelector: {{}}
              ingress: [{{}}]
            ---
            apiVersion: k8s.cni.cncf.io/v1beta1
            kind: MultiNetworkPolicy
            metadata:
              name: 7
              annotations: {{{POLICY_FOR}: [net-a]}}
            spec: {{podSelector: {{}}}}
            """
        )
    )

    done = netattach("validate", str(path))

    assert done.rc == 1
    assert done.lines == [
        f"{path} MultiNetworkPolicy #2: metadata.name: must be a string, got 7",
        f"{path} MultiNetworkPolicy #2: metadata.annotations['{POLICY_FOR}']: must be a "
        "string, got ['net-a']",
        "2 objects checked, 2 problems",
    ]


@pytest.mark.parametrize(
    "metadata",
    [
        {"name": 7, "namespace": "blue", "uid": "u", "annotations": {POLICY_FOR: "net-a"}},
        {"name": "p", "namespace": "blue", "uid": "u", "annotations": {POLICY_FOR: 5}},
    ],
)
def test_parse_policy_reports_non_string_metadata_as_invalid(metadata: dict[str, object]) -> None:
    from netattach.cni import errors
    from netattach.policy import model

    policy = {
        "apiVersion": "k8s.cni.cncf.io/v1beta1",
        "kind": "MultiNetworkPolicy",
        "metadata": metadata,
        "spec": {"podSelector": {}},
    }
    with pytest.raises(errors.InvalidNetworkConfigError):
        model.parse_policy(policy)  # type: ignore[arg-type]


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_shipped_examples_directory_validates_without_a_word() -> None:
    done = netattach("validate", str(EXAMPLES))

    assert done.rc == 0, done.lines
    assert not any("warning" in line for line in done.lines), done.lines
    checked = int(done.lines[-1].split()[0])
    assert checked >= len(list(EXAMPLES.glob("policies/*.yaml"))) + 3  # settings, networks...


def test_a_directory_stands_for_the_files_below_it_but_the_feeds_own(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "net.conflist").write_text(
        json.dumps({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "bridge"}]})
    )
    (tmp_path / "status" / "blue").mkdir(parents=True)
    (tmp_path / "status" / "blue" / "web.json").write_text("[]")
    (tmp_path / ".hidden.yaml").write_text("{not yaml")
    (tmp_path / "notes.txt").write_text("{not yaml")

    done = netattach("validate", str(tmp_path))

    assert done.lines == ["1 objects checked, 0 problems"]
    assert done.rc == 0


def test_a_directory_with_nothing_to_check_is_unreadable(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# nothing here")

    done = netattach("validate", str(tmp_path))

    assert done.rc == 2
    assert done.lines == [
        f"{tmp_path}: cannot read: a directory with no .yaml, .yml, .json, .conf or .conflist file",
        "0 objects checked, 0 problems",
    ]
