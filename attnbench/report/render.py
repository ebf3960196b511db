"""render_report: results in, report.html + charts/*.png + summary.md out; never re-runs a benchmark."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from attnbench.core.errors import ResultsError
from attnbench.core.peaks import MeasuredRoofs
from attnbench.records.env import RunEnv, read_env
from attnbench.records.files import write_bytes_atomic
from attnbench.records.folder import RunFolder, report_directory
from attnbench.records.record import Record
from attnbench.records.results import load_records, results_path
from attnbench.records.run import run_of
from attnbench.report.baseline import choose_baseline, group_speedups
from attnbench.report.charts import (
    correctness_chart,
    group_chart,
    kv_heads_chart,
    setup_chart,
    setup_records,
)
from attnbench.report.energy import energy_chart, energy_records
from attnbench.report.findings import build_findings
from attnbench.report.frontier import frontier_chart, frontier_groups
from attnbench.report.groups import CaseGroup, group_records, kv_heads_families
from attnbench.report.html import render_html
from attnbench.report.lead import group_leads
from attnbench.report.markdown import render_markdown
from attnbench.report.plotting import WIDTH_PX, Chart, render_chart
from attnbench.report.roofline import roofline_chart
from attnbench.report.styles import BackendStyle, backend_styles
from attnbench.stats.metric import TIME
from attnbench.stats.pooling import pool
from attnbench.stats.recommend import decide, enough_to_recommend

FORMATS = ("html", "png", "md")
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>: the signal a process gets when its parent ends
PARALLEL_FROM = 4  # charts; below this a process pool costs more than it saves
NO_KV_FAMILY_NOTE = "No MQA/GQA chart: no case group varies kv_heads with everything else fixed."


def chart_file_names(groups: list[CaseGroup]) -> list[str]:
    """The PNG name of each group's chart, numbered in report order."""
    return [f"group-{i:02d}-{group.slug()}.png" for i, group in enumerate(groups, start=1)]


def _png(task: tuple[Any, tuple]) -> bytes:
    draw, args = task
    return render_chart(draw, *args)


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _die_with(parent: int) -> None:
    """A chart worker's initializer: end when the process that started it ends, so a killed report leaves no worker."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):  # no prctl in this libc
            pass
    if os.getppid() != parent:
        os._exit(1)


def _pngs(tasks: list[tuple[Any, tuple]]) -> list[bytes]:
    """Each chart as PNG bytes, in task order; in worker processes, one per core, when there are several."""
    workers = min(_cpu_count(), 8, len(tasks) // 2)
    if len(tasks) >= PARALLEL_FROM and workers > 1:
        try:
            with ProcessPoolExecutor(max_workers=workers, initializer=_die_with, initargs=(os.getpid(),)) as pool:
                return list(pool.map(_png, tasks, chunksize=max(1, len(tasks) // (4 * workers))))
        except (OSError, BrokenProcessPool):  # no process support here (sandboxes)
            pass
    return [_png(task) for task in tasks]


@dataclass(frozen=True)
class ChartInputs:

    groups: list[CaseGroup]
    records: list[Record]
    styles: dict[str, BackendStyle]
    baseline: str | None
    peak_tflops: float | None
    device_name: str | None
    peak_bandwidth_gbs: float | None
    roofs: MeasuredRoofs | None = None  # a CPU run's measured roofs (env.json's `roofs`)


Drawn = tuple[str, str, Callable[..., Any], tuple]


@dataclass(frozen=True)
class ChartSpec:
    """A kind of chart: `files`, the glob of every file it may write, and `charts`, the ones these results get."""

    files: str
    charts: Callable[[ChartInputs], list[Drawn]]


def _one(name: str, title: str, draw: Callable[..., Any], args: Callable[[ChartInputs], tuple],
         wanted: Callable[[ChartInputs], bool] = lambda _: True) -> ChartSpec:
    return ChartSpec(name, lambda c: [(name, title, draw, args(c))] if wanted(c) else [])


# The report's charts, in report order.
CHART_SPECS: tuple[ChartSpec, ...] = (
    ChartSpec("frontier-*.png", lambda c: [(f"frontier-{i:02d}-{group.slug()}.png", group.title(), frontier_chart,
                                            (group, c.styles))
                                           for i, group in enumerate(frontier_groups(c.records), start=1)]),
    ChartSpec("group-*.png", lambda c: [(name, group.title(), group_chart,
                                         (group, c.styles, c.baseline, c.peak_tflops, c.device_name))
                                        for name, group in zip(chart_file_names(c.groups), c.groups, strict=False)]),
    _one("mqa-gqa.png", "MQA / GQA: latency and KV-cache size against KV heads", kv_heads_chart,
         lambda c: (kv_heads_families(c.groups), c.styles), lambda c: bool(kv_heads_families(c.groups))),
    _one("roofline.png", "Roofline: arithmetic intensity against achieved TFLOP/s", roofline_chart,
         lambda c: (c.records, c.styles, c.device_name, c.peak_tflops, c.peak_bandwidth_gbs, c.roofs)),
    _one("correctness.png", "Correctness: max error against its bound", correctness_chart,
         lambda c: (c.records, c.styles)),
    _one("setup.png", "Setup cost: each backend's one-time block mask, compile and plan", setup_chart,
         lambda c: (c.records, c.styles), lambda c: bool(setup_records(c.records))),
    _one("energy.png", "Energy per token against sequence length", energy_chart, lambda c: (c.groups, c.styles),
         lambda c: bool(energy_records(c.records))),
)


def stale_charts(chart_dir: Path) -> list[Path]:
    return sorted({path for spec in CHART_SPECS for path in chart_dir.glob(spec.files)})


def build_charts(groups: list[CaseGroup], records: list[Record], baseline: str | None,
                 peak_tflops: float | None, device_name: str | None,
                 peak_bandwidth_gbs: float | None = None,
                 roofs: MeasuredRoofs | None = None) -> tuple[list[Chart], list[str]]:
    """Every chart of the report (CHART_SPECS), and the notes on charts left out."""
    inputs = ChartInputs(groups, records, backend_styles(r.backend for r in records), baseline, peak_tflops,
                         device_name, peak_bandwidth_gbs, roofs)
    drawn = [chart for spec in CHART_SPECS for chart in spec.charts(inputs)]
    notes = [] if kv_heads_families(groups) else [NO_KV_FAMILY_NOTE]
    pngs = _pngs([(draw, args) for _, _, draw, args in drawn])
    return [Chart(name, title, png) for (name, title, _, _), png in zip(drawn, pngs, strict=False)], notes


def recommendation_section(source: Path, records: list[Record], env: RunEnv) -> dict[str, Any] | None:
    """What `attnbench recommend` says of this run alone, or None when no bucket had two backends to choose between."""
    from attnbench.report.dispatch_table import html_section

    run = run_of(source, records, env)
    decisions = decide(pool([run], TIME), TIME)
    return html_section(decisions, [run], TIME) if enough_to_recommend(decisions) else None


def trace_links(records: list[Record], run_dir: Path, out: Path) -> dict[Record, str]:
    """Each existing --trace file as an address relative to the report's directory, so a run folder can move."""
    links = {}
    for r in records:
        trace = r.trace
        if trace and (run_dir / str(trace)).is_file():
            links[r] = quote(Path(os.path.relpath(run_dir / str(trace), out)).as_posix())
    return links


