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
    lines = ["", "shim start-up (CNI_COMMAND=VERSION, process start to exit), ms"]
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


def render(result: dict[str, Any]) -> str:
    sections = [header, latency, throughput, memory, shim, policy, footer]
    return "\n".join(line for section in sections for line in section(result))
