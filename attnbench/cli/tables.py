"""What a run prints for people: the dry run's cases and forecast,
and the per-case table of what was measured."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from attnbench.backends.naive import NaiveBackend
from attnbench.core import counting
from attnbench.core.units import fmt_bytes

if TYPE_CHECKING:
    from rich.console import Console

    from attnbench.records.results import Record
    from attnbench.run.forecast import Forecast
    from attnbench.run.session import DryRun

STATUS_STYLE = {"ok": "green", "mismatch": "bold red", "error": "red", "oom": "magenta", "skipped": "yellow",
                "timeout": "red", "wrong_kernel": "red", "implausible": "bold red"}


def print_dry_run(dry: DryRun, console: Console) -> None:
    """The cases a run would measure, with their work and memory,
    and the run's predicted wall time per backend."""
    plan = dry.plan
    table = Table(title=f"{plan.suite.name}: {len(plan.cases)} cases × {len(plan.backends)} "
                        f"backends on {plan.device}",
                  title_justify="left")
    table.add_column("case")
    table.add_column("GFLOP", justify="right")
    table.add_column("est. memory, fused", justify="right")
    table.add_column("est. memory, materialised scores", justify="right")
    for case in plan.cases:
        table.add_row(case.describe(), f"{counting.flops(case) / 1e9:,.2f}",
                      fmt_bytes(counting.memory_estimate(case)),
                      fmt_bytes(counting.memory_estimate(case, NaiveBackend.cost.memory)))
    console.print(table)
    print_forecast(dry.forecast, console)
    timing = dry.timing
    source = " (with the cpu: block's timing)" if dry.cpu_timing else ""
    console.print(f"timing on {plan.device}{source}: warm-up up to {timing.warmup_ms:g} ms, then samples "
                  f"until the median is known to ±{timing.precision * 100:g}% or {timing.budget_ms:g} ms of "
                  f"them, {timing.min_samples} to {timing.max_samples} samples"
                  + (f", in {timing.rounds} rounds spread over the run" if (timing.rounds or 1) > 1 else "")
                  + (f", then up to {timing.refine:g}× that budget over all measurements where the "
                     "interval is still too wide" if timing.refine else ""), markup=False)


def print_forecast(predicted: Forecast, console: Console) -> None:
    """Per backend: measurements and predicted time; then the total, and what the prediction rests on."""
    from attnbench.run.forecast import fmt_duration

    label = "ESTIMATE for a GPU that is not here" if predicted.machine.estimate else "predicted wall time"
    table = Table(title=f"{label}: {fmt_duration(predicted.total_s)} in total", title_justify="left")
    for column in ("backend", "measured", "skipped", "predicted"):
        table.add_column(column, justify="left" if column == "backend" else "right")
    counts: dict[str, list[int]] = {}
    for task in predicted.tasks:
        counts.setdefault(task.backend, [0, 0])[0 if task.runs else 1] += 1
    for backend, seconds in predicted.by_backend().items():
        ran, skipped = counts[backend]
        table.add_row(backend, str(ran), str(skipped), fmt_duration(seconds))
    if predicted.refine_s:
        table.add_row("refining (timing.refine)", "", "", fmt_duration(predicted.refine_s))
    if predicted.roofs_s:
        table.add_row("the CPU's roofs", "", "", fmt_duration(predicted.roofs_s))
    startup_s = predicted.fixed_s - predicted.refine_s - predicted.roofs_s
    table.add_row("startup and report", "", "", fmt_duration(startup_s))
    console.print(table)
    if predicted.compile_workers:
        compiles = (f"compiles ahead {fmt_duration(predicted.precompile_s)} ({predicted.precompiled} graphs "
                    f"in {predicted.compile_workers} processes, --compile-workers), loading them "
                    f"{fmt_duration(predicted.compile_s)}")
    else:
        compiles = f"flex compiles {fmt_duration(predicted.compile_s)}"
    console.print(f"of which references {fmt_duration(predicted.reference_s)}, {compiles}; "
                  f"throughput {predicted.machine.source}"
                  + ("; every backend made for CUDA taken as installed" if predicted.machine.estimate else "")
                  + (f"; overheads {predicted.basis}" if predicted.basis else ""), markup=False)


def timing_cells(r: Record) -> tuple[str, str, str]:
    """Median, interval and TFLOP/s; "–" where not timed."""
    if r.time_ms is None:
        return "–", "–", "–"
    median = ("~" if r.noisy else "") + ("!" if r.throttled else "") + f"{r.time_ms:.3f}"
    interval = f"{r.ci_low_ms:.3f}–{r.ci_high_ms:.3f}" if r.ci_low_ms is not None else "–"
    tflops = f"{r.tflops:.3f}" if r.tflops is not None else "–"
    return median, interval, tflops


def print_summary(records: list[Record], console: Console, unavailable: dict[str, str] | None = None) -> None:
    """A compact table per case: rows backends; status, median ms, TFLOP/s, peak memory, error. The backends
    in `unavailable` (not on this machine at all: named with their reasons before the run) get no rows, one
    line."""
    unavailable = unavailable or {}
    by_case: dict[str, list[Record]] = {}
    for record in records:
        if record.status == "skipped" and record.reason == unavailable.get(record.backend):
            continue
        by_case.setdefault(record.case_id or "", []).append(record)
    for case_id, rows in by_case.items():
        table = Table(title=case_id, title_justify="left", title_style="bold")
        for column in ("backend", "status", "median ms", "interval", "TFLOP/s", "peak mem", "error / bound",
                       "note"):
            table.add_column(column,
                             justify="right" if column not in ("backend", "status", "note") else "left",
                             overflow="fold")
        for r in rows:
            table.add_row(
                r.backend,
                f"[{STATUS_STYLE[r.status]}]{r.status}[/]",
                *timing_cells(r),
                fmt_bytes(r.peak_memory_bytes) if r.peak_memory_bytes is not None else "–",
                f"{r.max_abs_error:.1e} / {r.error_bound:.1e}" if r.max_abs_error is not None else "–",
                (r.reason or r.kernel or "")[:160],
            )
        console.print(table)
    if unavailable:
        console.print(f"not on this machine, skipped at every case (reasons above the progress): "
                      f"{', '.join(unavailable)}", markup=False, soft_wrap=True)
    if any(r.noisy for r in records):
        console.print("~ before a median: noisy, its interval is wider than the precision asked (or it "
                      "has too few samples for one)", markup=False)
    if any(r.throttled for r in records):
        console.print("! before a median: timed on a throttled or shared GPU (extra.clock_event_reasons, "
                      "extra.other_gpu_processes)", markup=False)
