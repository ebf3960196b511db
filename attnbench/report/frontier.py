"""Accuracy beside speed (docs/report.md): the accuracy–speed frontier of each case measured in several formats, the
FP8 speed-up over the same kernel family in its original dtype, and the findings when an FP8 kernel is not faster.
A point is a record's median time and its output's relative L2 error on the original inputs
(attnbench.core.case.Case.unquantized).
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field
from typing import Any

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

from attnbench.core.units import fmt_length, fmt_ms
from attnbench.records.record import TIMED, Record, Status, apart
from attnbench.records.shape import CaseShape
from attnbench.records.words import dtype_word, shape_words
from attnbench.report.baseline import usable_time
from attnbench.report.groups import SCALE_WORDS
from attnbench.report.plotting import DPI, GROUP_FIGSIZE, plain_number
from attnbench.report.styles import MISMATCH_COLOR, BackendStyle

FP8 = ("float8_e4m3fn", "float8_e5m2")
MAX_PANELS = 3  # the longest lengths of a group, side by side
TITLE_CHARS = 120  # a title wraps here, as the group charts' do
FORMAT_MARKERS = {"original": "o", "qkv": "s", "kv": "^", "internal": "D"}


def original_dtype(record: Record) -> str:
    """The dtype of a record's original inputs: bf16 under an FP8 dtype, else its own."""
    return "bfloat16" if record.dtype in FP8 else str(record.dtype)


def kind_of(record: Record) -> str:
    """"qkv" (FP8 Q, K, V), "kv" (an FP8 K/V cache), "internal" (the kernel quantizes) or "original"."""
    if record.dtype in FP8:
        return "qkv"
    if record.kv_dtype:
        return "kv"
    return "internal" if record.checked.quantized == "internal" else "original"


def format_of(record: Record) -> str:
    """The format in words: "bf16", "fp8e4m3 per-head", "K/V fp8e4m3 per-tensor", "bf16, INT8 inside"."""
    kind = kind_of(record)
    scale = SCALE_WORDS.get(str(record.quant), "")
    if record.quant == "block":
        scale += f" {record.quant_block}"
    if kind == "qkv":
        return f"{dtype_word(record.dtype)} {scale}"
    if kind == "kv":
        return f"K/V {dtype_word(record.kv_dtype)} {scale}"
    return f"{dtype_word(record.dtype)}, INT8 inside" if kind == "internal" else dtype_word(record.dtype)


def error_vs_original(record: Record) -> float | None:
    """The relative L2 error of the record's output against the reference on the original inputs."""
    checked = record.checked
    metric = checked.error_vs_original or (checked.kernel_error if kind_of(record) in ("original",
                                                                                                "internal") else None)
    value = (metric or {}).get("rel_l2")
    return float(value) if value is not None and math.isfinite(value) else None


def family(backend: str) -> str:
    """A backend's kernel family: its name without "-fp8" (cudnn-fp8 is cudnn's, naive-fp8 naive's)."""
    return backend.removesuffix("-fp8")


@dataclass
class FrontierGroup:
    """One case in every format it was measured in, at each of its lengths."""

    shape: CaseShape  # the original dtype as its dtype, no FP8 format
    records: list[Record] = field(default_factory=list)

    @property
    def lengths(self) -> list[tuple[int, int]]:
        return sorted({(int(r.seq_len), int(r.kv_seq_len)) for r in self.records})

    def at(self, length: tuple[int, int]) -> list[Record]:
        return [r for r in self.records if (int(r.seq_len), int(r.kv_seq_len)) == length]

    def title(self) -> str:
        words = shape_words(self.shape)[1:]  # the dtype is each point's own; the originals' is said last
        return "Accuracy vs speed · " + " · ".join(words) + f" · originals in {dtype_word(self.shape.dtype)}"

    def slug(self) -> str:
        from attnbench.report.groups import CaseGroup

        return CaseGroup(self.shape, "seq_len").slug()


