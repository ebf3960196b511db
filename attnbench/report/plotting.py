"""How the report draws: the Agg canvas, a fixed style and size, deterministic PNG bytes, shared axis and legend
helpers."""

from __future__ import annotations

import io
import math
import sys
from dataclasses import dataclass
from typing import Any

import matplotlib

if "matplotlib.pyplot" not in sys.modules:  # never switch the backend under a caller that already uses pyplot
    matplotlib.use("Agg")  # Figure + the Agg canvas only: no display

import numpy as np  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import (  # noqa: E402
    FixedLocator,
    FuncFormatter,
    LogLocator,
    MaxNLocator,
    NullLocator,
)

from attnbench.core.units import fmt_length  # noqa: E402

DPI = 100
GROUP_FIGSIZE = (13.0, 9.5)  # inches: 1300 x 950 px at DPI
WIDTH_PX = int(GROUP_FIGSIZE[0] * DPI)
# A fixed title height: else matplotlib measures every tick label to place each title.
RC = {"font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 9.5, "axes.titley": 1.01,
      "axes.grid": True, "grid.alpha": 0.3, "font.family": "DejaVu Sans"}


@dataclass
class Chart:
    """One rendered figure: its file name under charts/, what it shows, and the PNG bytes."""

    name: str
    title: str
    png: bytes


def _to_png(fig: Figure) -> bytes:
    # Fixed DPI and no "Software" text chunk: the same data gives byte-identical files.
    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def log2_x(ax: Any, xs: list[int], label: str) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(xs))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_length(int(round(v)))))
    ax.xaxis.set_minor_locator(NullLocator())
    if len(xs) == 1:
        ax.set_xlim(xs[0] / 1.5, xs[0] * 1.5)
    else:
        ax.set_xlim(xs[0] / 1.25, xs[-1] * 1.25)
    ax.set_xlabel(label)


FINE_SUBS = (1.0, 1.1, 1.2, 1.3, 1.4, 1.6, 1.8, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)


def plain_number(value: float, _: Any = None) -> str:
    return "" if value < 0 else f"{value:g}"


def _finish_y(ax: Any, log: bool, levels: int, bottom: float | None = None) -> bool:
    """Scale the y axis to the data and leave an empty band at the bottom for `levels` rows of failure marks;
    returns whether the panel had any data."""
    lows, highs = [], []
    for line in ax.lines:
        if line.get_transform() != ax.transData:
            continue
        ys = np.asarray(line.get_ydata(), dtype=float)
        ys = ys[np.isfinite(ys) & ((ys > 0) if log else np.isfinite(ys))]
        if ys.size:
            lows.append(ys.min())
            highs.append(ys.max())
    for collection in ax.collections:  # IQR bands
        for path in collection.get_paths():
            ys = path.vertices[:, 1]
            ys = ys[np.isfinite(ys) & ((ys > 0) if log else np.isfinite(ys))]
            if ys.size:
                lows.append(ys.min())
                highs.append(ys.max())
    if not lows:
        ax.set_ylim(0, 1)
        ax.set_yticks([])
        return False
    lo, hi = min(lows), max(highs)
    if bottom is not None:
        lo = min(lo, bottom)
    band = 0.0 if levels == 0 else 0.05 + 0.065 * levels
    if log:
        ax.set_yscale("log")
        low, high = math.log10(lo), math.log10(hi)
        span = max(high - low, 0.3)
        high += 0.06 * span
        low -= 0.04 * span
        low = (low - band * high) / (1 - band)
        ax.set_ylim(10**low, 10**high)
        # Ticks at 1-2-5 steps, cheaper to draw than minor ticks.
        decades = high - low
        # Under half a decade (speed-ups of 0.85-1.25x) finer steps, else only one tick would be labelled.
        subs = FINE_SUBS if decades <= 0.5 else (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0) if decades <= 1 \
            else (1.0, 2.0, 5.0) if decades <= 4 else (1.0,)
        # Within a fifth of a decade, evenly spaced ticks (0.95, 1, 1.05).
        ax.yaxis.set_major_locator(MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]) if decades <= 0.2
                                   else LogLocator(subs=subs))
        ax.yaxis.set_major_formatter(FuncFormatter(plain_number))
        ax.yaxis.set_minor_locator(NullLocator())
    else:
        span = max(hi - lo, abs(hi) * 0.1, 1e-9)
        high = hi + 0.08 * span
        low = (lo - band * high) / (1 - band)
        ax.set_ylim(low, high)
        ax.yaxis.set_major_formatter(FuncFormatter(plain_number))
    return True


def empty_note(ax: Any, text: str) -> None:
    ax.text(0.5, 0.55, text, transform=ax.transAxes, ha="center", va="center", fontsize=10, color="#555555")


def figure_legend(fig: Figure, handles: list[Line2D]) -> int:
    """A legend under the panels; returns how many rows it takes."""
    ncol = len(handles) if len(handles) <= 8 else math.ceil(len(handles) / 2)
    fig.legend(handles=handles, loc="lower center", ncol=ncol, frameon=False, bbox_to_anchor=(0.5, 0.005))
    return math.ceil(len(handles) / ncol)


def render_chart(draw: Any, *args: Any) -> bytes:
    """Draw a figure (`draw(*args)`) under the report's style as deterministic PNG bytes."""
    with matplotlib.rc_context(RC):
        return _to_png(draw(*args))
