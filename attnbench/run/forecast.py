"""A run's wall time before it starts (`run --dry-run`) and its ETA: one model (docs/run-time.md)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from attnbench.backends.naive import NaiveBackend
from attnbench.core import counting, policy, workload
from attnbench.core.case import DTYPE_BYTES, group_of
from attnbench.run.calibration import Machine
from attnbench.run.skip import Facts, why_skipped

if TYPE_CHECKING:
    from attnbench.backends.base import Backend
    from attnbench.core.case import Case
    from attnbench.timing.timers import TimingSettings

MODE_PARTS = {"fwd": ("fwd",), "bwd": ("bwd",), "fwd_bwd": ("fwd", "bwd")}

# How often a slow CPU forward's checked call is also one of its samples (fitted).
CHECK_JOINS = 0.5
# Coefficient of variation of a call's samples: how many samples the interval needs.
NOISE = {"cpu": 0.03, "cuda": 0.01}


# A backend's kind, for what its measurements cost beside the call (kind_of).
KINDS = ("torch", "library", "compiled")


@dataclass(frozen=True, kw_only=True)
class Overheads:
    """In seconds; `basis` says where the numbers come from."""

    startup_s: float  # before the first measurement
    per_measurement_s: float  # around every measurement that runs
    per_skip_s: float  # a measurement skipped before any tensor exists
    per_case_s: float  # inputs, and freeing them
    worker_start_s: float  # an isolated run's worker process
    report_s: float
    per_chart_s: float
    compile_s: float  # a cold flex compile of a forward, in its measurement
    compile_cached_s: float  # a load from inductor's on-disk cache
    backward_compile: float  # in forward compiles
    backward_load: float  # in forward loads
    pool_compile_s: float  # a forward's compile in the compile phase, its processes side by side
    pool_backward: float  # in forward compiles there
    per_round_s: float  # a later round's prepare and progress
    profiler_s: float  # torch.profiler's first session in a process
    profile_s: float = 0.0  # the profiled call of each measurement that runs, beside per_measurement_s
    trace_s: float = 0.0  # with --trace, its traced sample and files
    setup_s: dict[str, float] = field(default_factory=dict)  # by KINDS: prepare and first calls beside compiles
    reference_scale: float = 1.0  # the references' seconds against reference_s's
    basis: str = ""


def kind_of(backend: Backend) -> str:
    """"compiled" (torch.compile), "torch" (PyTorch's own kernels), "library" (another library's, with its plans
    and JIT)."""
    if backend.cost.compiles:
        return "compiled"
    return "torch" if backend.library == "torch" else "library"


# Fitted on instrumented runs of `run quick` and suites/long.yaml; compile_cached_s by benchmarks/flex_warm_load.py;
# the profiler's first session by a fresh process's first profile_call.
CPU_OVERHEADS = Overheads(startup_s=3.4, per_measurement_s=0.025, per_skip_s=0.001, per_case_s=0.01,
                          worker_start_s=1.3, report_s=0.6, per_chart_s=0.12, compile_s=6.0, compile_cached_s=0.15,
                          backward_compile=2.0, backward_load=2.0, pool_compile_s=6.0, pool_backward=2.0,
                          per_round_s=0.010, profiler_s=0.01,
                          basis="fitted on instrumented CPU runs of suites/quick.yaml and suites/long.yaml")
# The GPU's report_s, per_chart_s, per_round_s and a compile in a measurement (compile_s, backward_compile) are
# the 2026-11-30 H200 runs'; the rest is written by scripts/fit_forecast.py from the records its basis names
# (tests/test_forecast.py fits them again).
# fitted: begin
GPU_OVERHEADS = Overheads(startup_s=16.75, per_measurement_s=0.06, per_skip_s=0.07, per_case_s=0.678,
                          worker_start_s=5.42, report_s=1.5, per_chart_s=0.35, compile_s=3.0, compile_cached_s=1.751,
                          backward_compile=1.5, backward_load=0.24, pool_compile_s=5.38, pool_backward=7.11,
                          per_round_s=0.01, profiler_s=0.0, profile_s=0.033, trace_s=0.0,
                          setup_s={"torch": 0.199, "library": 1.022, "compiled": 0.314}, reference_scale=2.56,
                          basis="fitted by scripts/fit_forecast.py on reports/NVIDIA-H200-20261204-c671d98/check")
# fitted: end


def element_bytes(dtype: str) -> int:
    return 8 if dtype == "float64" else DTYPE_BYTES[dtype]


def pairs(case: Case, kind: str) -> int:
    """(query, key) pairs a kernel of this kind computes, over the batch and heads."""
    explicit = kind == "causal-flag" and case.window is not None  # a window given as an explicit mask
    if kind == "dense" or explicit or not (case.causal or case.window is not None):
        count = case.seq_len * case.kv_seq_len
    elif kind == "causal" and case.window is not None:
        count = (workload.visible_pairs(dataclasses.replace(case, window=None)) if case.causal
                 else case.seq_len * case.kv_seq_len)
    else:
        count = workload.visible_pairs(case)
    return case.batch * case.heads * count


def call_s(case: Case, backend: Backend, machine: Machine, dtype: str | None = None) -> float:
    """Seconds of one timed call, from the backend's declared cost."""
    kernel = backend.cost.kernel(machine.device)
    dtype = dtype or case.dtype
    work = counting.forward_flops_per_pair(case) * pairs(case, kernel.pairs)
    scores = case.batch * case.heads * case.seq_len * case.kv_seq_len * element_bytes(dtype)
    rate = machine.rate(dtype) * 1e12
    total = 0.0
    for part in MODE_PARTS[case.mode]:
        backward = part == "bwd"
        efficiency = kernel.efficiency_bwd if backward else kernel.efficiency_fwd
        passes = kernel.score_passes_bwd if backward else kernel.score_passes_fwd
        flops = work * (counting.MODE_FLOP_FACTOR["bwd"] if backward else 1.0)
        total += flops / (rate * efficiency) + passes * scores / (machine.bandwidth_gbs * 1e9)
        total += kernel.calls * (2 if backward else 1) * machine.launch_ms * 1e-3
    return total


