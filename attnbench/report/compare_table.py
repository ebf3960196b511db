"""compare's table for the terminal: what changed from BASE to NEW (attnbench.report.compare), then the geomeans."""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnbench.report.compare import Comparison

if TYPE_CHECKING:
    from rich.table import Table


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
    for shift, value in zip(comparison.backend_shifts, comparison.geomean_by_backend.values()):
        label, style = (("regression", "bold red") if shift.slower else ("faster", "green")) if shift.changed \
            else ("geomean", "dim")
        table.add_row(Text(label, style=style), Text(shift.backend),
                      Text(f"all {shift.cases} matched ok cases" + (", across the board" if shift.changed else "")),
                      Text(""), Text(""), Text(f"{value:.3f}×", style=style if shift.changed else ""))
    if comparison.pace_slower:
        table.add_row(Text("regression", style="bold red"), Text("every backend"), Text("the pace: all matched cases"),
                      Text(""), Text(""), Text(f"{comparison.pace:.3f}×", style="bold red"))
    notes = [comparison.version_note] if comparison.version_note else []
    if comparison.pace_note:
        notes.append(comparison.pace_note)
    if comparison.throttled_anywhere:
        notes.append(f"{comparison.throttled_anywhere} matched measurement(s) timed on a throttled or shared GPU "
                     "in base or new: never judged a regression or an improvement")
    if notes:
        table.caption = "; ".join(notes)
    return table
