"""The report's charts, drawn with matplotlib's Agg canvas to PNG bytes that are identical on every render."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import NullFormatter
from matplotlib.transforms import blended_transform_factory

from attnbench.core.peaks import peak_tflops_for
from attnbench.core.units import MIB, bytes_unit, throughput_unit
from attnbench.records.record import TIMED, Record, Status
from attnbench.records.words import dtype_word
from attnbench.report.baseline import group_speedups
from attnbench.report.groups import CaseGroup, KvHeadsFamily, kv_cache_bytes
from attnbench.report.plotting import (
    DPI,
    GROUP_FIGSIZE,
    _finish_y,
    empty_note,
    figure_legend,
    log2_x,
)
from attnbench.report.styles import MISMATCH_COLOR, STATUS_LABELS, BackendStyle
from attnbench.stats.bands import chart_band

# A group chart's title and skip note: characters a line, and a line's share of the figure's height.
TITLE_CHARS, TITLE_LINE = 120, 0.03
NOTE_CHARS, NOTE_LINE = 200, 0.018
MAX_KV_FAMILIES = 8  # rows of the MQA/GQA figure; more would make one image taller than a screen can use
# Drawn as an X: no time, or (implausible) one beyond the GPU's datasheet, which is no measurement.
FAILED = ("oom", "error", "timeout", "skipped", "implausible")


def _mark_failures(ax: Any, failures: list[tuple[int, str, str]], styles: dict[str, BackendStyle]) -> None:
    """Draw each failed (x, backend, status) as an X at the bottom of the panel with the status beside it."""
    transform = blended_transform_factory(ax.transData, ax.transAxes)
    slot: dict[int, int] = {}
    for x, backend, status in failures:
        level = slot.get(x, 0)
        slot[x] = level + 1
        y = 0.04 + 0.065 * level
        style = styles[backend]
        ax.plot([x], [y], marker="X", markersize=9, color=style.color, markeredgecolor="black",
                markeredgewidth=0.6, linestyle="none", transform=transform, clip_on=False, zorder=5)
        last = x * 1.3 > ax.get_xlim()[1]  # at the right edge the label goes on the left of its mark
        ax.annotate(STATUS_LABELS.get(status, status), (x, y), xycoords=transform, xytext=(-7 if last else 7, 0),
                    textcoords="offset points", fontsize=8, color=style.color, va="center",
                    ha="right" if last else "left", zorder=5)


def _series(group: CaseGroup, backend: str, value: Any) -> tuple[list[int], list[float], list[bool]]:
    """(xs, ys, mismatch flags) of one backend's points; NaN where the record failed."""
    xs, ys, flags = [], [], []
    for (name, x), record in sorted(group.by_backend_x().items()):
        if name != backend:
            continue
        if record.status not in TIMED:
            xs.append(x)  # a failed point breaks the line, so it never bridges a missing result
            ys.append(math.nan)
            flags.append(False)
            continue
        y = value(record)
        if y is None or not math.isfinite(y) or y <= 0:
            continue
        xs.append(x)
        ys.append(float(y))
        flags.append(record.status == Status.MISMATCH)
    return xs, ys, flags


def _plot_series(ax: Any, xs: list[int], ys: list[float], flags: list[bool], style: BackendStyle,
                 linestyle: str = "-") -> None:
    if not any(math.isfinite(y) for y in ys):
        return
    ax.plot(xs, ys, color=style.color, marker=style.marker, markersize=6, linewidth=1.8, linestyle=linestyle, zorder=3)
    bad = [(x, y) for x, y, flag in zip(xs, ys, flags, strict=False) if flag]
    if bad:
        ax.plot(*zip(*bad, strict=False), marker="o", markersize=14, markerfacecolor="none",
                markeredgecolor=MISMATCH_COLOR, markeredgewidth=2.0, linestyle="none", zorder=4)


NOISY_HANDLE = Line2D([], [], color="#555555", marker="o", markerfacecolor="white", linestyle="none", markersize=7,
                      label="noisy: interval wider than asked, or under 6 samples")
THROTTLED_HANDLE = Line2D([], [], color="#555555", marker="o", markerfacecolor="white", linestyle="none",
                          markersize=7, label="throttled or shared GPU")