def reference_s(case: Case, machine: Machine) -> float:
    """Seconds of the case's references: float64 naive on the checked rows, and naive in the case's dtype."""
    from attnbench.verify.inputs import FULL_CHECK_PAIRS, SUBSET_ROWS, grad_checkable

    full = case.batch * case.heads * case.seq_len * case.kv_seq_len <= FULL_CHECK_PAIRS[case.device]
    share = 1.0 if full or case.seq_len <= SUBSET_ROWS + 2 else (SUBSET_ROWS + 2) / case.seq_len
    checked = dataclasses.replace(case, mode="fwd_bwd" if grad_checkable(case) else "fwd")
    return share * (call_s(checked, NaiveBackend, machine, "float64") + call_s(checked, NaiveBackend, machine))


@dataclass(frozen=True)
class TaskForecast:
    backend: str
    seconds: float
    runs: bool  # False: skipped before any tensor exists


@dataclass
class Forecast:
    machine: Machine
    tasks: list[TaskForecast] = field(default_factory=list)
    startup_s: float = 0.0
    report_s: float = 0.0
    reference_s: float = 0.0  # part of the tasks' seconds, as compile_s
    compile_s: float = 0.0
    precompile_s: float = 0.0
    compile_workers: int = 0  # 0: no compile phase
    refine_s: float = 0.0
    precompiled: int = 0
    roofs_s: float = 0.0
    basis: str = ""  # the overheads'

    @property
    def fixed_s(self) -> float:
        return self.startup_s + self.roofs_s + self.precompile_s + self.report_s + self.refine_s

    @property
    def total_s(self) -> float:
        return self.fixed_s + sum(t.seconds for t in self.tasks)

    def by_backend(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for task in self.tasks:
            out[task.backend] = out.get(task.backend, 0.0) + task.seconds
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"total_s": round(self.total_s, 2), "startup_s": round(self.startup_s, 2),
                "roofs_s": round(self.roofs_s, 2), "report_s": round(self.report_s, 2),
                "reference_s": round(self.reference_s, 2), "compile_s": round(self.compile_s, 2),
                "precompile_s": round(self.precompile_s, 2), "compile_workers": self.compile_workers,
                "precompiled": self.precompiled, "refine_s": round(self.refine_s, 2),
                "by_backend_s": {k: round(v, 2) for k, v in self.by_backend().items()},
                "measurements": len(self.tasks), "measured": sum(t.runs for t in self.tasks),
                "machine": self.machine.to_dict(), "estimate": self.machine.estimate, "basis": self.basis}


def sample_ms_of(case: Case, t_ms: float, machine: Machine, settings: TimingSettings) -> float:
    """Milliseconds of the first round's samples (all of them with one round)."""
    needed = max(6, math.ceil((1.96 * 1.2533 * NOISE[machine.device] / settings.precision) ** 2))
    count = min(settings.max_samples, max(settings.min_samples, needed))
    sample_ms = min(count * t_ms, max(settings.budget_ms + t_ms, settings.min_samples * t_ms))
    if not case.needs_grad and machine.device == "cpu" and t_ms >= settings.warmup_ms:
        sample_ms -= CHECK_JOINS * t_ms
    return sample_ms


