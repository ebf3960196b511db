"""An A/B's summary for people: ab.md and ab.html, written from ab.json's content (attnbench.run.ab, report.ab)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from attnbench.core.interval import CONFIDENCE
from attnbench.core.units import fmt_ms
from attnbench.records.env import RunEnv
from attnbench.stats.ab import AbResult, AbVerdict, GroupVerdict, Paired


def _change(ratio: float) -> str:
    return f"{ratio - 1:+.1%}"


def _span(row: dict[str, Any]) -> str:
    return f"[{_change(row['low'])}, {_change(row['high'])}]"


def paired_words(paired: Paired, threshold: float, confidence: float = CONFIDENCE) -> str:
    """The verdict as a reader's sentence: 'B slower by 15.1% [+13.0%, +17.2%], significant, ...'."""
    change = "slower" if paired.ratio >= 1 else "faster"
    verdict = paired.verdict(threshold, confidence)
    if paired.level < confidence:
        judged = f"not judged: {paired.pairs} pairs reach {paired.level:.0%}, under {confidence:.0%}"
    elif verdict == AbVerdict.UNCHANGED:
        judged = "not significant"
    elif verdict == AbVerdict.WITHIN:
        judged = f"significant, under the {threshold:.0%} threshold"
    else:
        judged = f"significant, beyond the {threshold:.0%} threshold"
    span = _span({"low": paired.low, "high": paired.high})
    return f"B {change} by {abs(paired.ratio - 1):.1%} {span}, {judged}"


def result_dict(result: AbResult) -> dict[str, Any]:
    """ab.json's `result`: the verdicts with their sentences and the regressions named."""
    def group(g: GroupVerdict) -> dict[str, Any]:
        return {**g.to_dict(), "words": paired_words(g.paired, result.threshold, result.confidence)}

    regressions = [g.name for g in result.slowed] + [f"{u.backend} {u.case_id}: {u.b_status}" for u in result.broken]
    return {"threshold": result.threshold, "confidence": result.confidence,
            "overall": group(result.overall) if result.overall else None,
            "backends": [group(g) for g in result.backends],
            "measurements": [m.to_dict() for m in result.measurements],
            "unpaired": [u.to_dict() for u in result.unpaired], "regressions": regressions}


def side_line(label: str, side: dict[str, Any]) -> str:
    env = RunEnv.from_dict(side.get("env") or {})
    extra = ", ".join(f"{k}={v}" for k, v in sorted((side.get("vars") or {}).items()))
    return (f"- **{label}**: `{side['python']}`: torch {env.torch or '?'}, attnbench {env.attnbench or '?'}"
            f" (commit {env.git_commit or '?'}), Python {env.python or '?'}, "
            f"{env.torch_threads or '?'} threads" + (f"; with {extra}" if extra else ""))


def verdict_line(summary: dict[str, Any]) -> str:
    regressions = summary["result"]["regressions"]
    threshold = summary["result"]["threshold"]
    if regressions:
        return f"**B regressed** beyond the {threshold:.0%} threshold and the noise: {', '.join(regressions)} (exit 1)."
    return f"**No regression** of B beyond the {threshold:.0%} threshold and the noise (exit 0)."


def group_rows(result: dict[str, Any]) -> list[list[str]]:
    groups = result["backends"] + ([result["overall"]] if result["overall"] else [])
    return [[g["name"], str(g["measurements"]), str(g["pairs"]), f"{g['ratio']:.3f}", _span(g), g["verdict"],
             g["words"]] for g in groups]


def measurement_rows(result: dict[str, Any]) -> list[list[str]]:
    return [[m["case_id"], m["backend"], fmt_ms(m["a_ms"]), fmt_ms(m["b_ms"]), f"{m['ratio']:.3f}", _span(m),
             str(m["pairs"]), m["verdict"]] for m in result["measurements"]]


