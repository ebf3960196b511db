"""A run from the user's side: resolve suite, device and backends; write results and env; show progress."""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from attnbench.backends.base import Backend
from attnbench.backends.registry import default_registry
from attnbench.core.case import Case
from attnbench.core.errors import AttnbenchError
from attnbench.records.env import RunEnv
from attnbench.records.folder import RunFolder
from attnbench.records.results import Record, ResultsWriter, key_of, replace_records
from attnbench.run import calibration, compile_cache, forecast, precompile, rounds
from attnbench.run.devices import check_devices, worker_env
from attnbench.run.env import collect_env, resolve_device
from attnbench.run.heap import frozen_heap
from attnbench.run.isolation import Isolated, WorkerConfig
from attnbench.run.measure import InProcess, Settings
from attnbench.run.options import RunOptions
from attnbench.run.pace_probe import PaceProbe
from attnbench.run.progress import Eta, ProgressListener
from attnbench.run.recording import RunInfo, now
from attnbench.run.schedule import Schedule
from attnbench.run.shard import select
from attnbench.run.tally import Phases, Tally, actual
from attnbench.sweep.suite import Suite, load_suite
from attnbench.timing.timers import TimingSettings, check_timer, timer_for, timer_modes, timer_runs_on
from attnbench.verify.determinism import use_cublas_workspace

if TYPE_CHECKING:
    from rich.console import Console

    from attnbench.core.peaks import MeasuredRoofs
    from attnbench.run.forecast import Forecast
    from attnbench.run.precompile import PoolResult
    from attnbench.sweep.schema import Timing


# timing.energy_ms's default: a GPU's burst state is waited out and its energy read; a CPU has no burst state.
DEFAULT_ENERGY_MS = {"cuda": 1000.0, "cpu": 0.0}


@dataclass(frozen=True)
class Plan:
    suite: Suite
    device: str
    cases: list[Case]
    backends: list[Backend]
    plugins: tuple[str, ...] = ()

    def tasks(self) -> list[tuple[Case, Backend]]:
        return [(case, backend) for case in self.cases for backend in self.backends]


@dataclass(frozen=True)
class Outcome:
    planned: int
    measured: int
    mismatches: int
    stopped: bool
    tally: Tally = field(default_factory=Tally)
    records: list[Record] = field(default_factory=list)
    results: Path | None = None
    unavailable: dict[str, str] = field(default_factory=dict)
    workers: int = 1  # measuring side by side (--devices)
    implausible: int = 0  # timed faster than the GPU can run: a broken measurement

    @property
    def failed(self) -> bool:
        """A mismatch or a broken timing: the run exits 1."""
        return bool(self.mismatches or self.implausible)


def settings_of(suite: Suite, device: str) -> TimingSettings:
    t = suite.timing(device)
    energy_ms = t.energy_ms if t.energy_ms is not None else DEFAULT_ENERGY_MS.get(device, 0.0)
    return TimingSettings(t.warmup_ms, t.budget_ms, t.min_samples, t.max_samples, t.precision, energy_ms=energy_ms,
                          rounds=t.rounds or 1, refine=t.refine or 0.0)


def plan(suite_path: Path, options: RunOptions, estimate_gpu: str | None = None) -> Plan:
    """Validate everything the run depends on, writing and running nothing."""
    registry = default_registry(list(options.plugins))
    suite = load_suite(suite_path)
    names = registry.chosen(list(options.backends) or None, suite)
    device = "cuda" if estimate_gpu else resolve_device(options.device or suite.model.device)
    return Plan(suite, device, suite.cases(device), registry.resolve(names), options.plugins)


def task_key(case: Case, backend: Backend) -> tuple:
    return key_of({**case.fields(), "backend": backend.name})


def wants_deterministic(plan: Plan, options: RunOptions) -> bool:
    return options.deterministic or plan.suite.model.deterministic


def resolve_isolation(device: str, isolate: bool | None, timeout_s: float | None) -> bool:
    """Whether measurements run in a worker process: asked for, on CUDA, or to enforce a time limit."""
    if timeout_s is not None and isolate is False:
        raise AttnbenchError(f"--timeout {timeout_s:g}: a time limit needs a worker process to kill; "
                             f"drop --no-isolate")
    if isolate is not None:
        return isolate
    return device == "cuda" or timeout_s is not None