def _mark_noisy(ax: Any, points: Iterable[tuple[str, int, Record]],
                styles: dict[str, BackendStyle]) -> tuple[int, int]:
    """Redraw each noisy or throttled point's marker hollow; returns how many were noisy and how many throttled."""
    noisy = throttled = 0
    for backend, x, record in points:
        if record.status in TIMED and record.time_ms \
                and (record.noisy or record.throttled):
            style = styles[backend]
            ax.plot([x], [float(record.time_ms)], marker=style.marker, markersize=7, markerfacecolor="white",
                    markeredgecolor=style.color, markeredgewidth=1.6, linestyle="none", zorder=4)
            noisy += record.noisy
            throttled += bool(record.throttled)
    return noisy, throttled


def _failures(group: CaseGroup) -> list[tuple[int, str, str]]:
    return sorted(
        (x, backend, str(record.status))
        for (backend, x), record in group.by_backend_x().items()
        if record.status in FAILED
    )


def _legend_handles(backends: list[str], styles: dict[str, BackendStyle], statuses: set[str],
                    extra: list[Line2D] | None = None) -> list[Line2D]:
    handles = [Line2D([], [], color=styles[b].color, marker=styles[b].marker, linewidth=1.8, label=b) for b in backends]
    failed = [STATUS_LABELS[s] for s in FAILED if s in statuses]
    if failed:
        handles.append(Line2D([], [], color="#777777", marker="X", markeredgecolor="black", linestyle="none",
                              markersize=9, label="no result: " + " / ".join(failed)))
    if "mismatch" in statuses:
        handles.append(Line2D([], [], marker="o", markersize=12, markerfacecolor="none", linestyle="none",
                              markeredgecolor=MISMATCH_COLOR, markeredgewidth=2.0, label="mismatch (time flagged)"))
    return handles + (extra or [])


def group_roof(group: CaseGroup) -> float | None:
    """The compute roof the group's records were judged against (a CPU's measured one): their extra.peak."""
    roofs = [float(r.roof.peak) for r in group.records if r.roof.peak_bound == "compute" and r.roof.peak]
    return max(roofs) if roofs else None


def _latency_panel(ax: Any, group: CaseGroup, backends: list[str], styles: dict[str, BackendStyle],
                   levels: int) -> tuple[bool, int, int]:
    """Median time with its interval shaded; returns whether anything was drawn, and the hollow counts."""
    cells = group.by_backend_x()
    for backend in backends:
        px, py, flags = _series(group, backend, lambda r: r.time_ms)
        _plot_series(ax, px, py, flags, styles[backend])
        if len(px) > 1:
            bands = [chart_band(cells[(backend, x)]) if math.isfinite(y) else (math.nan, math.nan)
                     for x, y in zip(px, py, strict=False)]
            ax.fill_between(px, [b[0] for b in bands], [b[1] for b in bands], color=styles[backend].color,
                            alpha=0.18, linewidth=0, zorder=2)
    noisy_points, throttled_points = _mark_noisy(
        ax, ((b, x, r) for (b, x), r in sorted(group.by_backend_x().items()) if b in backends), styles)
    hollow = " or ".join(word for word, n in (("noisy", noisy_points), ("throttled", throttled_points)) if n)
    shaded = "its interval" if any(r.ci_low_ms is not None for r in group.records) else "IQR"
    ax.set_title(f"Latency (median, {shaded} shaded; hollow = {hollow})" if hollow
                 else f"Latency (median, {shaded} shaded)")
    ax.set_ylabel("time per call (ms, log)")
    return _finish_y(ax, log=True, levels=levels), noisy_points, throttled_points


def _memory_panel(ax: Any, group: CaseGroup, backends: list[str], styles: dict[str, BackendStyle],
                  levels: int) -> None:
    """Peak memory above the inputs: measured where available, else the estimate, dashed."""
    measured = any(r.peak_memory_bytes for r in group.records)
    key = "peak_memory_bytes" if measured else "memory_estimate_bytes"
    values = [getattr(r, key) for r in group.records if getattr(r, key) and r.status in TIMED]
    unit, unit_name = bytes_unit(values)
    for backend in backends:
        px, py, flags = _series(group, backend, lambda r: (getattr(r, key) or 0) / unit)
        _plot_series(ax, px, py, flags, styles[backend], linestyle="-" if measured else "--")
    ax.set_title("Peak memory above inputs" + ("" if measured else " (estimate: not measured)"))
    ax.set_ylabel(f"peak memory ({unit_name}, log)")
    _finish_y(ax, log=True, levels=levels)


