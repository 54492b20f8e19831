"""The printed table of a benchmark result (the JSON that `bench.run` returns)."""

from __future__ import annotations

from typing import Any


def _mib(kib: float) -> str:
    return f"{kib / 1024:.1f}"


def header(result: dict[str, Any]) -> list[str]:
    m, g = result["machine"], result["git"]
    dirty = " (+ uncommitted changes)" if g["dirty"] else ""
    return [
        f"netattach benchmark {result['date']}, commit {g['commit'][:12]}{dirty}",
        f"{m['cpus']} CPUs ({m['cpu']}), {_mib(m['memory_kib'])} MiB, kernel {m['kernel']}, "
        f"Python {m['python']}, CNI plugins {m['cni_plugins']}, state on {m['work_filesystem']}",
        f"thick runs the shim {result['shim']['used']}",
    ]


def latency(result: dict[str, Any]) -> list[str]:
    runs = result["options"]["runs"]
    lines = [
        "",
        f"pod ADD/DEL latency, ms ({runs} runs each, contenders alternated run by run; "
        "a pod = the default network + N attachments of the kind;",
        " +ms = contender p50 - floor p50, x = contender p50 / floor p50; "
        f"p99 of {runs} samples is close to their maximum)",
        f"{'kind':8}{'N':>3} {'contender':11}{'ADD p50':>9}{'ADD p99':>9}{'DEL p50':>9}"
        f"{'DEL p99':>9}{'ADD +ms':>9}{'ADD x':>7}{'DEL +ms':>9}{'DEL x':>7}",
    ]
    for kind, by_count in result["latency"].items():
        for count, by_who in by_count.items():
            for who, ops in by_who.items():
                add, dele = ops["add"], ops["del"]
                row = (
                    f"{kind:8}{count:>3} {who:11}{add['p50']:9.1f}{add['p99']:9.1f}"
                    f"{dele['p50']:9.1f}{dele['p99']:9.1f}"
                )
                extra = result["overhead"][kind][count].get(who)
                if extra is not None:
                    row += (
                        f"{extra['add_p50_ms']:9.1f}{extra['add_p50_ratio']:7.2f}"
                        f"{extra['del_p50_ms']:9.1f}{extra['del_p50_ratio']:7.2f}"
                    )
                lines.append(row)
    return lines


def throughput(result: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "throughput: N pods (default + 2 bridge attachments) ADDed at once, then DELed at once "
        "(maxConcurrentDelegates: default; the floor as bounded)",
        f"{'N':>5} {'contender':11}{'ADD pods/s':>11}{'DEL pods/s':>11}{'ADD s':>8}{'DEL s':>8}"
        f"{'ADD x':>7}{'DEL x':>7}",
    ]
    failed: list[str] = []
    for size, by_who in result["throughput"].items():
        floor = by_who.get("floor")
        for who, r in by_who.items():
            row = (
                f"{size:>5} {who:11}{r['add_pods_per_s']:11.1f}{r['del_pods_per_s']:11.1f}"
                f"{r['add_ms'] / 1e3:8.2f}{r['del_ms'] / 1e3:8.2f}"
            )
            if floor is not None and who != "floor":
                row += f"{r['add_ms'] / floor['add_ms']:7.2f}{r['del_ms'] / floor['del_ms']:7.2f}"
            for op in ("add", "del"):
                if r[f"{op}_ok"] < r["pods"]:
                    row += f"  {op.upper()} failed {r['pods'] - r[f'{op}_ok']}!"
                    failed.append(f"  {who} {op.upper()} x{size}: {r[f'{op}_first_failure']}")
            lines.append(row)
    if failed:
        lines.append(" ! pods/s count successes only; failed DELs were DELed again one by one;")
        lines.append("   first failure of each:")
        lines += [line[:300] for line in failed]
    return lines


