"""The energy chart: joules per token against sequence length, from the records' `extra.joules_per_token`
(attnbench.run.sustain's loop)."""

from __future__ import annotations

import math

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from attnbench.records.record import Record, Status
from attnbench.report.groups import CaseGroup
from attnbench.report.plotting import DPI, GROUP_FIGSIZE, empty_note, figure_legend, log2_x
from attnbench.report.styles import BackendStyle

MAX_PANELS = 6  # the case groups with the most measured points


def energy_records(records: list[Record]) -> list[Record]:
    """The `ok` records whose loop gave an energy per token."""
    return [r for r in records if r.status == Status.OK and r.energy.joules_per_token]


def energy_chart(groups: list[CaseGroup], styles: dict[str, BackendStyle]) -> Figure:
    """Per case group, mJ per token (log) against sequence length (log2), one line per backend; a hollow point where
    the loop ran throttled."""
    measured = [(g, energy_records(g.records)) for g in groups]
    measured = sorted([(g, rs) for g, rs in measured if rs], key=lambda item: -len(item[1]))[:MAX_PANELS]
    columns = 2 if len(measured) > 1 else 1
    rows = max(1, math.ceil(len(measured) / columns))
    fig = Figure(figsize=(GROUP_FIGSIZE[0], 1.4 + 3.6 * rows), dpi=DPI)
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    seen: dict[str, BackendStyle] = {}
    for ax, (group, rs) in zip(axes, measured, strict=False):
        field = group.x_field
        lengths = sorted({int(getattr(r, field)) for r in rs})
        for backend in sorted({r.backend for r in rs}):
            mine = sorted((r for r in rs if r.backend == backend), key=lambda r: getattr(r, field))
            style = styles[backend]
            seen[backend] = style
            xs = [int(getattr(r, field)) for r in mine]
            ys = [float(r.energy.joules_per_token) * 1e3 for r in mine]
            ax.plot(xs, ys, color=style.color, linewidth=1.6)
            for x, y, r in zip(xs, ys, mine, strict=False):
                hollow = bool(r.energy.energy_throttled) or bool(r.throttled)
                ax.plot([x], [y], marker=style.marker, color=style.color, linestyle="none", markersize=7,
                        markerfacecolor="white" if hollow else style.color)
        log2_x(ax, lengths, "KV length" if field == "kv_seq_len" else "sequence length")
        ax.set_yscale("log")
        ax.set_ylabel("mJ per token (log)")
        ax.set_title(group.title(), fontsize=10)
    for ax in axes[len(measured):]:
        ax.set_axis_off()
    if not measured:
        axes[0].set_axis_on()
        empty_note(axes[0], "no record carries an energy per token")
    handles = [Line2D([], [], color=s.color, marker=s.marker, label=name)
               for name, s in seen.items()]
    legend_rows = figure_legend(fig, handles) if handles else 0
    fig.suptitle("Energy per token (read around the loop before the samples; hollow: throttled during it)",
                 fontsize=13, fontweight="bold")
    height = fig.get_figheight()
    fig.subplots_adjust(left=0.08, right=0.98, top=1 - 0.7 / height, bottom=(0.75 + 0.3 * legend_rows) / height,
                        hspace=0.55, wspace=0.2)
    return fig