def _throughput_panel(ax: Any, group: CaseGroup, backends: list[str], styles: dict[str, BackendStyle],
                      levels: int, peak: float | None) -> None:
    """Achieved throughput (GFLOP/s when all of it is under 1 TFLOP/s), the peak dashed when on the scale."""
    achieved = [float(r.tflops) for r in group.records if r.tflops and r.status in TIMED
                and r.backend in backends]
    on_scale = bool(peak and achieved and max(achieved) >= 0.1 * peak)
    per_unit, flops_name = throughput_unit(achieved + ([peak] if on_scale and peak else []))
    for backend in backends:
        px, py, flags = _series(group, backend, lambda r: (r.tflops or 0) / per_unit)
        _plot_series(ax, px, py, flags, styles[backend])
    title = "Achieved throughput (no known peak for this device)"
    if peak and on_scale:
        xs = group.xs
        ax.plot(xs, [peak / per_unit] * len(xs), linewidth=0)  # keeps the peak inside the scaled range
        ax.axhline(peak / per_unit, color="black", linestyle="--", linewidth=1.2, zorder=1)
        ax.annotate(f"peak {peak / per_unit:.4g} {flops_name} ({dtype_word(group.shape.dtype)} dense)",
                    (0.01, peak / per_unit), xycoords=blended_transform_factory(ax.transAxes, ax.transData),
                    xytext=(0, 3), textcoords="offset points", va="bottom", ha="left", fontsize=8)
        title = "Achieved throughput"
    elif peak:
        title = f"Achieved throughput (peak {peak:g} TFLOP/s is off this scale: memory-bound)"
    _finish_y(ax, log=False, levels=levels, bottom=0.0)
    ax.set_title(title)
    ax.set_ylabel(flops_name)


def _speedup_panel(ax: Any, group: CaseGroup, backends: list[str], styles: dict[str, BackendStyle],
                   levels: int, baseline: str | None) -> None:
    """Speed-up over the baseline (above 1 = faster); mismatches drawn, flagged."""
    cells = group.by_backend_x()
    speedups = group_speedups(group, baseline, include_mismatch=True)
    for backend in backends:
        pts = sorted((x, s) for (b, x), s in speedups.items() if b == backend)
        if pts:
            flags = [cells[(backend, x)].status == Status.MISMATCH for x, _ in pts]
            _plot_series(ax, [p[0] for p in pts], [p[1] for p in pts], flags, styles[backend])
    ax.set_title(f"Speed-up over {baseline}" if baseline else "Speed-up (no baseline ran)")
    ax.set_ylabel(f"{baseline} time / backend time (×, log)" if baseline else "×")
    if _finish_y(ax, log=True, levels=levels):
        ax.axhline(1.0, color="black", linewidth=1.0, linestyle=":", zorder=1)
    elif baseline:
        empty_note(ax, f"{baseline} has no ok result to compare with here")
    else:
        empty_note(ax, "neither sdpa-math nor naive ran ok; pass a baseline")


def _group_headings(fig: Figure, group: CaseGroup, never: list[str]) -> float:
    """The wrapped title and skip note; returns the top of the panels' area."""
    title = textwrap.wrap(group.title(), TITLE_CHARS) or [""]
    fig.suptitle("\n".join(title), fontsize=14, fontweight="bold", y=0.99, va="top")
    top = 0.99 - TITLE_LINE * len(title)
    if never:
        note = textwrap.wrap(f"not drawn, skipped at every length (reasons in the table): {', '.join(never)}",
                             NOTE_CHARS)
        fig.text(0.5, top - 0.004, "\n".join(note), ha="center", va="top", fontsize=9, color="#57606a")
        top -= NOTE_LINE * len(note) + 0.004
    return top