def memory(result: dict[str, Any]) -> list[str]:
    lines = ["", "daemon memory, MiB"]
    started = result["bench_daemons"]["rss_after_start_kib"]
    largest = max(result["throughput"], key=int)
    for who, rss in started.items():
        burst = result["throughput"][largest].get(who, {}).get("memory_kib")
        line = f"  {who:11} RSS after start {_mib(rss['VmRSS'])}"
        if burst:
            line += (
                f"; {largest}-pod burst: RSS before {_mib(burst['rss_before'])}, peak "
                f"{_mib(burst['peak_hwm'])} (VmHWM; polled {_mib(burst['peak_polled'])}), "
                f"after {_mib(burst['rss_after'])}"
            )
        lines.append(line)
    mem = result["memory"]
    idle, loaded = mem["idle"], mem["loaded"]
    lines += [
        f"  Kubernetes feed, idle: RSS {_mib(idle['rss_kib'])} (synced {idle['sync_s']:.2f} s)",
        f"  with {mem['pods']} pods (~{mem['pod_bytes_avg']} B each) + {mem['nads']} NADs "
        f"cached: RSS {_mib(loaded['rss_kib'])}, peak {_mib(loaded['hwm_kib'])}, "
        f"+{_mib(mem['delta_rss_kib'])} = {mem['per_object_bytes']} B per object "
        f"(synced {loaded['sync_s']:.2f} s)",
    ]
    return lines


def shim(result: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "start-up (CNI_COMMAND=VERSION, posix_spawn to exit): the shim's forms, netattach-thin,"
        " and the bridge plugin for scale, ms",
    ]
    for form, s in result["shim_startup"].items():
        lines.append(
            f"  {form:8} p50 {s['p50']:6.1f}  min {s['min']:6.1f}  p90 {s['p90']:6.1f}  "
            f"(n={int(s['n'])})"
        )
    return lines


def policy(result: dict[str, Any]) -> list[str]:
    p = result["policy"]
    return [
        "",
        f"policy: {p['policies']} MultiNetworkPolicies over {p['pods']} pods "
        f"({p['namespaces']} namespaces), median of {p['repeats']}",
        f"  parse {p['parse_ms']:.0f} ms + compile {p['compile_ms']:.0f} ms + render "
        f"{p['render_ms']:.0f} ms = {p['total_ms']:.0f} ms",
        f"  {p['pods_with_table']} pod tables, {p['governed_interfaces']} governed interfaces: "
        f"{p['rules']} rules ({p['allow_rules']} allow), {p['sets']} sets, "
        f"{p['set_elements']} set elements, {p['nft_bytes'] / 1e6:.1f} MB of nft text",
        f"  per-peer-per-port translation (kuryr) of the same input: "
        f"{p['per_peer_per_port_rules']} rules = {p['rule_ratio']:.1f} x ours",
    ]


def side_by_side_part(part: dict[str, Any]) -> list[str]:
    """`bench.side_by_side`'s figures: p50/p90 per pod shape, and p50 as a multiple of the
    baseline's (Multus thick, or netattach thick when Multus did not run)."""
    base = part["baseline"]
    lines = [
        "",
        f"side by side on a real API server ({part['server_version']}; {part['control_plane']}),"
        f" {part['kind']} networks, {part['runs']} rounds, ms; x = p50 / {base}'s p50",
        f"  {'networks':12}{'contender':14}{'ADD p50':>9}{'p90':>8}{'DEL p50':>10}{'p90':>8}"
        f"{'ADD x':>8}{'DEL x':>8}",
    ]
    for count, shape in part["pods"].items():
        label = "default" if count == "0" else f"default + {count}"
        for who, ops in shape["summary"].items():
            ratio = shape["ratio_to_baseline"][who]
            lines.append(
                f"  {label:12}{who:14}{ops['add']['p50']:9.1f}{ops['add']['p90']:8.1f}"
                f"{ops['del']['p50']:10.1f}{ops['del']['p90']:8.1f}"
                f"{ratio['add_p50']:8.2f}{ratio['del_p50']:8.2f}"
            )
            label = ""
    lines += [f"  note: {note}" for note in part["notes"]]
    lines += [f"  leak: {leak}" for leak in part["leaks"]]
    return lines