@dataclass(frozen=True)
class RunMode:
    """How a run measures; the dry run's forecast and the run's own both come from it."""

    timing: Timing
    settings: TimingSettings
    timeout_s: float | None
    isolate: bool
    workers: int  # one per --devices GPU, else one
    compile_workers: int
    deterministic: bool


def mode_of(plan: Plan, options: RunOptions, gpu: str | None = None) -> RunMode:
    """`gpu`: a dry run's estimate for a GPU that is not here."""
    timing = plan.suite.timing(plan.device)
    timeout_s = options.timeout_s if options.timeout_s is not None else timing.timeout_s
    isolate = resolve_isolation(plan.device, options.isolate, timeout_s)
    if options.devices is not None:
        if options.isolate is False:
            raise AttnbenchError("--devices: each GPU gets its own worker process; drop --no-isolate")
        isolate = True
    compile_workers = options.compile_workers
    if compile_workers is None:
        compile_workers = precompile.ESTIMATE_GPU_WORKERS if gpu else precompile.default_workers()
    return RunMode(timing, settings_of(plan.suite, plan.device), timeout_s, isolate,
                   len(options.devices) if options.devices is not None else 1, compile_workers,
                   wants_deterministic(plan, options))


def selected(plan: Plan, options: RunOptions) -> list[tuple[Case, Backend]]:
    tasks = plan.tasks()
    return select(tasks, options.shard) if options.shard is not None else tasks


def predict(plan: Plan, options: RunOptions, gpu: str | None = None) -> Forecast:
    """The one forecast: `--dry-run` prints it, the run writes it to env.json and counts its ETA down."""
    import torch

    mode = mode_of(plan, options, gpu)
    cache = compile_cache.use(options.cache_dir)
    machine = calibration.datasheet(gpu) if gpu else calibration.cached_calibration(plan.device, cache)
    tasks = selected(plan, options)
    return forecast.forecast(tasks, mode.settings, machine, isolate=mode.isolate,
                             workers=mode.workers, compiled=compile_cache.compiled(cache, torch.__version__),
                             timer_modes=timer_modes(options.timer), deterministic=mode.deterministic,
                             timer_runs_on=timer_runs_on(options.timer),
                             compile_workers=mode.compile_workers, trace=options.trace,
                             roofs_s=0.0 if gpu else calibration.roofs_seconds(
                                 calibration.roof_dtypes([case for case, _ in tasks])))


@dataclass(frozen=True)
class DryRun:
    plan: Plan
    forecast: Forecast
    timing: Timing
    cpu_timing: bool  # the suite's cpu: block's timing


def dry_run(plan: Plan, options: RunOptions, gpu: str | None = None) -> DryRun:
    timing = plan.suite.timing(plan.device)
    cpu = plan.suite.model.cpu
    return DryRun(plan, predict(plan, options, gpu), timing,
                  plan.device == "cpu" and cpu is not None and cpu.timing is not None)


@dataclass
class Started:
    tasks: list[tuple[Case, Backend]]
    run_id: str
    folder: RunFolder
    predicted: Forecast
    cache: Path
    mode: RunMode
    torch_version: str  # this process's, whatever a resumed run recorded
    roofs: MeasuredRoofs | None = None  # a CPU's, measured at this part's start
    # Backends that cannot run on the device at all, with their skip reason (announced once).
    unavailable: dict[str, str] = field(default_factory=dict)


def prepare(plan: Plan, options: RunOptions) -> tuple[RunMode, Path]:
    """Checks and settings made before anything is written: the compile cache before any library is imported
    (FlashInfer reads its JIT folder at import), cuBLAS's workspace before any cuBLAS call (workers inherit it)."""
    check_timer(plan.device, options.timer)
    cache = compile_cache.use(options.cache_dir)
    mode = mode_of(plan, options)
    if mode.deterministic and plan.device == "cuda":
        use_cublas_workspace()
    if options.devices is not None:
        check_devices(plan.device, list(options.devices))
    return mode, cache


