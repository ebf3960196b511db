"""How a comparison is shown: compare's table for the terminal and its Markdown for a pull request, from what
attnbench.stats.compare judged."""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnbench.core import policy
from attnbench.core.units import md_cell
from attnbench.stats.compare import Comparison, Verdict

if TYPE_CHECKING:
    from rich.table import Table

VERDICT_WORDS = {Verdict.PASSED: "**pass**", Verdict.REGRESSED: "**FAIL**", Verdict.BROKE: "**FAIL**",
                 Verdict.NOT_JUDGED: "**not judged: another machine**"}


def pace_note(c: Comparison) -> str | None:
    """The run's pace in words, and how the ratios are judged."""
    if c.judged is None:
        return None
    j, noise = c.judged, c.pace_noise
    said = (f"NEW ran at {c.pace:.3f}× BASE's times across the board (the median of {len(c.ratios)} matched "
            f"measurements")
    if c.machine:
        said += (f"; the machine's own pace, a reference workload timed through both runs, was "
                 f"{c.machine.value:.3f}×, so the kernels ran at {j.value:.3f}× of it")
    said += (f"; identical runs on {c.device} differ by ±{noise:.1%} (1 s.d., core.policy"
             + (", with the reference's own error" if c.machine else "")
             + f"): {j.departure:.1f} errors from 1)")
    if j.finding and c.unshared:
        said += (": beyond the threshold and the noise, but not shared: " + ", ".join(c.unshared)
                 + (" did" if len(c.unshared) == 1 else " did each") + " not move with it, so no shared "
                 + ("slowdown" if j.value > 1 else "speed-up") + " is claimed; " + ", ".join(c.moved_with_pace)
                 + " moved with it, and every ratio is judged raw")
    elif j.finding:
        said += (": a shared " + ("slowdown" if j.value > 1 else "speed-up") + " beyond the threshold and the "
                 "noise, a finding" + (" that fails the gate" if j.value > 1 else "")
                 + "; every ratio is judged raw")
    elif c.raw:
        said += ": every ratio is judged raw (" + ("--absolute" if not c.relative else
                                                  "another machine" if c.machine_notes else
                                                  "other software") + ")"
    elif c.judged_pace != 1.0:
        said += ": within the noise of one machine with the same software, so each ratio is judged against it"
    return said


def machine_warning(c: Comparison) -> str | None:
    notes = c.machine_notes + c.software_notes
    if not notes:
        return None
    head = "NOT THE SAME MACHINE: " if c.machine_notes else "NOT THE SAME SOFTWARE: "
    tail = (" The gate cannot judge one kernel's change across machines (exit 3 unless something broke)."
            if c.machine_notes else " Every ratio is judged raw: a change of software is a change.")
    return (head + "; ".join(notes[:6]) + (f" (and {len(notes) - 6} more)" if len(notes) > 6 else "")
            + "." + tail)


def version_note(c: Comparison) -> str | None:
    base, new = c.versions
    if base == new:
        return None
    return (f"BASE's records are schema {base}, NEW's {new} (attnbench.records.results): times and statuses "
            "compare; before version 2, bytes_moved left out the score matrix's traffic")