def measurement_s(case: Case, backend: Backend, machine: Machine, settings: TimingSettings,
                  overheads: Overheads, compiled: bool, shared: bool = False, trace: bool = False
                  ) -> tuple[float, float]:
    """(seconds, of which compile) of one measurement that runs. `compiled`: its graph is in inductor's cache;
    `shared`: an already compiled kernel serves it; `trace`: --trace."""
    t = call_s(case, backend, machine)
    t_ms = t * 1e3
    compile_s = compile_price(case, backend, overheads, compiled) if not shared else 0.0
    check = call_s(dataclasses.replace(case, mode="fwd_bwd"), backend, machine) if case.needs_grad else t
    if case.needs_grad:
        warm_ms = t_ms if t_ms >= settings.warmup_ms else min(settings.warmup_ms, 6 * t_ms)
    else:  # the check is the first warm-up call (and, on a CPU, often the first sample)
        warm_ms = max(0.0, min(settings.warmup_ms - t_ms, 5 * t_ms))
    sample_ms = sample_ms_of(case, t_ms, machine, settings)
    # The sustain loop at its minimum, on CUDA only: RAPL on a CPU is not assumed.
    loop_ms = max(settings.energy_ms, t_ms) if settings.energy_ms and machine.device == "cuda" else 0.0
    later_ms = sum(round_windows_ms(case, t_ms, sample_ms, settings, overheads)) - sample_ms
    # The profiled call runs the call once more.
    beside = (overheads.per_measurement_s + overheads.profile_s + t + (overheads.trace_s if trace else 0.0)
              + overheads.setup_s.get(kind_of(backend), 0.0))
    return beside + compile_s + check + (warm_ms + sample_ms + loop_ms + later_ms) / 1e3, compile_s


def round_windows_ms(case: Case, t_ms: float, sample_ms: float, settings: TimingSettings,
                     overheads: Overheads) -> list[float]:
    """Each round's window (ms), a later one's with its prepare and warm-up."""
    if settings.rounds <= 1:
        return [sample_ms]
    from attnbench.run.rounds import due_again

    share = max(sample_ms / settings.rounds, settings.min_samples * t_ms)
    spent, windows = [share], [share]
    warm_ms = t_ms if t_ms >= settings.warmup_ms else min(settings.warmup_ms, 6 * t_ms)
    for round_number in range(2, settings.rounds + 1):
        if not due_again(spent, round_number, settings):
            break
        spent.append(share)
        windows.append(share + overheads.per_round_s * 1e3 + warm_ms + (t_ms if case.mode != "fwd" else 0.0))
    return windows


def refine_s(tasks: list[tuple[Case, Backend, float]], settings: TimingSettings, machine: Machine,
             overheads: Overheads) -> float:
    """Seconds of refining: the windows each measurement lacks after its rounds, at most refine × all budgets."""
    if settings.refine <= 0 or not tasks:
        return 0.0
    from attnbench.core.interval import windows_needed
    from attnbench.run.rounds import window_of

    noise = policy.device(machine.device).window_noise
    needed = windows_needed([1.0, math.exp(noise * math.sqrt(2))], machine.device, settings.precision,
                            settings.confidence)
    lacking, beside = 0.0, 0.0
    for case, _, t_ms in tasks:
        if t_ms <= 0:
            continue
        have = len(round_windows_ms(case, t_ms, sample_ms_of(case, t_ms, machine, settings), settings, overheads))
        retimes = max(0, needed - have)
        # A steady warm-up call joins the samples; a cheaper call warms up for warmup_ms.
        warm_ms = 0.0 if t_ms >= settings.warmup_ms else settings.warmup_ms
        lacking += retimes * window_of(t_ms, settings)
        beside += retimes * (overheads.per_round_s * 1e3 + warm_ms + (t_ms if case.mode != "fwd" else 0.0))
    spent = min(lacking, settings.refine * settings.budget_ms * len(tasks))
    return (spent + (beside * spent / lacking if lacking else 0.0)) / 1e3


def compile_price(case: Case, backend: Backend, overheads: Overheads, cached: bool, pool: bool = False) -> float:
    """Seconds of one compile; `cached`: a load from a cache; `pool`: a compile in the compile phase."""
    if not backend.cost.compiles:
        return 0.0
    if backend.cost.jit is not None:
        return backend.cost.jit.cached_s if cached else backend.cost.jit.cold_s
    if cached:
        return overheads.compile_cached_s * (overheads.backward_load if case.needs_grad else 1)
    if pool:
        return overheads.pool_compile_s * (overheads.pool_backward if case.needs_grad else 1)
    return overheads.compile_s * (overheads.backward_compile if case.needs_grad else 1)