def group_chart(group: CaseGroup, styles: dict[str, BackendStyle], baseline: str | None,
                peak_tflops: float | None, device_name: str | None) -> Figure:
    """Four panels for one case group: latency, peak memory, TFLOP/s and speed-up, one line per backend."""
    fig = Figure(figsize=GROUP_FIGSIZE, dpi=DPI)
    (ax_time, ax_mem), (ax_tflops, ax_speed) = fig.subplots(2, 2)
    # Backends skipped at every length get one line of text, not a row of marks in every panel.
    never = list(group.skipped_everywhere())
    xs, backends = group.xs, [b for b in group.backends if b not in never]
    failures = [f for f in _failures(group) if f[1] not in never]
    levels = max([sum(1 for f in failures if f[0] == x) for x in xs] + [0])
    statuses = {str(r.status) for r in group.records if r.backend not in never}

    any_time, noisy_points, throttled_points = _latency_panel(ax_time, group, backends, styles, levels)
    _memory_panel(ax_mem, group, backends, styles, levels)
    peak = peak_tflops if peak_tflops is not None else (peak_tflops_for(device_name, str(group.shape.dtype))
                                                        or group_roof(group))
    _throughput_panel(ax_tflops, group, backends, styles, levels, peak)
    _speedup_panel(ax_speed, group, backends, styles, levels, baseline)
    for ax in (ax_time, ax_mem, ax_tflops, ax_speed):
        log2_x(ax, xs, group.x_label())
        _mark_failures(ax, failures, styles)
    if not any_time:
        for ax in (ax_time, ax_mem, ax_tflops):
            empty_note(ax, "no successful measurement in this group")

    top = _group_headings(fig, group, never)
    extra = [NOISY_HANDLE] * bool(noisy_points) + [THROTTLED_HANDLE] * bool(throttled_points)
    rows = figure_legend(fig, _legend_handles(backends, styles, statuses, extra))
    fig.subplots_adjust(left=0.07, right=0.98, top=top - 0.04, bottom=0.065 + 0.03 * rows,
                        hspace=0.32, wspace=0.2)
    return fig


def kv_heads_chart(families: list[KvHeadsFamily], styles: dict[str, BackendStyle]) -> Figure:
    """MQA/GQA: latency and KV-cache bytes against kv_heads at the longest length, one row per family (at most 8)."""
    total = len(families)
    families = families[:MAX_KV_FAMILIES]
    rows = len(families)
    fig = Figure(figsize=(GROUP_FIGSIZE[0], 3.9 * rows + 1.3), dpi=DPI)
    axes = np.atleast_2d(fig.subplots(rows, 2, squeeze=False))
    all_backends: set[str] = set()
    statuses: set[str] = set()
    noisy_points = throttled_points = 0
    for family, (ax_time, ax_bytes) in zip(families, axes, strict=False):
        kv_values = sorted({int(r.kv_heads) for r in family.records})
        ran = {str(r.backend) for r in family.records if r.status != Status.SKIPPED}
        backends = sorted(ran)  # a backend skipped at every kv_heads is in the table, not drawn
        all_backends.update(backends)
        statuses.update(str(r.status) for r in family.records if r.backend in ran)
        failures = []
        for backend in backends:
            mine = sorted((int(r.kv_heads), r) for r in family.records if r.backend == backend)
            pts = [(k, float(r.time_ms), r.status == Status.MISMATCH) for k, r in mine
                   if r.status in TIMED and r.time_ms]
            if pts:
                _plot_series(ax_time, [p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts], styles[backend])
            failures += [(k, backend, str(r.status)) for k, r in mine if r.status in FAILED]
            noisy, throttled = _mark_noisy(ax_time, ((backend, k, r) for k, r in mine), styles)
            noisy_points, throttled_points = noisy_points + noisy, throttled_points + throttled
        levels = max([sum(1 for f in failures if f[0] == k) for k in kv_values] + [0])
        if not _finish_y(ax_time, log=True, levels=levels):
            empty_note(ax_time, "no successful measurement")
        by_kv = {int(r.kv_heads): kv_cache_bytes(r) for r in family.records}
        cache = [by_kv[k] / MIB for k in kv_values]
        ax_bytes.plot(kv_values, cache, color="black", marker="o", linewidth=1.8)
        for k, value in zip(kv_values, cache, strict=False):
            ax_bytes.annotate(f"{value:.0f} MiB" if value >= 10 else f"{value:.2g} MiB", (k, value),
                              textcoords="offset points", xytext=(0, 7), ha="center", fontsize=8)
        ax_bytes.plot([kv_values[-1]], [max(cache) * 1.6], linewidth=0)  # headroom for the value labels
        _finish_y(ax_bytes, log=True, levels=0)
        for ax in (ax_time, ax_bytes):
            log2_x(ax, kv_values, "KV heads (MQA = 1 … MHA = query heads)")
        _mark_failures(ax_time, sorted(failures), styles)
        ax_time.set_title(family.title(), fontsize=10)
        ax_time.set_ylabel("time per call (ms, log)")
        ax_bytes.set_title("KV cache = 2·batch·kv_heads·kv_len·d·bytes", fontsize=10)
        ax_bytes.set_ylabel("KV-cache size (MiB, log)")
    more = f" (first {rows} of {total} shapes; the table has all)" if total > rows else ""
    fig.suptitle("MQA / GQA: fewer KV heads, smaller KV cache" + more, fontsize=14, fontweight="bold")
    extra = [NOISY_HANDLE] * bool(noisy_points) + [THROTTLED_HANDLE] * bool(throttled_points)
    legend_rows = figure_legend(fig, _legend_handles(sorted(all_backends), styles, statuses, extra))
    height = fig.get_figheight()
    fig.subplots_adjust(left=0.07, right=0.98, top=1 - 0.75 / height, bottom=(0.75 + 0.3 * legend_rows) / height,
                        hspace=0.45, wspace=0.2)
    return fig


