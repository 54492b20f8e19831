"""Rendering the rule IR to nftables: golden corpus, compactness, UID tags, nft syntax."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from netattach.policy.compile import compile_pod
from netattach.policy.ir import rules_to_json
from netattach.policy.model import parse_policy
from netattach.policy.render import render_table
from tests.unit.policy_fixtures import NAMESPACES, TARGET, numbered_pod, policy

GOLDEN = Path(__file__).parent / "golden" / "policy"
UPDATE = os.environ.get("NETATTACH_UPDATE_GOLDEN") == "1"


PODS = [
    TARGET,
    numbered_pod(1, "ns-a", {"app": "web"}),
    numbered_pod(2, "ns-b", {"app": "web"}, v6=False),
    numbered_pod(3, "ns-b", {"app": "batch"}, ports=[{"name": "pg", "containerPort": 6543}]),
]
CASES: dict[str, dict[str, Any]] = {
    "01-deny-all-ingress": {"podSelector": {}},
    "02-allow-all-ingress": {"podSelector": {}, "ingress": [{}]},
    "03-pods-same-namespace": {
        "podSelector": {"matchLabels": {"app": "db"}},
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}],
    },
    "04-namespace-and-pods": {
        "podSelector": {},
        "ingress": [
            {
                "from": [
                    {
                        "namespaceSelector": {"matchLabels": {"team": "b"}},
                        "podSelector": {
                            "matchExpressions": [
                                {"key": "app", "operator": "In", "values": ["web"]}
                            ]
                        },
                    }
                ]
            }
        ],
    },
    "05-ipblock-excepts": {
        "podSelector": {},
        "ingress": [
            {
                "from": [
                    {"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.1.0/24", "10.0.8.0/21"]}},
                    {"ipBlock": {"cidr": "fd00::/64", "except": ["fd00::/120"]}},
                ]
            }
        ],
    },
    "06-ports-named-range": {
        "podSelector": {},
        "ingress": [
            {
                "from": [{"namespaceSelector": {}}],
                "ports": [
                    {"port": "pg"},
                    {"protocol": "UDP", "port": 1000, "endPort": 2000},
                    {"protocol": "SCTP"},
                ],
            }
        ],
    },
    "07-egress-only": {
        "podSelector": {},
        "policyTypes": ["Egress"],
        "egress": [
            {"to": [{"podSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}}]},
            {"to": [{"namespaceSelector": {}}], "ports": [{"port": "pg"}]},
        ],
    },
    "08-both-directions-notin": {
        "podSelector": {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["x"]}]},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "a"}}}]}],
        "egress": [{"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53}]}],
    },
    "09-other-network-untouched": {"podSelector": {}, "ingress": [{}]},
}
POLICY_FOR = {"09-other-network-untouched": "ns-b/net"}


def _render(case: str) -> tuple[dict[str, Any], str | None]:
    pol = parse_policy(policy(case, CASES[case], pf=POLICY_FOR.get(case, "net")))
    rules = compile_pod(TARGET, NAMESPACES, PODS, [pol])
    return rules_to_json(rules), render_table("ns-a/pod0", rules)


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case: str) -> None:
    ir, nft = _render(case)
    ir_text = json.dumps(ir, indent=2, sort_keys=True) + "\n"
    nft_text = nft if nft is not None else "# no governing policy: nothing rendered\n"
    ir_path, nft_path = GOLDEN / f"{case}.ir.json", GOLDEN / f"{case}.nft"
    if UPDATE:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        ir_path.write_text(ir_text)
        nft_path.write_text(nft_text)
    assert ir_text == ir_path.read_text()
    assert nft_text == nft_path.read_text()
    assert _render(case) == (ir, nft)  # deterministic


def test_no_governing_policy_renders_nothing() -> None:
    assert _render("09-other-network-untouched") == ({}, None)


def _rules(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("\t\t") and " accept" in ln]


@pytest.mark.req("POL-COMPACT")
def test_rule_count_grows_with_peers_plus_ports() -> None:
    def script(n_peers: int, n_ports: int) -> tuple[int, int]:
        pods = [TARGET] + [numbered_pod(i, "ns-a", {"app": "web"}) for i in range(1, n_peers + 1)]
        spec = {
            "podSelector": {"matchLabels": {"app": "db"}},
            "ingress": [
                {
                    "from": [{"podSelector": {"matchLabels": {"app": "web"}}}],
                    "ports": [{"port": 1000 + 2 * k} for k in range(n_ports)],
                }
            ],
        }
        rules = compile_pod(TARGET, NAMESPACES, pods, [parse_policy(policy("p", spec))])
        text = render_table("ns-a/pod0", rules)
        assert text is not None
        return len(_rules(text)), len(text.splitlines())

    small_rules, small_lines = script(2, 2)
    big_rules, big_lines = script(40, 40)
    assert small_rules == big_rules  # rules do not depend on peers or ports at all
    assert big_lines - small_lines < 10  # set elements are on one line each set


@pytest.mark.parametrize("case", sorted(set(CASES) - {"09-other-network-untouched"}))
def test_every_rule_and_set_carries_its_policy_uid(case: str) -> None:
    _, text = _render(case)
    assert text is not None
    uid = f"uid-{case}"
    blocks = re.findall(r"\tset \S+ \{\n(.*?)\n\t\}", text, re.S)
    for block in blocks:
        assert f'comment "policy {uid}"' in block
    for line in text.splitlines():
        if " accept" in line and ("@" in line or line.strip().startswith("accept")):
            assert f'comment "policy {uid}"' in line
        if line.strip().startswith("drop"):
            assert uid in line


def test_nft_accepts_rendered_scripts(tmp_path: Path) -> None:
    nft, ip = shutil.which("nft"), shutil.which("ip")
    if nft is None or ip is None or os.geteuid() != 0:
        pytest.skip("needs root and the nft and ip tools to check scripts with nft -c")
    name = f"na-polchk-{uuid.uuid4().hex[:8]}"
    subprocess.run([ip, "netns", "add", name], check=True)
    try:
        for case in sorted(CASES):
            _, text = _render(case)
            if text is None:
                continue
            path = tmp_path / f"{case}.nft"
            path.write_text(text)
            done = subprocess.run(
                [ip, "netns", "exec", name, nft, "-c", "-f", str(path)],
                capture_output=True,
                text=True,
                check=False,
            )
            assert done.returncode == 0, (case, done.stderr)
    finally:
        subprocess.run([ip, "netns", "delete", name], check=False)
