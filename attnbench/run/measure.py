"""The one place a measurement is made (in this process or a worker, both through `InProcess`): every outcome, a
crash included, becomes one record."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnbench.backends.base import Backend, Unsupported, first_line
from attnbench.backends.conformance import conformance_problem
from attnbench.records.carries import RELEASE_FAILED
from attnbench.records.parts import CorrectnessParts, Timing, part_of
from attnbench.run import stages as stage
from attnbench.run.heap import release_memory
from attnbench.run.profiled import Profiled
from attnbench.run.record_parts import Closing, Progress
from attnbench.run.recording import (
    RunInfo,
    make_record,
    percent_of_peak,
    throughput,
    timing_fields,
    unmeasured,
    work_fields,
)
from attnbench.run.skip import Facts, why_skipped
from attnbench.run.stages import finite
from attnbench.run.tally import Phases
from attnbench.timing.timers import Samples, Timer, TimingSettings, timer_for_work
from attnbench.verify.determinism import TORCH_REFUSAL, deterministic_mode
from attnbench.verify.inputs import CaseData
from attnbench.verify.integrity import Guard
from attnbench.verify.quant_data import accuracy_extra, case_data

if TYPE_CHECKING:
    from attnbench.core.case import Case
    from attnbench.records.results import Record


def free_device_memory(device: str) -> int | None:
    if device != "cuda":
        return None
    import torch

    return torch.cuda.mem_get_info()[0]


@dataclass(frozen=True)
class Settings:
    info: RunInfo
    timing: TimingSettings = field(default_factory=TimingSettings)
    free_memory: Callable[[str], int | None] = free_device_memory
    # Checked once per run: the installed libraries do not change.
    conformance: dict[str, str | None] = field(default_factory=dict, compare=False, repr=False)
    deterministic: bool = False
    trace_dir: Path | None = None


def facts_here(case: Case, backend: Backend, timer: Timer, settings: Settings) -> Facts:
    # Conformance first: availability probes may call the library (xformers asks its dispatcher).
    if backend.name not in settings.conformance:
        settings.conformance[backend.name] = conformance_problem(backend)
    conformance = settings.conformance[backend.name]
    return Facts(conformance, None if conformance else backend.availability(case.device),
                 settings.free_memory(case.device), timer.modes, timer.name, settings.deterministic,
                 timer.runs_on)


def measure(data: CaseData, backend: Backend, timer: Timer, settings: Settings,
            on_start: Callable[[CaseData], None] | None = None, phases: Phases | None = None) -> Record:
    """One measurement. `on_start` is called once it will really run: a worker makes the case's reference then and
    starts its time limit. `phases`: what the caller timed for it already (its case's inputs)."""
    case = data.case
    timer = timer_for_work(timer, backend.capabilities.runs_on)
    work = work_fields(case, backend)
    phases = phases or Phases()
    with phases.timing("availability"):  # a library's first import in this process is here
        reason = why_skipped(case, backend, facts_here(case, backend, timer, settings))
    if reason:
        return make_record(settings.info, case, backend.name, "skipped", reason,
                           {**work, **Closing(phases.ms()).fields({}, {})})
    reference_before = data.reference_s
    if on_start is not None:
        on_start(data)
    caught: list[warnings.WarningMessage] = []
    collect = False
    progress = Progress()
    try:
        with deterministic_mode(settings.deterministic):
            status, reason = _measure(data, backend, timer, settings, progress, caught, phases)
    except Unsupported as exc:
        status, reason = "skipped", str(exc)
    except Exception as exc:  # a backend may fail in any way; the sweep goes on
        status, reason = classify(exc, backend, caught, settings.deterministic)
        del exc
        collect = True  # a traceback holds the failed call's tensors in cycles
    found, extra = progress.parts()
    del progress  # free its tensors before release_memory
    asked = backend.deterministic(case) if settings.deterministic else None
    made_s = data.reference_s - reference_before if data.reference_s > reference_before else None
    try:
        with phases.timing("release"):
            release_memory(case.device, collect=collect)
    except Exception as exc:  # noqa: BLE001 - a sticky CUDA error raises again here
        status = "error"
        reason = f"{reason + '; then ' if reason else ''}{type(exc).__name__} {RELEASE_FAILED}: {first_line(exc)}"
    fields = {**work, **Closing(phases.ms(), asked, made_s).fields(found, extra)}
    return make_record(settings.info, case, backend.name, status, reason, fields, timer.name)


def _measure(data: CaseData, backend: Backend, timer: Timer, settings: Settings, progress: Progress,
             caught: list[warnings.WarningMessage], phases: Phases) -> tuple[str, str | None]:
    """`phases`: the stages' seconds that the record's other fields do not hold (its `extra.phases_ms`)."""
    case = data.case
    ready = progress.ready = stage.prepare(data, backend)
    guard = Guard(ready.canonical, ready.leaves, ready.prepared.writes)
    timing = settings.timing.round_share()  # the first round's
    with ready.prepared.context():
        began, reference_s = phases.clock(), data.reference_s
        try:
            checked = progress.checked = stage.check(data, backend, ready, guard, timer, timing, caught)
            calls = stage.calls(case, ready, checked)
        finally:  # in this process the check makes the case's reference if none did before: that is `reference_s`
            phases.add("check", phases.clock() - began - (data.reference_s - reference_s))
        progress.sustained = stage.sustained(case, calls.fn, checked.timing)
        with phases.timing("timer"):
            timed = progress.timed = stage.timed(case, backend, timer, calls, checked)
        with phases.timing("memory"):
            progress.memory = stage.memory(calls, checked)
        with phases.timing("repeat"):
            repeated = progress.repeated = stage.repeated(data, ready, checked, timed.kept)
        began = phases.clock()
        kernels = progress.kernels = stage.kernels(case, backend, timer, settings.trace_dir, ready, checked, calls,
                                                   guard)
        ran = kernels.ran  # the stage is the profiled (and traced) call and the guards around it
        phases.add("guards", max(0.0, phases.clock() - began - (ran.profile_ms + ran.trace_ms) / 1e3))
    broken = kernels.broken + ([timed.off_stream] if timed.off_stream else [])
    if broken:  # the time is not of the work asked for
        return "error", "integrity: " + "; ".join(broken)
    with phases.timing("statistics"):
        progress.numbers = numbers(data, backend, timer, settings, timed.samples, checked, progress.parts()[1])
    return status_of(repeated, kernels.ran)


def numbers(data: CaseData, backend: Backend, timer: Timer, settings: Settings, samples: Samples,
            checked: stage.Checked, before: dict[str, Any]) -> stage.Numbers:
    """`before`: the earlier stages' `extra` (a backend's fp32_math picks the roof)."""
    case = data.case
    timing = timing_fields(list(samples.times), settings.timing, case.device, stop=samples.stop)
    rates = throughput(case, backend, Timing(**timing).time_ms)
    accuracy = accuracy_extra(data, checked.stick, checked.answer, checked.out_native)
    fp32_math = part_of(CorrectnessParts, {**before, **accuracy}).fp32_math
    percent, roof = percent_of_peak(case, rates.tflops, rates.bandwidth_gbs, settings.info, fp32_math)
    return stage.Numbers(timing, rates.tflops, rates.bandwidth_gbs, percent,
                         case.seq_len if data.rows is None else len(data.rows), data.reference.grads is not None,
                         timer.extra, accuracy, roof)


def status_of(repeated: stage.Repeated, ran: Profiled) -> tuple[str, str | None]:
    """ok, or why not: a mismatch, or another backend's kernel ran (its time is kept)."""
    verdict = repeated.verdict
    if verdict.passed and not ran.wrong_kernel:
        return "ok", None
    error = (f"holds NaN or Inf (bound {verdict.error_bound:.3g})" if finite(verdict.max_abs_error) is None
             else f"max |error| {verdict.max_abs_error:.3g} exceeds bound {verdict.error_bound:.3g}")
    mismatch = None if verdict.passed else f"{verdict.worst} {error}{repeated.note}"
    if ran.wrong_kernel:
        return "wrong_kernel", ran.wrong_kernel + (f"; and {mismatch}" if mismatch else "")
    return "mismatch", mismatch


def classify(exc: BaseException, backend: Backend, caught: list[warnings.WarningMessage],
             deterministic: bool = False) -> tuple[str, str]:
    if is_oom(exc):
        return "oom", f"out of memory: {first_line(exc)}"
    if deterministic and TORCH_REFUSAL in str(exc):
        return "skipped", f"deterministic asked, refused by PyTorch: {first_line(exc)}"
    reason = backend.skip_reason(exc, caught)
    if reason:
        return "skipped", reason
    return "error", f"{type(exc).__name__}: {first_line(exc)}"


def is_oom(exc: BaseException) -> bool:
    import torch

    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, (RuntimeError, MemoryError)) and (
        isinstance(exc, MemoryError) or "can't allocate memory" in str(exc) or "out of memory" in str(exc).lower()
    )