def correctness_chart(records: list[Record], styles: dict[str, BackendStyle]) -> Figure:
    """Each checked record's max error against its bound (left) and as a fraction of it (right); mismatches red."""
    fig = Figure(figsize=(GROUP_FIGSIZE[0], 6.2), dpi=DPI)
    ax_scatter, ax_ratio = fig.subplots(1, 2)
    checked = [r for r in records if r.max_abs_error is not None and r.error_bound
               and math.isfinite(float(r.max_abs_error))]
    backends = sorted({str(r.backend) for r in checked})  # a backend with no checked record has no point here
    positives = [float(r.max_abs_error) for r in checked if r.max_abs_error > 0]
    floor = min(positives) / 10 if positives else 1e-12
    points: dict[tuple[str, bool], list[tuple[float, float]]] = {}
    for r in checked:  # one plot call per (backend, mismatch) keeps thousands of records fast
        err = max(float(r.max_abs_error), floor)
        points.setdefault((str(r.backend), r.status == Status.MISMATCH), []).append((float(r.error_bound), err))
    for (backend, bad), pts in sorted(points.items()):
        style = styles[backend]
        kwargs = dict(marker=style.marker, linestyle="none", markersize=8 if bad else 6, zorder=4 if bad else 3,
                      color=MISMATCH_COLOR if bad else style.color, markeredgecolor="black" if bad else style.color,
                      alpha=1.0 if bad else 0.75)
        bounds, errs = [p[0] for p in pts], [p[1] for p in pts]
        ax_scatter.plot(bounds, errs, **kwargs)
        ax_ratio.plot([backends.index(backend)] * len(pts), [e / b for b, e in zip(bounds, errs, strict=False)],
                      **kwargs)
    unchecked_bad = [r for r in records if r.status == Status.MISMATCH and r not in checked]
    if checked:
        low = min(min(float(r.error_bound) for r in checked), floor)
        high = max(max(float(r.error_bound) for r in checked), max(max(float(r.max_abs_error), floor) for r in checked))
        line = [low / 3, high * 3]
        ax_scatter.plot(line, line, color="black", linestyle="--", linewidth=1.0, zorder=1)
        ax_scatter.annotate("err = bound", (line[1], line[1]), xytext=(-4, 4), textcoords="offset points",
                            ha="right", va="bottom", fontsize=8)
        ax_scatter.set_xscale("log")
        ax_scatter.set_yscale("log")
        ax_scatter.xaxis.set_minor_formatter(NullFormatter())
        ax_scatter.yaxis.set_minor_formatter(NullFormatter())
        ax_ratio.plot([0], [1.0], linewidth=0)  # keeps the pass/fail line on the scale
        _finish_y(ax_ratio, log=True, levels=0)
        ax_ratio.axhline(1.0, color=MISMATCH_COLOR, linestyle="--", linewidth=1.0)
    else:
        for ax in (ax_scatter, ax_ratio):
            empty_note(ax, "no record carries a finite error and bound")
    ax_scatter.set_title("Max |error| vs its bound (below the diagonal = pass)")
    ax_scatter.set_xlabel("error bound = 2·err(naive, same dtype) + floor")
    ax_scatter.set_ylabel("max |output − reference| (log)")
    ax_ratio.set_title("Error as a fraction of the bound (above 1 = mismatch)")
    ax_ratio.set_xticks(range(len(backends)))
    # At 45°, anchored at their tick, neighbouring names stay apart.
    ax_ratio.set_xticklabels(backends, rotation=45, ha="right", rotation_mode="anchor")
    ax_ratio.set_xlim(-0.6, len(backends) - 0.4)
    ax_ratio.set_ylabel("max |error| / bound (log)")
    notes = []
    if positives and len(positives) < len(checked):
        notes.append(f"errors of exactly 0 are drawn at {floor:.1g}")
    if unchecked_bad:
        notes.append(f"{len(unchecked_bad)} mismatch(es) without a finite error (NaN/Inf) are listed in the table")
    unchecked_ok = sum(1 for r in records if r.status == Status.OK and r.max_abs_error is None)
    if unchecked_ok:
        notes.append(f"{unchecked_ok} ok record(s) were not checked")
    fig.suptitle("Correctness against the reference", fontsize=14, fontweight="bold")
    extra = [Line2D([], [], marker="o", color=MISMATCH_COLOR, markeredgecolor="black", linestyle="none",
                    label="mismatch (above its bound)")] if any(bad for _, bad in points) else []
    handles = [Line2D([], [], color=styles[b].color, marker=styles[b].marker, linestyle="none", label=b)
               for b in backends] + extra
    rows = figure_legend(fig, handles) if handles else 0
    # From the bottom: the legend's rows, the notes, then the ratio panel's slanted names.
    height, label = fig.get_figheight() * DPI, max(map(len, backends), default=0) * 7.0 * 0.71 + 30
    notes_y = (8 + 24 * rows) / height
    if notes:
        fig.text(0.5, notes_y, "; ".join(notes), ha="center", va="bottom", fontsize=9, color="#444444")
    bottom = notes_y + (22 * bool(notes) + label) / height
    fig.subplots_adjust(left=0.08, right=0.98, top=0.86, bottom=bottom, wspace=0.22)
    return fig