def write_env(plan: Plan, options: RunOptions, directory: Path, mode: RunMode, cache: Path,
              predicted: Forecast, errors: Console, roofs: MeasuredRoofs | None = None) -> Started:
    """env.json written (or a resumed part added), and the measurements left."""
    env = collect_env(plan.device)
    torch_version = RunEnv.from_dict(env).torch
    if options.resume:
        folder, tasks, done = resume_part(plan, options, directory, env, errors)
        folder.add_part({"timestamp": now(), "measurements": len(tasks), "already_done": done, "env": env,
                         "deterministic": mode.deterministic, "prediction": predicted.to_dict(),
                         "roofs": roofs.to_dict() if roofs else None})
    else:
        folder, tasks = RunFolder(directory), selected(plan, options)
        folder.refuse_existing(hint=f", or --resume {directory} to finish that run")
        try:
            folder.make()
        except OSError as exc:
            raise AttnbenchError(f"{directory}: cannot create the output directory ({exc.strerror})") from None
        env.update(run_id=uuid.uuid4().hex[:12], suite_name=plan.suite.name, suite_file=str(plan.suite.path),
                   suite_text=plan.suite.text, timestamp=now(), plugins=list(plan.plugins),
                   shard=str(options.shard) if options.shard else None, isolated=mode.isolate,
                   timeout_s=mode.timeout_s, devices=list(options.devices) if options.devices is not None else None,
                   peak_tflops=options.peak_tflops, peak_bandwidth_gbs=options.peak_bandwidth_gbs,
                   timer=options.timer, cache_dir=str(cache), deterministic=mode.deterministic,
                   prediction=predicted.to_dict(), roofs=roofs.to_dict() if roofs else None)
        folder.write_env(env)
    run_id = folder.facts.run_id or uuid.uuid4().hex[:12]
    return Started(tasks, run_id, folder, predicted, cache, mode, torch_version, roofs)


def resume_part(plan: Plan, options: RunOptions, directory: Path, env: dict,
                errors: Console) -> tuple[RunFolder, list[tuple[Case, Backend]], int]:
    folder = RunFolder.resume(directory, env, plan.suite.name, str(options.shard) if options.shard else None,
                              options.force)
    if folder.drop_cut_line():
        errors.print(f"{folder.results}: dropped a last line cut off when the run was killed")
    done = folder.done_keys()
    return folder, [task for task in selected(plan, options) if task_key(*task) not in done], len(done)


def announce(plan: Plan, options: RunOptions, directory: Path, run: Started, errors: Console) -> None:
    mode = run.mode
    scope = f" (shard {options.shard})" if options.shard else ""
    scope += " (resuming: the rest of the run)" if options.resume else ""
    how = (f"isolated, timeout {mode.timeout_s:g} s" if mode.isolate and mode.timeout_s
           else "isolated" if mode.isolate else "in-process")
    if options.devices is not None:
        how += f", one worker on each of devices {','.join(map(str, options.devices))}"
    how += ", deterministic kernels only" if mode.deterministic else ""
    errors.print(f"attnbench {plan.suite.name}: {len(plan.cases)} cases × {len(plan.backends)} backends → "
                 f"{len(run.tasks)} measurements{scope} on {plan.device} ({run.folder.facts.device_name}, {how}) → "
                 f"{directory}; predicted {forecast.fmt_duration(run.predicted.total_s)}")
    if run.unavailable:
        errors.print("not on this machine (every measurement of theirs is recorded skipped, with this reason):",
                     markup=False)
        width = max(map(len, run.unavailable))
        for name, reason in run.unavailable.items():
            errors.print(f"  {name:<{width}}  {reason}", markup=False, soft_wrap=True)


def unavailable_here(plan: Plan, tasks: list[tuple[Case, Backend]]) -> dict[str, str]:
    """Backends that cannot run on the device at all, with the skip rule's reason."""
    from attnbench.backends.conformance import conformance_problem

    names = {backend.name for _, backend in tasks}
    reasons = {backend.name: conformance_problem(backend) or backend.availability(plan.device)
               for backend in plan.backends if backend.name in names}
    return {name: reason for name, reason in reasons.items() if reason}


def measurers_for(plan: Plan, options: RunOptions, mode: RunMode, info: RunInfo, directory: Path) -> list:
    trace_dir = str(directory) if options.trace else None
    if options.devices is not None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        return [Isolated(WorkerConfig(info, plan.device, mode.settings, plan.plugins, worker_env(index, visible),
                                      options.timer, mode.deterministic, trace_dir), mode.timeout_s)
                for index in options.devices]
    if mode.isolate:
        return [Isolated(WorkerConfig(info, plan.device, mode.settings, plan.plugins, timer=options.timer,
                                      deterministic=mode.deterministic, trace_dir=trace_dir), mode.timeout_s)]
    return [InProcess(timer_for(plan.device, options.timer),
                      Settings(info, mode.settings, deterministic=mode.deterministic,
                               trace_dir=directory if options.trace else None))]