def cuda_is_broken(device: str) -> bool:
    """Whether a sticky CUDA error has poisoned this process's context."""
    if device != "cuda":
        return False
    import torch

    try:
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - any failure means the context is unusable
        return True
    return False


class InProcess:
    """Measures in this process, keeping one CaseData while consecutive tasks share a case. After a sticky CUDA
    error the rest are recorded `skipped`; an isolated run replaces its worker instead."""

    def __init__(self, timer: Timer, settings: Settings) -> None:
        self.timer = timer
        self.settings = settings
        self.data: CaseData | None = None
        self.broken: str | None = None

    def measure(self, case: Case, backend: Backend,
                on_start: Callable[[CaseData], None] | None = None) -> Record:
        if self.broken:
            return unmeasured(self.settings.info, case, backend, "skipped", self.broken)
        phases, made = Phases(), self.data is None or self.data.case != case
        began = phases.clock()
        data = self.data_for(case)
        if made:  # the case's inputs, on the record of its first measurement (as its reference)
            phases.add("inputs", phases.clock() - began)
        record = measure(data, backend, self.timer, self.settings, on_start, phases)
        if record.status == "error" and cuda_is_broken(case.device):
            self.data = None
            self.broken = (f"not run: {record.backend} on {record.case_id} broke this process's CUDA context "
                           f"({record.reason}); run isolated (the default on CUDA) to go on past it")
        return record

    def data_for(self, case: Case) -> CaseData:
        if self.data is None or self.data.case != case:
            self._drop()
            self.data = case_data(case)
        return self.data

    def _drop(self) -> None:
        if self.data is not None:
            device = self.data.case.device
            self.data = None
            try:
                release_memory(device, collect=True)
            except Exception:  # noqa: BLE001 - the next measurement finds and records it
                pass

    def close(self) -> None:
        self._drop()