def frontier_groups(records: list[Record]) -> list[FrontierGroup]:
    """The frontier groups with a quantized point (an FP8 format, or a kernel quantizing inside) and another point."""
    buckets: dict[tuple, FrontierGroup] = {}
    for r in records:
        if r.status not in TIMED or usable_time(r, include_mismatch=True) is None \
                or error_vs_original(r) is None:
            continue
        shape = CaseShape.of(r, dtype=original_dtype(r), kv_dtype=None, quant=None, quant_block=None,
                             quant_scale=None)
        key = tuple(str(v) for v in shape.values())
        buckets.setdefault(key, FrontierGroup(shape)).records.append(r)
    return [g for g in buckets.values()
            if any(kind_of(r) != "original" for r in g.records) and len(g.records) > 1]


def speedups(records: list[Record]) -> list[tuple[Record, Record | None, Record | None]]:
    """For each `ok` quantized record: (it, its family's `ok` record in the original format, the fastest one in the
    original format), None where absent."""
    found = []
    for r in records:
        if kind_of(r) == "original" or r.status != Status.OK:
            continue
        same = [o for o in records if kind_of(o) == "original" and o.status == Status.OK
                and (o.seq_len, o.kv_seq_len) == (r.seq_len, r.kv_seq_len)]
        twin = next((o for o in same if family(o.backend) == family(r.backend)), None)
        best = min(same, key=lambda o: float(o.time_ms), default=None)
        found.append((r, twin, best))
    return found


def findings_lines(records: list[Record]) -> list[str]:
    """Per case and length: each quantized kernel's speed over its family in the original dtype, and those not
    faster than the fastest original-dtype kernel."""
    lines = []
    for group in frontier_groups(records):
        for length in group.lengths:
            found = speedups(group.at(length))
            if not found:
                continue
            where = f"{' · '.join(shape_words(group.shape)[1:])} · {length_words(found[0][0])}"
            original = dtype_word(group.shape.dtype)
            ratios: dict[tuple[str, str], list[str]] = {}
            for r, twin, _ in found:
                if twin is not None:
                    ratio = fmt_ratio(float(twin.time_ms) / float(r.time_ms))
                    ratios.setdefault((r.backend, twin.backend), []).append(f"{format_of(r)} {ratio}")
            for (backend, twin_name), parts in ratios.items():
                lines.append(f"FP8 speed-up on {where}: {backend} runs at {', '.join(parts)} the speed of "
                             f"{twin_name} in {original}.")
            best = found[0][2]
            slow = [r for r, _, b in found if b is not None and not faster(r, b)]
            if best is not None and slow:
                shown = "; ".join(f"{r.backend} in {format_of(r)} {fmt_ms(r.time_ms)} ms, error "
                                  f"{error_vs_original(r):.2g}" for r in slow[:SHOWN_SLOW])
                more = f"; … {len(slow) - SHOWN_SLOW} more" if len(slow) > SHOWN_SLOW else ""
                lines.append(f"Not faster than {best.backend} in {original} ({fmt_ms(best.time_ms)} ms, error "
                             f"{error_vs_original(best):.2g} against the original inputs) on {where}: {shown}{more}.")
    return lines


SHOWN_SLOW = 6


def faster(r: Record, other: Record) -> bool:
    """Whether `r` is measurably faster than `other`: a lower median, and intervals apart where both have one."""
    if float(r.time_ms) >= float(other.time_ms):
        return False
    a, b = r.interval, other.interval
    return a is None or b is None or apart(a, b)


def length_words(record: Record) -> str:
    if record.seq_len == record.kv_seq_len:
        return f"seq {fmt_length(int(record.seq_len))}"
    return f"q {fmt_length(int(record.seq_len))} / kv {fmt_length(int(record.kv_seq_len))}"