def comparison_table(comparison: Comparison) -> Table:
    """A rich Table for the terminal: regressions, new failures, fixes and improvements, then per-backend geomeans."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"{comparison.new} vs {comparison.base} (threshold {comparison.threshold:.0%})",
                  show_lines=False)
    for column in ("change", "backend", "case", "base", "new", "new/base"):
        table.add_column(column, justify="right" if column in ("base", "new", "new/base") else "left")

    rows = ([("regression", "bold red", m) for m in comparison.regressions]
            + [("new failure", "bold red", m) for m in comparison.new_failures]
            + [("not repeatable", "bold red" if m.new_deterministic else "yellow", m)
               for m in comparison.turned_unrepeatable]
            + [("fixed", "green", m) for m in comparison.fixed]
            + [("faster", "green", m) for m in comparison.improvements]
            + [("noisy", "yellow", m) for m in comparison.noisy]
            + [("throttled", "yellow", m) for m in comparison.throttled])
    for label, style, m in rows:
        # Text() keeps strings from a run literal: no rich markup is interpreted from a backend name or reason.
        table.add_row(Text(label, style=style), Text(m.backend), Text(m.case),
                      Text(m.side("base")), Text(m.side("new")),
                      Text(m.new_repeat if label == "not repeatable"
                           else m.ratio_words(comparison.judged_pace) + m.unjudged_note() if m.ratio is not None
                           else (m.new_reason or "")))
    for shift, value in zip(comparison.backend_shifts, comparison.geomean_by_backend.values(), strict=False):
        label, style = (("regression", "bold red") if shift.slower else ("faster", "green")) if shift.changed \
            else ("geomean", "dim")
        table.add_row(Text(label, style=style), Text(shift.backend),
                      Text(f"all {shift.cases} matched ok cases" + (", across the board" if shift.changed else "")),
                      Text(""), Text(""), Text(f"{value:.3f}×", style=style if shift.changed else ""))
    if comparison.pace_slower:
        table.add_row(Text("regression", style="bold red"), Text("every backend"), Text("the pace: all matched cases"),
                      Text(""), Text(""), Text(f"{comparison.pace:.3f}×", style="bold red"))
    notes = [version_note(comparison)] if version_note(comparison) else []
    if pace_note(comparison):
        notes.append(pace_note(comparison))
    if comparison.throttled_anywhere:
        notes.append(f"{comparison.throttled_anywhere} matched measurement(s) timed on a throttled or shared GPU "
                     "in base or new: never judged a regression or an improvement")
    if notes:
        table.caption = "; ".join(notes)
    return table


def _unjudged_words(comparison: Comparison) -> str:
    return ((f", {len(comparison.noisy)} change(s) not judged: noisy" if comparison.noisy else "")
            + (f", {len(comparison.throttled)} change(s) not judged: throttled GPU" if comparison.throttled else ""))


def _unrepeatable_words(comparison: Comparison) -> str:
    if not comparison.turned_unrepeatable:
        return ""
    asked = (f" ({len(comparison.determinism_broken)} asked for deterministic kernels)"
             if comparison.determinism_broken else "")
    return f", {len(comparison.turned_unrepeatable)} turned non-repeatable{asked}"


def _verdict_line(comparison: Comparison) -> str:
    verdict = VERDICT_WORDS[comparison.verdict]
    pace = "every kernel together slower (the pace), " if comparison.pace_slower else ""
    wide = (f"{len(comparison.backend_regressions)} backend(s) slower across the board, "
            if comparison.backend_regressions else "")
    return (f"{verdict}: {pace}{len(comparison.regressions)} regression(s), {wide}"
            f"{len(comparison.new_failures)} new failure(s), "
            f"{len(comparison.improvements)} improvement(s), {len(comparison.fixed)} fixed"
            + _unjudged_words(comparison) + _unrepeatable_words(comparison) + ".")


def _header_lines(comparison: Comparison) -> list[str]:
    lines = [f"## attnbench compare: {md_cell(comparison.new)} vs {md_cell(comparison.base)}", ""]
    if machine_warning(comparison):
        lines += [f"**{md_cell(machine_warning(comparison))}**", ""]
    if pace_note(comparison):
        lines += [md_cell(pace_note(comparison)) + ".", ""]
    lines.append(f"{len(comparison.matches)} matched measurements ({comparison.only_in_base} only in base, "
                 f"{comparison.only_in_new} only in new); a change is beyond the threshold "
                 f"({comparison.threshold:.0%}) with intervals of the median that do not overlap.")
    lines += ["", _verdict_line(comparison)]
    if comparison.throttled_anywhere:
        lines += ["", f"{comparison.throttled_anywhere} matched measurement(s) were timed on a throttled or shared GPU "
                      "(heat or power slowed it, or another process was on it) in base or new: never judged a "
                      "regression or an improvement."]
    return lines


def _geomean_lines(comparison: Comparison) -> list[str]:
    lines = ["", "| backend | geomean new/base | cases |", "|---|---|---|"]
    counts: dict[str, int] = {}
    for m in comparison.matches:
        if m.ratio is not None:
            counts[m.backend] = counts.get(m.backend, 0) + 1
    for backend, value in comparison.geomean_by_backend.items():
        lines.append(f"| {md_cell(backend)} | {value:.3f}× | {counts[backend]} |")
    return lines


def _change_lines(comparison: Comparison) -> list[str]:
    """Regressions (per backend across the board first), improvements, and the changes not judged."""
    noisy = f"Noisy (samples spread over {policy.percent(policy.NOISE_THRESHOLD)} of the median: not judged)"
    sections = (("Regressions", comparison.regressions), ("Improvements", comparison.improvements),
                (noisy, comparison.noisy),
                ("Throttled GPU (heat, power or another process: not judged)", comparison.throttled))
    lines: list[str] = []
    for title, items in sections:
        wide = comparison.backend_regressions if title == "Regressions" else []
        if items or wide:
            lines += ["", f"### {title}", "", "| backend | case | base ms [interval] | new ms [interval] | new/base |",
                      "|---|---|---|---|---|"]
            lines += [f"| {md_cell(b.backend)} | all {b.cases} matched cases, across the board | | "
                      f"| {b.geomean:.3f}× (geomean{' over the pace' if comparison.judged_pace != 1.0 else ''}) |"
                      for b in wide]
            for m in items:
                note = m.unjudged_note()
                lines.append(f"| {md_cell(m.backend)} | {md_cell(m.case)} | {md_cell(m.side('base'))} "
                             f"| {md_cell(m.side('new'))} | {md_cell(m.ratio_words(comparison.judged_pace))}{note} |")
    return lines


def _unrepeatable_lines(comparison: Comparison) -> list[str]:
    if not comparison.turned_unrepeatable:
        return []
    lines = ["", "### Turned non-repeatable (two calls on the same inputs gave different bits)", "",
             "| backend | case | new: difference between two calls | deterministic asked |", "|---|---|---|---|"]
    for m in comparison.turned_unrepeatable:
        lines.append(f"| {md_cell(m.backend)} | {md_cell(m.case)} | {md_cell(m.new_repeat)} "
                     f"| {'yes: fails' if m.new_deterministic else 'no'} |")
    return lines


def _kernel_change_lines(comparison: Comparison) -> list[str]:
    changed = [f"- {md_cell(m.kernel_change)} ({md_cell(m.case)})" for m in comparison.matches if m.kernel_change]
    if not changed:
        return []
    return ["", "### Kernel changed (a kernel ran in one run's profiled call and not in the other's)", "", *changed]


def _status_lines(comparison: Comparison) -> list[str]:
    lines: list[str] = []
    for title, items in (("New failures", comparison.new_failures), ("Fixed", comparison.fixed)):
        if items:
            lines += ["", f"### {title}", "", "| backend | case | base | new | reason |", "|---|---|---|---|---|"]
            for m in items:
                lines.append(f"| {md_cell(m.backend)} | {md_cell(m.case)} | {m.base_status} | {m.new_status} "
                             f"| {md_cell(m.new_reason or '')} |")
    return lines


def comparison_markdown(comparison: Comparison) -> str:
    """The comparison as Markdown, for a pull request."""
    lines = (_header_lines(comparison) + _geomean_lines(comparison) + _change_lines(comparison)
             + _unrepeatable_lines(comparison) + _kernel_change_lines(comparison) + _status_lines(comparison))
    return "\n".join(lines) + "\n"