# Why a measurement's own verdict does not decide the exit code.
PER_MEASUREMENT_NOTE = ("Each measurement's verdict is its own test at the stated level, so among many a few are "
                        "flagged by chance (about 1 in 32 with 6 pairs); the exit code reads the per-backend and "
                        "overall verdicts above.")
GROUP_HEAD = ["backend", "measurements", "pairs", "B/A", "interval", "verdict", "in words"]
MEASUREMENT_HEAD = ["case", "backend", "A ms", "B ms", "B/A", "interval", "pairs", "verdict"]


def header_lines(summary: dict[str, Any]) -> list[str]:
    result = summary["result"]
    load = summary.get("load") or {}
    return [
        side_line("A", summary["sides"]["A"]),
        side_line("B", summary["sides"]["B"]),
        "",
        f"{summary['rounds']} rounds per measurement and side, interleaved {summary['order']}; each pair's two rounds "
        f"back to back. B/A is the median of the pairs' ln(B/A), its interval the median's distribution-free "
        f"{result['confidence']:.0%} interval (a sign test), both back as ratios; a verdict needs the interval "
        f"to exclude 1 and the change to pass {result['threshold']:.0%} (docs/ab.md).",
        f"Wall {summary['wall_s']:.0f} s; load average {load.get('start', '?')} at the start, "
        f"{load.get('end', '?')} at the end, on {summary['cpu_count']} cores.",
    ]


def to_markdown(summary: dict[str, Any]) -> str:
    """ab.md: the sides, the verdict, the per-backend and per-measurement tables, what was not paired."""
    result = summary["result"]
    lines = [f"# A/B: {summary['suite']} on {summary['device_name']}", "", *header_lines(summary), "",
             verdict_line(summary), "", "## Per backend", "", *_md_table(GROUP_HEAD, group_rows(result)), "",
             "## Per measurement", "", PER_MEASUREMENT_NOTE, "", *_md_table(MEASUREMENT_HEAD, measurement_rows(result))]
    if result["unpaired"]:
        lines += ["", "## Not paired", "", *_md_table(
            ["case", "backend", "A", "B", "reason"],
            [[u["case_id"], u["backend"], u["a_status"], u["b_status"], u["reason"] or ""]
             for u in result["unpaired"]])]
    return "\n".join(lines) + "\n"


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    return [line(head), "|" + "---|" * len(head), *(line(row) for row in rows)]


def to_html(summary: dict[str, Any]) -> str:
    """ab.html: the same content as ab.md, one page, no scripts."""
    result = summary["result"]
    title = f"A/B: {summary['suite']} on {summary['device_name']}"
    parts = [f"<!doctype html><meta charset='utf-8'><title>{html.escape(title)}</title>",
             "<style>body{font:14px sans-serif;margin:2em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}.slower{background:#fdd}"
             ".faster{background:#dfd}</style>", f"<h1>{html.escape(title)}</h1>"]
    parts += [f"<p>{html.escape(line.lstrip('- ').replace('**', ''))}</p>" for line in header_lines(summary) if line]
    parts.append(f"<p><b>{html.escape(verdict_line(summary).replace('**', ''))}</b></p>")
    parts += ["<h2>Per backend</h2>", _html_table(GROUP_HEAD, group_rows(result), 5),
              "<h2>Per measurement</h2>", f"<p>{html.escape(PER_MEASUREMENT_NOTE)}</p>",
              _html_table(MEASUREMENT_HEAD, measurement_rows(result), 7)]
    return "\n".join(parts) + "\n"


def _html_table(head: list[str], rows: list[list[str]], verdict_column: int) -> str:
    cells = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for row in rows:
        cells.append(f"<tr class='{html.escape(row[verdict_column])}'>"
                     + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>")
    return "\n".join(cells + ["</table>"])


def write_summary(directory: Path, summary: dict[str, Any]) -> None:
    """ab.json (everything), ab.md and ab.html (for people) in the A/B's folder."""
    (directory / "ab.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    (directory / "ab.md").write_text(to_markdown(summary), encoding="utf-8")
    (directory / "ab.html").write_text(to_html(summary), encoding="utf-8")