def setup_records(records: list[Record]) -> list[Record]:
    """The records whose backend's setup was measured (`extra.setup_ms`), with a median call to weigh it by."""
    return [r for r in records if r.setup.setup_ms is not None and r.time_ms]


def setup_chart(records: list[Record], styles: dict[str, BackendStyle]) -> Figure:
    """Each backend's one-time setup per case (left: ms; right: in calls of its own median time), a dot per
    record and a bar at the backend's median."""
    rows = setup_records(records)
    backends = sorted({str(r.backend) for r in rows})
    fig = Figure(figsize=(GROUP_FIGSIZE[0], 1.6 + 0.42 * max(1, len(backends))), dpi=DPI)
    ax_ms, ax_calls = fig.subplots(1, 2, sharey=True)
    for y, backend in enumerate(backends):
        mine = [r for r in rows if r.backend == backend]
        setup = [max(float(r.setup.setup_ms), 1e-3) for r in mine]
        calls = [s / float(r.time_ms) for s, r in zip(setup, mine, strict=False)]
        style = styles[backend]
        for ax, values in ((ax_ms, setup), (ax_calls, calls)):
            ax.plot(values, [y] * len(values), marker=style.marker, color=style.color, linestyle="none", alpha=0.7)
            middle = float(np.median(values))
            ax.plot([middle, middle], [y - 0.3, y + 0.3], color=style.color, linewidth=2.5)
    for ax, label in ((ax_ms, "setup per case (ms, log)"), (ax_calls, "setup ÷ median call time (calls, log)")):
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax_ms.set_yticks(range(len(backends)))
    ax_ms.set_yticklabels(backends)
    ax_ms.set_ylim(-0.6, len(backends) - 0.4)
    ax_ms.set_title("One-time setup: block mask, compile, plan, layout")
    ax_calls.set_title("How many calls the setup costs")
    ax_calls.axvline(1.0, color="black", linestyle=":", linewidth=1.0)
    if not rows:
        empty_note(ax_ms, "no record carries a measured setup")
    fig.suptitle("Setup cost (outside every timed call; bar = median over the run's cases)", fontsize=13,
                 fontweight="bold")
    fig.subplots_adjust(left=0.14, right=0.98, top=1 - 0.62 / fig.get_figheight(), bottom=0.7 / fig.get_figheight(),
                        wspace=0.06)
    return fig