def pareto(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other is both faster and more accurate than, by time."""
    front: list[tuple[float, float]] = []
    for t, e in sorted(points):
        if not front or e < front[-1][1]:
            front.append((t, e))
    return front


def frontier_chart(group: FrontierGroup, styles: dict[str, BackendStyle]) -> Figure:
    """One panel per length (the longest MAX_PANELS): each backend and format at (median time, relative L2 error),
    both log; the frontier as a step line."""
    lengths = group.lengths[-MAX_PANELS:]
    fig = Figure(figsize=(max(GROUP_FIGSIZE[0], 6.2 * len(lengths) + 0.8), 6.8), dpi=DPI)
    axes = fig.subplots(1, len(lengths), squeeze=False)[0]
    members = {length: sorted(group.at(length), key=lambda r: float(r.time_ms)) for length in lengths}
    everyone = [r for rs in members.values() for r in rs]
    backends = sorted({r.backend for r in everyone})
    kinds = {kind_of(r) for r in everyone}
    hollow = any(r.noisy or r.throttled for r in everyone)
    drawn_front = False
    handles = [Line2D([], [], color=styles[b].color, marker="o", linestyle="none", markersize=9, label=b)
               for b in backends]
    handles += [Line2D([], [], color="#999999", marker=FORMAT_MARKERS[k], linestyle="none", markersize=9,
                       markeredgecolor="black", label=FORMAT_LABELS[k]) for k in FORMAT_MARKERS if k in kinds]
    title = textwrap.wrap(group.title(), TITLE_CHARS)
    fig.suptitle("\n".join(title), fontsize=13, fontweight="bold", y=0.985, va="top")
    for ax, length in zip(axes, lengths, strict=False):
        points = []
        for r in members[length]:
            x, y = float(r.time_ms), float(error_vs_original(r) or 0)
            style = styles[r.backend]
            open_face = r.noisy or bool(r.throttled)
            ax.plot([x], [y], marker=FORMAT_MARKERS[kind_of(r)], markersize=10, linestyle="none", zorder=4,
                    color=style.color, markerfacecolor="white" if open_face else style.color,
                    markeredgecolor=style.color if open_face else "black", markeredgewidth=1.6 if open_face else 0.6)
            if r.status == Status.MISMATCH:
                ax.plot([x], [y], marker="o", markersize=18, markerfacecolor="none", markeredgecolor=MISMATCH_COLOR,
                        markeredgewidth=2.0, linestyle="none", zorder=5)
            points.append((x, y, r))
        front = pareto([(x, y) for x, y, _ in points])
        if len(front) > 1:
            xs, ys = zip(*front, strict=False)
            ax.step(xs, ys, where="post", color="#57606a", linewidth=1.2, linestyle="--", zorder=2)
            drawn_front = True
        _pad_log(ax, [p[0] for p in points], right=4.0)
        _pad_log(ax, [p[1] for p in points], axis="y")
        ax.set_title(length_words(members[length][0]) if members[length] else "")
        ax.set_xlabel("median time per call (ms, log)")
        ax.set_ylabel("relative L2 error vs the original inputs (log)")
    if hollow:
        handles.append(Line2D([], [], color="#555555", marker="o", markerfacecolor="white", linestyle="none",
                              markersize=8, label="hollow: noisy or throttled timing"))
    if any(r.status == Status.MISMATCH for r in everyone):
        handles.append(Line2D([], [], marker="o", markersize=12, markerfacecolor="none", linestyle="none",
                              markeredgecolor=MISMATCH_COLOR, markeredgewidth=2.0, label="mismatch"))
    if drawn_front:
        handles.append(Line2D([], [], color="#57606a", linestyle="--",
                              label="frontier (none faster and more accurate)"))
    ncol = len(handles) if len(handles) <= 6 else math.ceil(len(handles) / 2)
    fig.legend(handles=handles, loc="lower center", ncol=ncol, frameon=False, bbox_to_anchor=(0.5, 0.005))
    rows = math.ceil(len(handles) / ncol)
    if any(kind_of(r) != "original" for r in everyone):
        fig.text(0.5, 0.955 - 0.035 * len(title), "Each point: a backend in a format. \"N× name\" after a quantized "
                 "one: its speed over that kernel family in the original dtype (N > 1: faster).", ha="center",
                 va="top", fontsize=9, color="#57606a")
    top = 0.9 - 0.035 * len(title) - (0.03 if any(kind_of(r) != "original" for r in everyone) else 0.0)
    fig.subplots_adjust(left=0.07, right=0.98, top=top, bottom=0.12 + 0.045 * rows, wspace=0.28)
    for ax, length in zip(axes, lengths, strict=False):
        _place_labels(fig, ax, [(float(r.time_ms), float(error_vs_original(r) or 0), label_of(r, members[length]))
                                for r in members[length]])
    return fig


def label_of(record: Record, same_length: list[Record]) -> str:
    """"backend" over "format", and for a quantized kernel its speed against its own family in the original dtype."""
    text = f"{record.backend}\n{format_of(record)}"
    twin = next((o for o in same_length if kind_of(o) == "original" and o.status == Status.OK
                 and family(o.backend) == family(record.backend)), None)
    if kind_of(record) != "original" and twin is not None and record.status == Status.OK:
        text += f", {fmt_ratio(float(twin.time_ms) / float(record.time_ms))} {twin.backend}"
    return text


LABEL_PT = 8.0


def fmt_ratio(ratio: float) -> str:
    """2.6×, 15×, 110×: two significant figures without an exponent."""
    return f"{ratio:.2g}×" if ratio < 100 else f"{ratio:.0f}×"


def _place_labels(fig: Figure, ax: Any, items: list[tuple[float, float, str]]) -> None:
    """Each point's label to its right, moved past labels already placed, with a line back to its point."""
    box = ax.get_position()
    width_in, height_in = fig.get_figwidth() * box.width, fig.get_figheight() * box.height
    (x0, x1), (y0, y1) = (math.log10(v) for v in ax.get_xlim()), (math.log10(v) for v in ax.get_ylim())
    def fractions(x: float, y: float) -> tuple[float, float]:
        return (math.log10(x) - x0) / (x1 - x0), (math.log10(y) - y0) / (y1 - y0)

    mark_w, mark_h = 8 / 72 / width_in, 8 / 72 / height_in  # every marker is an obstacle too
    placed = [(fx - mark_w, fy + mark_h, 2 * mark_w, 2 * mark_h)
              for fx, fy in (fractions(x, y) for x, y, _ in items if x > 0 and y > 0)]
    for x, y, text in sorted(items, key=lambda item: -item[1]):
        if x <= 0 or y <= 0:
            continue
        fx, fy = fractions(x, y)
        lines = text.split("\n")
        h = len(lines) * LABEL_PT * 1.25 / 72 / height_in
        w = max(len(line) for line in lines) * LABEL_PT * 0.58 / 72 / width_in
        left = fx + 12 / 72 / width_in
        top = fy + h / 2
        for _ in range(60):
            clash = [p for p in placed
                     if left < p[0] + p[2] and p[0] < left + w and top > p[1] - p[3] and top - h < p[1]
                     and not (abs(p[0] + p[2] / 2 - fx) < 1e-9 and abs(p[1] - p[3] / 2 - fy) < 1e-9)]
            if not clash:
                break
            top = min(p[1] - p[3] for p in clash) - 0.004
        placed.append((left, top, w, h))
        moved = abs(top - (fy + h / 2)) > 1e-6
        ax.annotate(text, (x, y), xytext=(left, top), textcoords="axes fraction", fontsize=LABEL_PT, va="top",
                    ha="left", color="#24292f", zorder=6, annotation_clip=False,
                    arrowprops=dict(arrowstyle="-", color="#8c959f", linewidth=0.6, shrinkA=0, shrinkB=4)
                    if moved else None)


FORMAT_LABELS = {"original": "original dtype", "qkv": "FP8 Q, K, V", "kv": "FP8 K/V cache",
                 "internal": "quantized inside the kernel"}


def _pad_log(ax: Any, values: list[float], axis: str = "x", right: float = 1.6) -> None:
    """A log axis spanning the values with room around them, ticked at 1-2-5 steps with plain numbers."""
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    values = [v for v in values if v > 0]
    if not values:
        return
    lo, hi = min(values), max(values)
    span = max(math.log10(hi) - math.log10(lo), 0.5)
    low, high = 10 ** (math.log10(lo) - 0.15 * span), 10 ** (math.log10(hi) + 0.15 * span)
    (ax.set_xlim if axis == "x" else ax.set_ylim)(low, high * (right if axis == "x" else 1.0))
    target = ax.xaxis if axis == "x" else ax.yaxis
    decades = math.log10(high * (right if axis == "x" else 1.0) / low)
    target.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0) if decades <= 4 else (1.0,)))
    target.set_major_formatter(FuncFormatter(plain_number))
    target.set_minor_locator(NullLocator())
