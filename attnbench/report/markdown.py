"""summary.md: the findings and one table per case group, to paste into a pull request."""

from __future__ import annotations

from attnbench.core import policy
from attnbench.core.units import fmt_bytes, fmt_float, fmt_ms, fmt_ratio, md_cell
from attnbench.records.env import RunEnv
from attnbench.records.record import Record, Status
from attnbench.report.baseline import group_speedups
from attnbench.report.findings import Findings
from attnbench.report.groups import CaseGroup
from attnbench.report.lead import GroupLead
from attnbench.report.rows import interval_text, median_text, status_text

TABLE_HEADER = ("backend", "{x}", "status", "median ms [interval]", "TFLOP/s", "peak memory", "speed-up", "note")


def _row(record: Record, x: int, speedup: float | None) -> list[str]:
    time = ""
    if record.time_ms is not None:
        time = median_text(record)
        if interval_text(record):
            time += f" [{interval_text(record)}]"
        elif record.time_ms_iqr is not None:
            time += f" (IQR {fmt_ms(record.time_ms_iqr)})"
    memory = fmt_bytes(record.peak_memory_bytes) if record.peak_memory_bytes is not None else ""
    tflops = fmt_float(record.tflops) if record.tflops is not None else ""
    return [
        record.backend, str(x), f"**{status_text(record)}**" if record.status != Status.OK else status_text(record),
        time, tflops, memory,
        fmt_ratio(speedup) if speedup is not None else "", str(record.reason or ""),
    ]


def group_table(group: CaseGroup, baseline: str | None) -> list[str]:
    """The Markdown lines of one group's table: one row per backend × length, failures included; backends skipped at
    every length are named once under it."""
    speedups = group_speedups(group, baseline)
    never = group.skipped_everywhere()
    header = [h.format(x="KV seq" if group.x_field == "kv_seq_len" else "seq") for h in TABLE_HEADER]
    if baseline:
        header[6] = f"× vs {baseline}"
    lines = ["| " + " | ".join(md_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    if set(never) == set(group.backends):
        lines = ["No backend ran at any length here."]
    for (backend, x), record in sorted(group.by_backend_x().items()):
        if backend in never:
            continue
        cells = _row(record, x, speedups.get((backend, x)))
        lines.append("| " + " | ".join(md_cell(c) if i != 2 else c for i, c in enumerate(cells)) + " |")
    if never:
        lines += ["", "Skipped at every length:", ""]
        lines += [f"- {md_cell(backend)}: {md_cell(' / '.join(reasons))}" for backend, reasons in never.items()]
    return lines


def lead_lines(leads: list[GroupLead]) -> list[str]:
    """Each group's answer (report.lead) as Markdown lines."""
    lines = ["**Fastest clean backend per case group**", ""]
    for lead in leads:
        words = "; ".join(line.text for line in lead.lines)
        lines.append(f"- {md_cell(lead.group.title())}: {md_cell(words)}.")
        if lead.unranked:  # its own line: a line naming it never says fastest
            lines.append(f"  - faster but never ranked: {md_cell('; '.join(lead.unranked))}.")
    return lines + [""]


def render_markdown(env: RunEnv, groups: list[CaseGroup], findings: Findings, baseline: str | None,
                    chart_notes: list[str], leads: list[GroupLead] | None = None) -> str:
    """The summary as Markdown text."""
    where = env.device_name or (", ".join(str(g.get("name")) for g in env.gpus or []) or env.cpu)
    lines = [f"## attnbench: {md_cell(env.suite_name or 'results')}", ""]
    facts = [f"device: {where}" if where else "", f"torch {env.torch}" if env.torch else "",
             f"commit {str(env.git_commit)[:12]}" if env.git_commit else "",
             str(env.timestamp or "")]
    facts_line = " · ".join(md_cell(f) for f in facts if f)
    if facts_line:
        lines += [facts_line, ""]
    counts = ", ".join(f"{n} {s}" for s, n in sorted(findings.counts.items()))
    lines += [f"{sum(findings.counts.values())} records: {counts}. Times are medians in ms with their "
              f"{policy.percent(policy.CONFIDENCE)} interval in brackets ({policy.noisy_words()}; ! one timed on a "
              "throttled or shared GPU). ≠ after a status: two calls on the same inputs gave different bits.", ""]
    lines += [findings.noisy, ""] if findings.noisy else []
    lines += ["### Findings", ""] + lead_lines(leads or [])
    lines += ["**Errors**", ""]
    for failure in findings.failures:
        if failure.status == Status.IMPLAUSIBLE:
            lines.append(f"- **{failure.status}** {md_cell(failure.backend)}: {md_cell(failure.reason)} "
                         f"({md_cell(failure.cases_text)})")
    for cause in findings.errors:
        lines.append(f"- **{cause.status}** ×{cause.count} {md_cell(', '.join(cause.backends))}: "
                     f"{md_cell(cause.reason)} ({md_cell(cause.cases_text)})")
    if not findings.failures:
        lines.append("- No mismatches and no errors.")
    skips = [f"**skipped** ×{c.count} {', '.join(c.backends)}: {c.reason} ({c.cases_text})" for c in findings.skips]
    other = (findings.roofs + findings.speedup + findings.memory + findings.packing + findings.quantized
             + findings.noise + findings.dtype)
    for title, items in (("Repeatability", findings.repeat), ("Overhead", findings.kernels), ("Skips", skips),
                         ("Other findings", other)):
        if items:
            lines += ["", f"<details><summary>{title} ({len(items)})</summary>", ""]
            lines += [f"- {md_cell(line)}" for line in items] + ["", "</details>"]
    lines.append("")
    lines += [f"- {md_cell(note)}" for note in chart_notes]
    for group in groups:
        lines += ["", f"### {md_cell(group.title())}", ""]
        lines += group_table(group, baseline)
    return "\n".join(lines) + "\n"