@dataclass
class Compiles:
    """The pool's seconds by graph, and the graphs the measurements compiled."""

    ahead: dict[str, float]
    backends: dict[str, Backend]
    compiled: list[str] = field(default_factory=list)

    def noted(self, case: Case, record: Record) -> Record:
        backend = self.backends.get(record.backend)
        if backend is None or not (self.ahead or record.setup.compile_s is not None):
            return record
        key = backend.compile_key(case)
        if key is not None and record.setup.compile_s is not None:
            self.compiled.append(key)
        seconds = self.ahead.pop(key or "", None)
        if seconds is None:
            return record
        return dataclasses.replace(record, extra={**record.extra, "precompile_s": round(seconds, 3)})


def measure_all(plan: Plan, options: RunOptions, directory: Path, run: Started, ahead: PoolResult | None,
                errors: Console, should_stop: Callable[[], bool], phases: Phases) -> tuple[int, list[Record]]:
    """Adds the workers' starts and the later rounds to `phases`."""
    if plan.device == "cpu":  # a CPU's roofs are the run's measured ones
        measured = tuple((m.dtype, m.gflops / 1e3) for m in run.roofs.matmul) if run.roofs else ()
        bandwidth = run.roofs.copy_gbs if run.roofs else None
    else:  # a GPU's are its calibration's
        machine = calibration.cached_calibration(plan.device, run.cache)
        measured, bandwidth = tuple(sorted(machine.tflops.items())), machine.bandwidth_gbs
    info = RunInfo(run.run_id, plan.suite.name, run.folder.facts.device_name, options.peak_tflops,
                   options.peak_bandwidth_gbs, measured, bandwidth, run.roofs)
    backends = {backend.name: backend for backend in plan.backends}
    precompiled, over_budget = (ahead.compiled_keys(), ahead.over_budget()) if ahead else ({}, {})
    records: list[Record] = []
    cases: list[Case] = []
    compiles = Compiles(precompiled, backends)
    eta = Eta(run.predicted, run.tasks, run.mode.workers)
    probe = PaceProbe() if plan.device == "cpu" and options.devices is None else None
    with ResultsWriter(run.folder.results) as writer, \
            ProgressListener(errors, len(run.tasks), eta, run.unavailable) as listener, frozen_heap():
        schedule = Schedule(info, listener, should_stop, oom_pruning=options.oom_pruning,
                            not_built=lambda case, backend: over_budget.get(backend.compile_key(case) or ""))

        def sink(case: Case, record: Record) -> None:
            record = compiles.noted(case, record)
            with phases.timing("records"):
                writer.append(record)
            records.append(record)
            cases.append(case)
            if probe is not None:
                with phases.timing("pace"):
                    probe.tick()

        measurers = measurers_for(plan, options, run.mode, info, directory)
        measured = schedule.run(run.tasks, sink, measurers)
    starts = [m for m in measurers if isinstance(m, Isolated)]
    if starts:
        # Side by side (--devices) they start together: their mean start is the wall's.
        phases.add("worker_start", sum(m.start_s for m in starts) / len(starts), sum(m.started for m in starts))
        phases.add("worker_stop", sum(m.stop_s for m in starts) / len(starts))
    settings = run.mode.settings
    facts: dict = {}
    if (settings.rounds > 1 or settings.refine > 0) and isinstance(measurers[0], InProcess) and records:
        resampler = rounds.InProcessResampler(measurers[0], probe.tick if probe is not None else None)
        sampled_s, began = Tally.of(records).phases.get("samples", 0.0), phases.clock()
        with frozen_heap():
            done = rounds.later_rounds(records, cases, backends, resampler, settings, info, run.run_id,
                                       should_stop, lambda changed: replace_records(run.folder.results, changed),
                                       lambda line: errors.print(line, markup=False))
        added_s = Tally.of(records).phases.get("samples", 0.0) - sampled_s  # the records' samples hold them
        phases.add("rounds", max(0.0, phases.clock() - began - added_s))
        facts["rounds"] = done.to_dict()
    if probe is not None and probe.windows_ms:
        probe.finish()
        facts["pace_probe"] = probe.to_dict()
    if facts:
        run.folder.note(**facts)
    compile_cache.note_compiled(run.cache, run.torch_version, compiles.compiled)
    return measured, records