def forecast(tasks: list[tuple[Case, Backend]], settings: TimingSettings, machine: Machine, *,
             isolate: bool = False, workers: int = 1, compiled: set[str] | None = None,
             report: bool = True, timer_modes: tuple[str, ...] | None = None, deterministic: bool = False,
             compile_workers: int = 0, roofs_s: float = 0.0, trace: bool = False,
             absent: dict[str, str] | None = None, overheads: Overheads | None = None,
             timer_runs_on: tuple[str, ...] | None = None) -> Forecast:
    """`compiled`: graphs already in inductor's cache (Backend.compile_key); with `compile_workers` the others are
    compiled first (attnbench.run.precompile). `absent`: backends known not installed, with the reason (a GPU
    estimate takes every other as installed); `overheads`: the device's own unless given."""
    overheads = overheads or (GPU_OVERHEADS if machine.device == "cuda" else CPU_OVERHEADS)
    compiled = set(compiled or ())
    on_disk = set(compiled)
    ahead: list[float] = []
    queued: set[str] = set()
    result = Forecast(machine, roofs_s=roofs_s, basis=overheads.basis)
    seen_cases: set[Case] = set()
    groups: set[tuple] = set()
    dynamic_lengths: dict[str, set[tuple[int, int]]] = {}
    timed: list[tuple[Case, Backend, float]] = []
    conformance: dict[str, str | None] = {}
    for case, backend in tasks:
        groups.add(group_of(case))
        if why_skipped(case, backend, facts(case, backend, machine, timer_modes, conformance, deterministic, absent,
                                            timer_runs_on)):
            result.tasks.append(TaskForecast(backend.name, overheads.per_skip_s, False))
            continue
        key = backend.compile_key(case)
        shared, cached = False, key in compiled
        before_sharing = backend.compiles_before_sharing(case)
        if key is not None and before_sharing is not None:
            lengths = dynamic_lengths.setdefault(key, set())
            lengths.add((case.seq_len, case.kv_seq_len))
            shared, cached = len(lengths) > before_sharing, key in on_disk
        fresh = not cached if backend.cost.jit is None else key not in queued
        if compile_workers and key is not None and not shared and fresh:
            ahead.append(compile_price(case, backend, overheads, cached, pool=True))
            queued.add(key)
            cached = True
        seconds, compile_s = measurement_s(case, backend, machine, settings, overheads, cached, shared, trace)
        if key is not None:
            compiled.add(key)
        if case not in seen_cases:
            seen_cases.add(case)
            ref = reference_s(case, machine) * overheads.reference_scale
            result.reference_s += ref
            seconds += ref + overheads.per_case_s
        result.compile_s += compile_s
        result.tasks.append(TaskForecast(backend.name, seconds / max(1, workers), True))
        timed.append((case, backend, call_s(case, backend, machine) * 1e3))
    if not isolate and workers == 1:  # refine runs in this process only
        result.refine_s = refine_s(timed, settings, machine, overheads)
    result.startup_s = overheads.startup_s + (overheads.worker_start_s if isolate else 0.0) \
        + (overheads.profiler_s if timed else 0.0)
    if ahead:
        result.compile_workers, result.precompiled = compile_workers, len(ahead)
        result.precompile_s = overheads.worker_start_s + max(sum(ahead) / min(compile_workers, len(ahead)), max(ahead))
    if report and tasks:
        result.report_s = overheads.report_s + overheads.per_chart_s * len(groups)
    return result


def facts(case: Case, backend: Backend, machine: Machine, timer_modes: tuple[str, ...] | None,
          conformance: dict[str, str | None], deterministic: bool = False, absent: dict[str, str] | None = None,
          timer_runs_on: tuple[str, ...] | None = None) -> Facts:
    """The skip rule's facts as the run will find them. On a datasheet estimate every CUDA backend but those
    `absent` is taken as installed and conforming."""
    from attnbench.backends.conformance import conformance_problem

    if case.device not in backend.capabilities.devices:
        return Facts(availability=f"{backend.name} is not made for {case.device}")
    if absent and backend.name in absent:
        return Facts(availability=absent[backend.name])
    if machine.estimate:
        return Facts(free_memory=machine.memory_bytes, timer_modes=timer_modes, deterministic=deterministic,
                     timer_runs_on=timer_runs_on)
    if backend.name not in conformance:
        conformance[backend.name] = conformance_problem(backend)
    problem = conformance[backend.name]
    return Facts(problem, None if problem else backend.availability(case.device), machine.memory_bytes, timer_modes,
                 deterministic=deterministic, timer_runs_on=timer_runs_on)


def fmt_duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
