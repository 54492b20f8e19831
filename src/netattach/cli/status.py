"""`netattach status [NAMESPACE/POD] [-n NS] [--socket P | --config F | --kubeconfig K] [-o FMT]`

A table per pod of its attachments (network, interface, IPs, MAC, default, policy), then its
problems; `-o json` and `-o yaml` print the same as data. Where the pods come from:
`netattach.cli.sources`. The POLICY column says which MultiNetworkPolicies govern the interface
and, from the daemon, whether they are enforced: `applied: ns/p`, `not applied: ns/p`, or
`governed: ns/p` when the source cannot tell; `-` when none governs it.

Besides each pod's own problems, the listing's: two attachments on one network holding the same
address (host-local state lost with a daemon's container, a static address given twice), and,
from the daemon, an address of netattach's IPAM that a container with no record holds. The
daemon's listing ends with the node's pools of netattach's IPAM: blocks, addresses held, free
and waiting out `reuseDelay` (IPAM-NOLEAK).

Exit status: 0 when nothing is wrong, 1 when a pod or the listing has a problem (or the pod
asked for is not there), 2 when the source cannot be read (the daemon unreachable, a kubeconfig
or settings file unusable).
"""

import ipaddress
import json
from collections.abc import Sequence
from typing import TextIO

import yaml

from netattach.cli import cluster_pods, sources
from netattach.daemon import introspect

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_UNREADABLE = 2
OUTPUTS = ("table", "json", "yaml")
_HEADERS = ("NETWORK", "INTERFACE", "IPS", "MAC", "DEFAULT", "POLICY")


class TargetError(ValueError):
    pass


def parse_target(target: str | None, namespace: str | None) -> tuple[str, str]:
    """(namespace, pod) of `NAMESPACE/POD` or `POD` (in `namespace`, else "default")."""
    if target is None:
        return namespace or "", ""
    ns, slash, pod = target.rpartition("/")
    if not slash:
        return namespace or "default", target
    if not ns or not pod or "/" in ns:
        raise TargetError(f"a pod is NAMESPACE/POD or POD, got {target!r}")
    if namespace is not None and namespace != ns:
        raise TargetError(f"pod {target!r} is not in namespace {namespace!r} given by -n")
    return ns, pod


def policy_text(att: introspect.AttachmentReport) -> str:
    if not att.policies:
        return "-"
    names = ",".join(att.policies)
    if att.policy_applied is None:
        return f"governed: {names}"
    return f"{'applied' if att.policy_applied else 'not applied'}: {names}"


def _cell(text: str) -> str:
    # A name from a config file may hold anything: one cell stays one cell on one line.
    return text if text.isprintable() else repr(text)


def _table(rows: Sequence[Sequence[str]], out: TextIO, indent: str = "  ") -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        print((indent + "  ".join(cells)).rstrip(), file=out)


def _print_pod(report: introspect.PodReport, out: TextIO) -> None:
    head = _cell(report.key)
    if report.uid:
        head += f"  uid={_cell(report.uid)}"
    if report.container_id:
        head += f"  container={_cell(report.container_id)}"
    print(head, file=out)
    if report.attachments:
        rows = [list(_HEADERS)] + [
            [
                _cell(att.network),
                _cell(att.interface) + (f" ({_cell(att.device)})" if att.device else ""),
                ",".join(_cell(ip) for ip in att.ips) or "-",
                _cell(att.mac) or "-",
                "yes" if att.default else "no",
                _cell(policy_text(att)),
            ]
            for att in report.attachments
        ]
        _table(rows, out)
    else:
        print("  (no attachments)", file=out)
    for problem in report.problems:
        print(f"  problem: {_cell(problem)}", file=out)


def duplicate_addresses(pods: Sequence[introspect.PodReport]) -> list[str]:
    """A problem for each address that two attachments on one network hold (network status
    names compared: two networks may well reuse a range)."""
    holders: dict[tuple[str, str], list[str]] = {}
    for pod in pods:
        for att in pod.attachments:
            for ip in att.ips:
                try:
                    address = str(ipaddress.ip_interface(ip).ip)
                except ValueError:
                    continue  # not an address: the pod's own check says so
                holders.setdefault((att.network, address), []).append(
                    f"{pod.key} ({att.interface})"
                )
    return [
        f"address {address} on network {network!r} is held by {' and '.join(held)}"
        for (network, address), held in holders.items()
        if len(held) > 1
    ]


def problem_count(listing: cluster_pods.Listing) -> int:
    return len(listing.problems) + sum(len(pod.problems) for pod in listing.pods)


def render(listing: cluster_pods.Listing, source: sources.Source, output: str, out: TextIO) -> None:
    count = problem_count(listing)
    if output in ("json", "yaml"):
        data = {
            "source": source.describe(),
            "pods": [pod.to_raw() for pod in listing.pods],
            "problems": list(listing.problems),
            "problemCount": count,
        }
        if listing.pools:
            data["pools"] = [pool.to_raw() for pool in listing.pools]
        if output == "json":
            print(json.dumps(data, indent=2, ensure_ascii=False), file=out)
        else:
            print(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), end="", file=out)
        return
    for index, pod in enumerate(listing.pods):
        if index:
            print(file=out)
        _print_pod(pod, out)
    if listing.pools:
        if listing.pods:
            print(file=out)
        rows = [["POOL", "BLOCKS", "HELD", "FREE", "WAITING"]] + [
            [_cell(p.pool), ",".join(p.blocks) or "-", str(p.held), str(p.free), str(p.waiting)]
            for p in listing.pools
        ]
        _table(rows, out, indent="")
    for problem in listing.problems:
        print(f"problem: {_cell(problem)}", file=out)
    pods = len(listing.pods)
    print(
        f"{pods} pod{'s' * (pods != 1)}, {count} problem{'s' * (count != 1)} "
        f"(from {source.describe()})",
        file=out,
    )


def run(
    *,
    target: str | None,
    namespace: str | None,
    source: sources.Source,
    output: str,
    stdout: TextIO,
    stderr: TextIO,
    prog: str = "netattach status",
) -> int:
    try:
        ns, pod = parse_target(target, namespace)
        listing = sources.read(source, namespace=ns, name=pod)
    except TargetError as exc:
        print(f"{prog}: {exc}", file=stderr)
        return EXIT_UNREADABLE
    except sources.SourceError as exc:
        print(f"{prog}: {exc}", file=stderr)
        return EXIT_UNREADABLE
    if pod and not listing.pods:
        listing.problems.append(f"pod {ns}/{pod}: not found in {source.describe()}")
    listing.problems.extend(duplicate_addresses(listing.pods))
    render(listing, source, output, stdout)
    return EXIT_PROBLEMS if problem_count(listing) else EXIT_OK