def _write(path: Path, data: bytes) -> Path:
    write_bytes_atomic(path, data, "the results are intact, make room and write the report again with "
                                   "`attnbench report`")
    return path


def roofs_of(env: RunEnv) -> MeasuredRoofs | None:
    """The roofs a CPU run measured at its start (env.json); None for a GPU's run."""
    try:
        return MeasuredRoofs.from_dict(env.roofs) if env.roofs else None
    except (KeyError, TypeError):
        return None


def _check_options(wanted: list[str], peak_tflops: float | None) -> None:
    unknown = [f for f in wanted if f not in FORMATS]
    if unknown or not wanted:
        raise ResultsError(f"unknown report format(s) {', '.join(unknown) or '(none)'}: "
                           f"choose from {', '.join(FORMATS)}")
    if peak_tflops is not None and not peak_tflops > 0:
        raise ResultsError(f"peak TFLOP/s must be a positive number, got {peak_tflops}")


def _write_charts(out: RunFolder, charts: list) -> list[Path]:
    chart_dir = out.charts
    chart_dir.mkdir(exist_ok=True)
    for stale in stale_charts(chart_dir):
        stale.unlink(missing_ok=True)  # a chart of other results would mislead
    return [_write(chart_dir / chart.name, chart.png) for chart in charts]


def _speedups(groups: list[CaseGroup], baseline: str | None) -> dict[Record, float]:
    speedups: dict[Record, float] = {}
    for group in groups:
        cells = group.by_backend_x()
        for key, value in group_speedups(group, baseline).items():
            speedups[cells[key]] = value
    return speedups


def render_report(source: Path, out_dir: Path | None = None, formats: Iterable[str] = FORMATS,
                  baseline: str | None = None, peak_tflops: float | None = None) -> list[Path]:
    """Read results from `source` (a run directory or its results file), write the report (by default where
    report_directory says), return the written paths. The results and env.json are only read."""
    wanted = list(dict.fromkeys(formats))
    _check_options(wanted, peak_tflops)
    source = Path(source)
    records = load_records(source)
    if not records:
        raise ResultsError(f"{results_path(source)}: holds no records, so there is nothing to report")
    env = read_env(source)
    out = RunFolder(Path(out_dir) if out_dir is not None else report_directory(results_path(source)))
    out.directory.mkdir(parents=True, exist_ok=True)

    baseline = choose_baseline(records, baseline)
    groups = group_records(records)
    findings = build_findings(groups, records, baseline)
    device_name = env.device_name or next((r.device_name for r in records if r.device_name), None)
    if peak_tflops is None:
        peak_tflops = env.peak_tflops  # the run's --peak-tflops
    peak_bandwidth_gbs = env.peak_bandwidth_gbs
    written: list[Path] = []
    charts: list = []
    notes: list[str] = []
    if "html" in wanted or "png" in wanted:
        charts, notes = build_charts(groups, records, baseline, peak_tflops, device_name, peak_bandwidth_gbs,
                                     roofs_of(env))
    elif not kv_heads_families(groups):
        notes.append(NO_KV_FAMILY_NOTE)
    if "png" in wanted:
        written += _write_charts(out, charts)
    leads = group_leads(groups, pool([run_of(source, records, env)], TIME))
    if "html" in wanted:
        page = render_html(env, records, findings, charts, notes, _speedups(groups, baseline), baseline, WIDTH_PX,
                           recommendation_section(source, records, env), chart_files="png" in wanted,
                           trace_links=trace_links(records, results_path(source).parent, out.directory),
                           leads=leads)
        written.append(_write(out.report, page.encode("utf-8")))
    if "md" in wanted:
        text = render_markdown(env, groups, findings, baseline, notes, leads)
        written.append(_write(out.summary, text.encode("utf-8")))
    return written