def side_by_side(result: dict[str, Any]) -> list[str]:
    part = result.get("side_by_side")
    return side_by_side_part(part) if part is not None else []


def footer(result: dict[str, Any]) -> list[str]:
    lines = [""]
    lines += [f"note: {note}" for note in result["notes"]]
    cleanup = result["cleanup"]
    if cleanup["clean"]:
        lines.append("cleanup: every namespace, link, allocation, record and process removed")
    else:
        lines.append("cleanup: NOT CLEAN")
        lines += [f"  leak: {item}" for item in cleanup["leaks"]]
        lines += [f"  left: {item}" for item in cleanup["leftovers"]]
        lines += [f"  undo failed: {item}" for item in cleanup["undo_failures"]]
    lines.append(f"took {result['duration_s']:.0f} s")
    return lines


# Issue 12's targets, "Faster than Multus on every pod" (ms over the floor unless said).
ADD_TARGETS = {"0": 8.0, "2": 10.0, "7": 16.0}
DEL_TARGETS = {"2": 10.0}
SHIM_STARTUP_TARGET = 2.0
THIN_ADD_TARGET = 40.0
THIN_VERSION_TARGET = 20.0
BURST_TARGET = 0.8  # thick pods/s as a share of the floor's


def _verdict(value: float, target: float, *, at_least: bool = False) -> str:
    met = value >= target if at_least else value <= target
    return "met" if met else "NOT met"


def targets(result: dict[str, Any]) -> list[str]:
    """Each figure of issue 12 beside its target, from this run (bridge pods; both feeds)."""
    lines = ["", "targets (issue 12; bridge pods, p50 over the floor; both feeds of thick mode)"]
    overhead = result["overhead"].get("bridge", {})
    for op, table in (("ADD", ADD_TARGETS), ("DEL", DEL_TARGETS)):
        for count, target in table.items():
            for who in ("thick-dir", "thick-kube"):
                extra = overhead.get(count, {}).get(who)
                if extra is None:
                    continue
                value = extra[f"{op.lower()}_p50_ms"]
                lines.append(
                    f"  {who:10} {op} default + {count:<2} {value:+7.1f} ms   target <= "
                    f"+{target:g}   {_verdict(value, target)}"
                )
    thin = overhead.get("2", {}).get("thin")
    if thin is not None:
        value = thin["add_p50_ms"]
        lines.append(
            f"  {'thin':10} ADD default + 2  {value:+7.1f} ms   target <= +{THIN_ADD_TARGET:g}"
            f"   {_verdict(value, THIN_ADD_TARGET)}"
        )
    startup = result["shim_startup"]
    for form, target in (("native", SHIM_STARTUP_TARGET), ("thin", THIN_VERSION_TARGET)):
        if form in startup:
            value = startup[form]["p50"]
            lines.append(
                f"  {form:10} VERSION start-up {value:7.1f} ms   target <= {target:g}"
                f"     {_verdict(value, target)}"
            )
    largest = max(result["throughput"], key=int)
    burst = result["throughput"][largest]
    for who in ("thick-dir", "thick-kube"):
        if who in burst and "floor" in burst:
            share = burst[who]["add_pods_per_s"] / burst["floor"]["add_pods_per_s"]
            lines.append(
                f"  {who:10} {largest}-pod burst ADD {share:5.2f} x the floor's pods/s   target >= "
                f"{BURST_TARGET:g}   {_verdict(share, BURST_TARGET, at_least=True)}"
            )
    return lines


def render(result: dict[str, Any]) -> str:
    sections = [header, latency, throughput, memory, shim, policy, side_by_side, targets, footer]
    return "\n".join(line for section in sections for line in section(result))
