"""A run from the user's side: resolve suite, device and backends; write results and env; show progress."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from rich.console import Console
from rich.table import Table

from attnbench.backends.base import Backend
from attnbench.case import Case
from attnbench.errors import AttnbenchError, SuiteError
from attnbench.registry import Registry, default_registry
from attnbench.results import (ENV_FILE, RESULTS_FILE, Record, ResultsWriter, key_of, refuse_existing,
                               write_json_atomic)
from attnbench.shard import Shard
from attnbench.suite import Suite, load_suite
from attnbench.progress import ProgressListener, Eta
from attnbench.tally import Tally, process_start, reference_line
from attnbench.units import fmt_bytes

if TYPE_CHECKING:
    from attnbench.forecast import Forecast
    from attnbench.timing import TimingSettings


@dataclass(frozen=True)
class Plan:
    """What a run will do, decided before anything runs."""

    suite: Suite
    device: str
    cases: list[Case]
    backends: list[Backend]
    plugins: tuple[str, ...] = ()

    def tasks(self) -> list[tuple[Case, Backend]]:
        """Every (case, backend) measurement, case by case in suite order."""
        return [(case, backend) for case in self.cases for backend in self.backends]


@dataclass(frozen=True)
class RunOptions:
    """How a plan is run: isolation and time limit, OOM pruning, one shard of it, or the rest of an earlier run."""

    isolate: bool | None = None  # None: on for CUDA runs and whenever there is a time limit
    timeout_s: float | None = None  # None: the suite's timing.timeout_s
    oom_pruning: bool = True
    shard: Shard | None = None
    resume: bool = False
    force: bool = False  # with resume: continue even where env.json differs from this machine
    devices: tuple[int, ...] | None = None  # one worker per GPU index, sharing one queue of cases
    peak_tflops: float | None = None  # roofs for percent_of_peak, in place of the datasheet table
    peak_bandwidth_gbs: float | None = None
    timer: str = "auto"  # "cuda-graph": CudaGraphTimer in place of CUDA events
    cache_dir: Path | None = None  # torch.compile's caches and attnbench's calibration; None: the default


@dataclass(frozen=True)
class Outcome:
    planned: int
    measured: int
    mismatches: int
    stopped: bool
    tally: Tally = field(default_factory=Tally)


def settings_of(suite: Suite, device: str) -> TimingSettings:
    """The suite's `timing:` in force on `device` as the timers' settings."""
    from attnbench.timing import TimingSettings

    t = suite.timing(device)
    return TimingSettings(t.warmup_ms, t.budget_ms, t.min_samples, t.max_samples, t.precision)


def check_backends(suite: Suite, registry: Registry, requested: list[str] | None) -> list[str]:
    """The backend names to run, every one known to the registry (a suite's typo names its line)."""
    from attnbench.errors import did_you_mean

    if requested is not None:
        names, where = requested, "--backend"
    elif suite.model.backends is not None:
        names, where = suite.model.backends, f"{suite.path}: backends"
    else:
        return registry.names()
    for index, name in enumerate(names):
        if name not in registry:
            position = f"[{index}]" if where != "--backend" else ""
            raise SuiteError(f"{where}{position}: unknown backend {name!r}{did_you_mean(name, registry.names())}; "
                             f"allowed: {', '.join(registry.names())}")
    return list(dict.fromkeys(names))


def plan(suite_path: Path, backends: list[str] | None, device: str | None, plugins: list[str],
         resolve: bool = True) -> Plan:
    """Validate everything the run depends on; nothing is written or run yet. `resolve=False` takes `device`
    as given (a dry run's estimate for a GPU that is not here)."""
    from attnbench.env import resolve_device

    registry = default_registry(plugins)
    suite = load_suite(suite_path)
    names = check_backends(suite, registry, backends)
    resolved = resolve_device(device or suite.model.device) if resolve or device is None else device
    return Plan(suite, resolved, suite.cases(resolved), registry.resolve(names), tuple(plugins))


def case_of(record: Record) -> Case:
    """The case a record measured."""
    return Case(**{name: getattr(record, name) for name in Case.__dataclass_fields__})


def task_key(case: Case, backend: Backend) -> tuple:
    """The key a measurement's record will have (results.key_of): case, backend and device."""
    return key_of({**case.fields(), "backend": backend.name})


def resolve_isolation(device: str, isolate: bool | None, timeout_s: float | None) -> bool:
    """Whether measurements run in a worker process: asked for, or on CUDA, or needed for a time limit."""
    if timeout_s is not None and isolate is False:
        raise AttnbenchError(f"--timeout {timeout_s:g}: a time limit needs a worker process to kill; "
                             f"drop --no-isolate")
    if isolate is not None:
        return isolate
    return device == "cuda" or timeout_s is not None


def print_dry_run(plan: Plan, console: Console, cache_dir: Path | None = None, gpu: str | None = None,
                  isolate: bool | None = None) -> Forecast:
    """The cases a run would measure, with their work and memory, and the run's predicted wall time per backend.

    The prediction calibrates this device (under a second, once per device and torch version), or, with `gpu`,
    takes that GPU's datasheet row: then it is an estimate for a machine that is not here, and says so.
    """
    from attnbench import compile_cache, forecast
    from attnbench.timing import TimingSettings  # noqa: F401 - settings_of's return type

    table = Table(title=f"{plan.suite.name}: {len(plan.cases)} cases × {len(plan.backends)} backends on {plan.device}",
                  title_justify="left")
    table.add_column("case")
    table.add_column("GFLOP", justify="right")
    table.add_column("est. memory, fused", justify="right")
    table.add_column("est. memory, materialised scores", justify="right")
    for case in plan.cases:
        table.add_row(case.describe(), f"{case.flops() / 1e9:,.2f}", fmt_bytes(case.memory_estimate(False)),
                      fmt_bytes(case.memory_estimate(True, True)))
    console.print(table)
    cache = compile_cache.use(cache_dir)
    machine = forecast.datasheet(gpu) if gpu else forecast.cached_calibration(plan.device, cache)
    import torch

    timing = plan.suite.timing(plan.device)
    predicted = forecast.forecast(plan.tasks(), settings_of(plan.suite, plan.device), machine,
                                  isolate=resolve_isolation(plan.device, isolate, timing.timeout_s),
                                  compiled=compile_cache.compiled(cache, torch.__version__))
    print_forecast(predicted, console)
    source = "" if timing == plan.suite.model.timing else " (with the cpu: block's timing)"
    console.print(f"timing on {plan.device}{source}: warm-up up to {timing.warmup_ms:g} ms, then samples until the "
                  f"median is known to ±{timing.precision * 100:g}% or {timing.budget_ms:g} ms of them, "
                  f"{timing.min_samples} to {timing.max_samples} samples", markup=False)
    return predicted


def print_forecast(predicted: Forecast, console: Console) -> None:
    """Per backend: measurements and predicted time; then the total, and what the prediction rests on."""
    from attnbench.forecast import fmt_duration

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
    table.add_row("startup and report", "", "", fmt_duration(predicted.fixed_s))
    console.print(table)
    console.print(f"of which references {fmt_duration(predicted.reference_s)}, flex compiles "
                  f"{fmt_duration(predicted.compile_s)}; throughput {predicted.machine.source}"
                  + ("; every backend made for CUDA taken as installed" if predicted.machine.estimate else ""),
                  markup=False)


def execute(plan: Plan, directory: Path, console: Console, errors: Console, should_stop: Callable[[], bool],
            options: RunOptions = RunOptions()) -> Outcome:
    """Run the plan into `directory`: env.json first, then one results line per measurement."""
    from attnbench import compile_cache, forecast
    from attnbench.env import collect_env
    from attnbench.isolation import Isolated, WorkerConfig, WorkerTimer
    from attnbench.resume import check_compatible, done_keys, drop_cut_line, read_run_env
    from attnbench.runner import RunInfo, Runner, now
    from attnbench.shard import select
    from attnbench.timing import check_timer, timer_for

    check_timer(plan.device, options.timer)  # before anything is written
    timing = plan.suite.timing(plan.device)
    settings = settings_of(plan.suite, plan.device)
    timeout_s = options.timeout_s if options.timeout_s is not None else timing.timeout_s
    isolate = resolve_isolation(plan.device, options.isolate, timeout_s)
    if options.devices is not None:
        from attnbench.devices import check_devices

        if options.isolate is False:
            raise AttnbenchError("--devices: each GPU gets its own worker process; drop --no-isolate")
        isolate = True
        check_devices(plan.device, list(options.devices))
    results = directory / RESULTS_FILE
    tasks = plan.tasks()
    if options.shard is not None:
        tasks = select(tasks, options.shard)
    env = collect_env(plan.device)
    torch_version = env["torch"]
    cache = compile_cache.use(options.cache_dir)
    workers = len(options.devices) if options.devices is not None else 1
    predicted = forecast.forecast(tasks, settings, forecast.cached_calibration(plan.device, cache),
                                  isolate=isolate, workers=workers,
                                  compiled=compile_cache.compiled(cache, torch_version))
    if options.resume:
        recorded = read_run_env(directory)
        check_compatible(directory, recorded, env, plan.suite.name,
                         str(options.shard) if options.shard else None, options.force)
        if drop_cut_line(results):
            errors.print(f"{results}: dropped a last line cut off when the run was killed")
        done = done_keys(directory)
        tasks = [task for task in tasks if task_key(*task) not in done]
        run_id = recorded.get("run_id") or uuid.uuid4().hex[:12]
        recorded.setdefault("resumed", []).append({"timestamp": now(), "measurements": len(tasks),
                                                   "already_done": len(done), "env": env,
                                                   "prediction": predicted.to_dict()})
        env = recorded
    else:
        refuse_existing(directory, hint=f", or --resume {directory} to finish that run")
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise AttnbenchError(f"{directory}: cannot create the output directory ({exc.strerror})") from None
        run_id = uuid.uuid4().hex[:12]
        env.update(run_id=run_id, suite_name=plan.suite.name, suite_file=str(plan.suite.path),
                   suite_text=plan.suite.text, timestamp=now(), plugins=list(plan.plugins),
                   shard=str(options.shard) if options.shard else None, isolated=isolate, timeout_s=timeout_s,
                   devices=list(options.devices) if options.devices is not None else None,
                   peak_tflops=options.peak_tflops, peak_bandwidth_gbs=options.peak_bandwidth_gbs,
                   timer=options.timer, cache_dir=str(cache), prediction=predicted.to_dict())
    try:
        write_json_atomic(directory / ENV_FILE, env)
    except OSError as exc:
        raise AttnbenchError(f"{directory}: cannot write {ENV_FILE} ({exc.strerror})") from None
    records: list[Record] = []
    total = len(tasks)
    scope = f" (shard {options.shard})" if options.shard else ""
    scope += " (resuming: the rest of the run)" if options.resume else ""
    mode = f"isolated, timeout {timeout_s:g} s" if isolate and timeout_s else "isolated" if isolate else "in-process"
    if options.devices is not None:
        mode += f", one worker on each of devices {','.join(map(str, options.devices))}"
    errors.print(f"attnbench {plan.suite.name}: {len(plan.cases)} cases × {len(plan.backends)} backends → "
                 f"{total} measurements{scope} on {plan.device} ({env['device_name']}, {mode}) → {directory}; "
                 f"predicted {forecast.fmt_duration(predicted.total_s)}")
    info = RunInfo(run_id, plan.suite.name, env["device_name"], options.peak_tflops, options.peak_bandwidth_gbs)
    eta = Eta(predicted, tasks, workers)
    with ResultsWriter(results) as writer, ProgressListener(errors, total, eta) as listener, frozen_heap():
        timer = WorkerTimer() if isolate else timer_for(plan.device, options.timer)
        runner = Runner(info, timer, settings, listener, should_stop, oom_pruning=options.oom_pruning)
        measurer = Isolated(WorkerConfig(info, plan.device, settings, plan.plugins, timer=options.timer), runner,
                            timeout_s) if isolate else None

        def sink(record: Record) -> None:
            writer.append(record)
            records.append(record)

        if options.devices is not None:
            from attnbench.devices import run_on_devices, worker_env

            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            measurers = [Isolated(WorkerConfig(info, plan.device, settings, plan.plugins,
                                               worker_env(index, visible), options.timer), runner, timeout_s)
                         for index in options.devices]
            measured = run_on_devices(runner, tasks, sink, measurers)
        else:
            measured = runner.run_tasks(tasks, sink, measurer)
    compile_cache.note_compiled(cache, torch_version, (
        forecast.compile_key(case_of(r), r.backend) for r in records
        if r.backend in forecast.COMPILED and "compile_s" in r.extra))
    print_summary(records, console)
    tally = Tally.of(records)
    errors.print(f"results: {results}; {reference_line(tally, time.time() - process_start())}")
    mismatches = sum(r.status == "mismatch" for r in records)
    return Outcome(total, measured, mismatches, measured < total, tally)


def record_actual(directory: Path, outcome: Outcome, wall_s: float) -> None:
    """Add what the run really took to env.json, beside its prediction: wall (report included), timed, reference."""
    from attnbench.results import ENV_FILE

    path = directory / ENV_FILE
    try:
        env = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return
    actual = {"wall_s": round(wall_s, 2), "timed_s": round(outcome.tally.timed_s, 2),
              "reference_s": round(outcome.tally.reference_s, 2), "measured": outcome.measured}
    if env.get("resumed"):
        env["resumed"][-1]["actual"] = actual
    else:
        env["actual"] = actual
    write_json_atomic(path, env)


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep the objects alive before the run (torch, libraries, the plan) out of every garbage collection.

    The runner collects garbage between cases; with torch imported a full collection walks some 200,000
    objects (~0.1 s each time, an eighth of a CPU quick run). Garbage is collected first, so only live
    objects are frozen, and the heap is unfrozen when the run ends.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


STATUS_STYLE = {"ok": "green", "mismatch": "bold red", "error": "red", "oom": "magenta", "skipped": "yellow",
                "timeout": "red"}


def print_summary(records: list[Record], console: Console) -> None:
    """A compact table per case: rows backends; status, median ms, TFLOP/s, peak memory, error."""
    by_case: dict[str, list[Record]] = {}
    for record in records:
        by_case.setdefault(record.case_id or "", []).append(record)
    for case_id, rows in by_case.items():
        table = Table(title=case_id, title_justify="left", title_style="bold")
        for column in ("backend", "status", "median ms", "interval", "TFLOP/s", "peak mem", "error / bound", "note"):
            table.add_column(column, justify="right" if column not in ("backend", "status", "note") else "left",
                             overflow="fold")
        for r in rows:
            timed = r.time_ms is not None
            table.add_row(
                r.backend,
                f"[{STATUS_STYLE[r.status]}]{r.status}[/]",
                ("~" if r.noisy else "") + ("!" if r.throttled else "") + f"{r.time_ms:.3f}" if timed else "–",
                f"{r.ci_low_ms:.3f}–{r.ci_high_ms:.3f}" if timed and r.ci_low_ms is not None else "–",
                f"{r.tflops:.3f}" if timed and r.tflops is not None else "–",
                fmt_bytes(r.peak_memory_bytes) if r.peak_memory_bytes is not None else "–",
                f"{r.max_abs_error:.1e} / {r.error_bound:.1e}" if r.max_abs_error is not None else "–",
                (r.reason or r.kernel or "")[:160],
            )
        console.print(table)
    if any(r.noisy for r in records):
        console.print("~ before a median: noisy, its interval is wider than the precision asked (or it has too few "
                      "samples for one) or its IQR is over 10% of it", markup=False)
    if any(r.throttled for r in records):
        console.print("! before a median: timed on a throttled or shared GPU (extra.clock_event_reasons, "
                      "extra.other_gpu_processes)", markup=False)