def execute(plan: Plan, directory: Path, errors: Console, should_stop: Callable[[], bool],
            options: RunOptions | None = None, phases: Phases | None = None) -> Outcome:
    """Run the plan into `directory`; progress goes to `errors`; the run's own phases (tally.PHASES) to `phases`."""
    options = options or RunOptions()
    phases = phases if phases is not None else Phases()
    with phases.timing("env"):
        mode, cache = prepare(plan, options)
    with phases.timing("calibration"):
        calibration.cached_calibration(plan.device, cache)  # the forecast's, read back from the cache there
        # Measured before any worker or compile of the run starts beside them.
        roofs = calibration.measure_roofs(calibration.roof_dtypes([case for case, _ in selected(plan, options)]))
    with phases.timing("env"):
        run = write_env(plan, options, directory, mode, cache, predict(plan, options), errors, roofs)
        run.unavailable = unavailable_here(plan, run.tasks)
        announce(plan, options, directory, run, errors)
    with phases.timing("compile_ahead"):
        ahead = compile_phase(run.tasks, mode.compile_workers, plan, options, cache, run.torch_version, errors,
                              should_stop)
    if ahead is not None:
        run.folder.note(precompile=ahead.to_dict())
    measured, records = measure_all(plan, options, directory, run, ahead, errors, should_stop, phases)
    return finish(run, records, measured)


def finish(run: Started, records: list[Record], measured: int) -> Outcome:
    total = len(run.tasks)
    mismatches = sum(r.status == "mismatch" for r in records)
    return Outcome(total, measured, mismatches, measured < total, Tally.of(records), records,
                   run.folder.results, run.unavailable, run.mode.workers,
                   sum(r.status == "implausible" for r in records))


def compile_phase(tasks: list[tuple[Case, Backend]], workers: int, plan: Plan, options: RunOptions, cache: Path,
                  torch_version: str, errors: Console, should_stop: Callable[[], bool]) -> PoolResult | None:
    """None when there is no pool or nothing to compile."""
    jobs = precompile.jobs_of(tasks, compile_cache.compiled(cache, torch_version))
    if not workers or not jobs:
        return None
    envs = None
    if options.devices is not None:  # one GPU per process, as the measurers
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        envs = [worker_env(index, visible) for index in options.devices]
    errors.print(f"compiling {len(jobs)} graph(s) ahead in {min(workers, len(jobs))} process(es) "
                 f"(--compile-workers {workers}) before the first measurement", markup=False)

    def done(result: precompile.JobResult) -> None:
        if result.status == "failed":
            errors.print(f"  compile ahead failed ({result.job.backend} {result.job.cases[0].case_id}; its "
                         f"measurement compiles it): {result.reason}", markup=False, soft_wrap=True)
        elif result.status == "timed_out":
            errors.print(f"  compile ahead stopped ({result.job.backend} {result.job.cases[0].case_id}; its "
                         f"measurements are recorded skipped): {result.reason}", markup=False, soft_wrap=True)

    ahead = precompile.precompile(jobs, workers, plan.device, plan.plugins, envs, options.compile_timeout_s,
                                  should_stop, done)
    compile_cache.note_compiled(cache, torch_version, ahead.compiled_keys())
    summary = ahead.to_dict()
    errors.print(f"compiled ahead: {summary['compiled']} of {len(jobs)} graph(s) in {summary['wall_s']:.1f} s "
                 f"({summary['compile_s_sum']:.1f} s of compiling in {ahead.workers} process(es)); "
                 f"{summary['failed']} failed, {summary['timed_out']} past the limit, {summary['skipped']} refused",
                 markup=False)
    return ahead


def record_actual(directory: Path, outcome: Outcome, wall_s: float, phases: Phases | None = None) -> None:
    """Add what the run (or this part) took to env.json, beside its prediction: `phases`, the run's own."""
    folder = RunFolder.load(directory)
    if folder is not None:
        folder.note(actual=actual(outcome.tally, phases or Phases(), wall_s, outcome.measured, outcome.workers))
