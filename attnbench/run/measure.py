"""One measurement: a backend on a case — skip, prepare, check, time, read memory and the GPU — into one record.

`measure()` is the only place a measurement is made: `InProcess` calls it in this process, the isolated worker
(attnbench.run.isolation) calls it through its own `InProcess`. Every outcome, a crash of the backend included,
becomes a record; one failure never stops a sweep.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnbench.backends.base import Backend, Prepared, Unsupported, first_line
from attnbench.backends.conformance import conformance_problem
from attnbench.backends.registry import declared_kernels
from attnbench.gpu import sample as gpu_sample
from attnbench.run import sustain
from attnbench.run.heap import release_memory
from attnbench.run.profiled import profiled
from attnbench.run.recording import (
    RunInfo,
    make_record,
    percent_of_peak,
    setup_fields,
    throughput,
    timing_extra,
    timing_fields,
    unmeasured,
    work_fields,
)
from attnbench.run.skip import Facts, why_skipped
from attnbench.timing.memory import PeakOnFirstCall, call_measuring_peak
from attnbench.timing.timers import Timer, TimingSettings
from attnbench.verify.check import NAMES, Verdict, judge
from attnbench.verify.determinism import TORCH_REFUSAL, deterministic_mode
from attnbench.verify.inputs import Answer, CaseData, grad_checkable
from attnbench.verify.integrity import Guard, other_inputs
from attnbench.verify.quant_data import (
    Yardstick,
    accuracy_extra,
    case_data,
    prepare_kwargs,
    yardstick,
)
from attnbench.verify.repeat import (
    GRADS_UNCHECKED,
    KeepFirst,
    aliased,
    as_tensors,
    compare,
    judged_extra,
    outcome,
    repeat_extra,
    worse,
)

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case
    from attnbench.records.results import Record


def free_device_memory(device: str) -> int | None:
    """Free bytes on the current CUDA device; None on a CPU (no limit is checked there)."""
    if device != "cuda":
        return None
    import torch

    return torch.cuda.mem_get_info()[0]


@dataclass(frozen=True)
class Settings:
    """How every measurement of a run is made, besides its timer: the run's shared fields and the timing asked."""

    info: RunInfo
    timing: TimingSettings = field(default_factory=TimingSettings)
    free_memory: Callable[[str], int | None] = free_device_memory
    # Each backend's conformance verdict, by name, checked once per run: the installed libraries do not change.
    conformance: dict[str, str | None] = field(default_factory=dict, compare=False, repr=False)
    deterministic: bool = False  # the run asks for deterministic kernels (attnbench.verify.determinism)
    trace_dir: Path | None = None  # --trace: the run directory its traces/ go under (attnbench.run.profiled)


def facts_here(case: Case, backend: Backend, timer: Timer, settings: Settings) -> Facts:
    """The skip rule's facts, read live in the measuring process."""
    # Conformance first: availability probes may call the library themselves (xformers asks its dispatcher).
    if backend.name not in settings.conformance:
        settings.conformance[backend.name] = conformance_problem(backend)
    conformance = settings.conformance[backend.name]
    return Facts(conformance, None if conformance else backend.availability(case.device),
                 settings.free_memory(case.device), getattr(timer, "modes", None), timer.name, settings.deterministic)


def measure(data: CaseData, backend: Backend, timer: Timer, settings: Settings,
            on_start: Callable[[CaseData], None] | None = None) -> Record:
    """One measurement; every outcome, including a crash of the backend, becomes a record.

    `on_start` is called once the measurement will really run (not skipped): a worker uses it to
    make the case's reference first and to tell its parent that the time limit starts now.
    """
    case = data.case
    fields = work_fields(case, backend)
    reason = why_skipped(case, backend, facts_here(case, backend, timer, settings))
    if reason:
        return make_record(settings.info, case, backend.name, "skipped", reason, fields)
    reference_before = data.reference_s
    if on_start is not None:
        on_start(data)
    caught: list[warnings.WarningMessage] = []
    collect = False
    try:
        with deterministic_mode(settings.deterministic):
            status = _measure(data, backend, timer, settings, fields, caught)
        reason = None if status == "ok" else fields.pop("mismatch_reason")
    except Unsupported as exc:
        status, reason = "skipped", str(exc)
    except Exception as exc:  # a backend may fail in any way; the sweep goes on
        status, reason = classify(exc, backend, caught, settings.deterministic)
        del exc
        collect = True  # a traceback holds the failed call's tensors in cycles
    if settings.deterministic:  # what the backend says the mode did to it
        fields.setdefault("extra", {})["deterministic"] = backend.deterministic(case)
    if data.reference_s > reference_before:  # this measurement made the case's reference: say what it cost
        fields.setdefault("extra", {})["reference_s"] = data.reference_s - reference_before
    try:
        release_memory(case.device, collect=collect)
    except Exception as exc:  # noqa: BLE001 - a sticky CUDA error (illegal memory access) raises again here
        status = "error"
        reason = f"{reason + '; then ' if reason else ''}{type(exc).__name__} while releasing memory: {first_line(exc)}"
    return make_record(settings.info, case, backend.name, status, reason, fields, timer.name)


def _measure(data: CaseData, backend: Backend, timer: Timer, settings: Settings, fields: dict[str, Any],
             caught: list) -> str:
    import torch

    case = data.case
    inp = data.inputs
    canonical = tuple(t.detach().requires_grad_(case.needs_grad) for t in (inp.q, inp.k, inp.v))
    start = time.perf_counter()
    prepared = backend.prepare(case, *canonical, **prepare_kwargs(data))
    if case.device == "cuda":
        torch.cuda.synchronize()
    setup_s = time.perf_counter() - start
    extra = dict(prepared.extra)
    extra.update(setup_fields(setup_s, extra))
    fields.update(kernel=prepared.kernel, kv_expanded=prepared.kv_expanded, extra=extra)
    leaves = tuple(t.detach().requires_grad_(case.needs_grad) for t in prepared.inputs)
    # One pass where one suffices. A forward's checked call is the timed call's twin: it is also the call
    # whose peak memory is read and the first warm-up call (its time counts toward warmup_ms). In backward
    # modes the checked call differs (it also maps gradients back), so the peak comes from the first
    # warm-up call instead. No call is made for memory alone.
    twin = case.mode == "fwd"
    guard = Guard(canonical, leaves, prepared.writes)
    timing = settings.timing.round_share()  # the first round's; the later ones re-time it (attnbench.run.rounds)
    with prepared.context():
        # The checked call runs in the grad mode of the timed one: a compiled backend guards on it.
        with warnings.catch_warnings(record=True) as seen, torch.set_grad_enabled(case.needs_grad):
            warnings.simplefilter("always")
            try:
                if twin:
                    # Timed by the timer's own clock where it has one (the CPU's): a checked call that agrees
                    # with the samples after it may join them (attnbench.timing.sampling), like a steady warm-up call.
                    clock = getattr(timer, "clock", None)
                    start = time.perf_counter()
                    checked = call_measuring_peak(lambda: prepared.call(*leaves), case.device, clock=clock,
                                                  rss=prepared.memory == "rss")
                    out_native, peak, method = prepared.to_tensor(checked.result), checked.peak, checked.method
                    timing = dataclasses.replace(timing, warmed_ms=(time.perf_counter() - start) * 1e3,
                                                 prior_ms=checked.call_ms)
                else:
                    out_native = prepared.to_tensor(prepared.call(*leaves))
            finally:
                caught.extend(seen)
        guard.returned(out_native)  # work still running after the call returned (attnbench.verify.integrity)
        answer, dout_native, native = answer_of(prepared, canonical, leaves, out_native, inp.dout, data.rows,
                                                grad_checkable(case))
        stick = yardstick(data, backend)  # naive in the case's dtype, or an emulation of the kernel's numerics
        verdict = judge(answer, data.reference, stick.answer, stick.floor_dtype, stick.errors)
        fn = timed_call(case.mode, prepared, leaves, out_native, dout_native)
        first = None if twin else PeakOnFirstCall(fn, case.device, rss=prepared.memory == "rss")
        if first is not None:  # no garbage the first call would free may be counted in its "before"
            gc.collect(1)
        if timing.energy_ms > 0:  # the sustained state, and the call's energy, before the samples
            read_energy, probe, sync = sustain.for_device(case.device)
            extra.update(sustain.sustained_loop(fn, min_s=timing.energy_ms / 1e3, read_energy=read_energy,
                                                probe=probe, sync=sync, tokens_per_call=case.batch * case.seq_len))
        kept = KeepFirst(first or fn)  # the second call the repeatability check compares (attnbench.verify.repeat)
        samples = timer.measure(kept if native is not None else first or fn, timing)
        gpu_sample.record_sample(fields, case.device)  # clocks, throttling, other processes: right after timing
        if first is not None:
            if first.peak is None:  # a timer that never called fn (a test's scripted timer)
                first()
            peak, method = first.peak, first.method
        verdict, note = _repeat_check(data, prepared, canonical, leaves, answer, native, kept, verdict, fields, stick)
        # Profiled after the samples, so they never see it; a forward's profiled call is the guard's call on other
        # inputs (attnbench.verify.integrity), which a backward mode makes apart.
        other = other_inputs(prepared, leaves, case.needs_grad, out_native)
        ran = profiled(other if twin and other is not None else fn, case, backend, timer,
                       declared_kernels(case.device, case.mode), settings.trace_dir, prepared.profile)
        broken = guard.problems(out_native, other) + ([ran.foreign] if ran.foreign else [])
    fields.update(ran.fields)
    extra.update(ran.extra)
    extra["setup_ms"] += ran.profile_ms
    extra["setup_parts"]["profile"] = ran.profile_ms
    extra["integrity"] = guard.checks
    if broken:  # the time is not of the work asked for: an error, never a timing
        fields["mismatch_reason"] = "integrity: " + "; ".join(broken)
        return "error"
    fields.update(timing_fields(samples, settings.timing, case.device))
    fields.update(
        **throughput(case, backend, fields["time_ms"]), peak_memory_bytes=peak, memory_method=method,
        max_abs_error=finite(verdict.max_abs_error), error_bound=finite(verdict.error_bound),
        rows_checked=case.seq_len if data.rows is None else len(data.rows),
        grad_checked=data.reference.grads is not None,
    )
    extra.update(timing_extra(samples, timer))
    if timing.warmed_ms:
        extra["check_ms"] = timing.warmed_ms  # the checked call, which counted toward warmup_ms
        extra["check_sampled"] = bool(getattr(samples, "prior_joined", False))  # and is a sample
        if timing.prior_ms is not None:
            extra["check_call_ms"] = timing.prior_ms  # the call alone, by the timer's clock
    extra["errors"] = {name: finite(value) for name, value in verdict.errors.items()}
    if any(finite(value) is None for value in verdict.errors.values()):
        extra["nonfinite"] = True  # NaN or Inf in the output (or a gradient): the error has no number
    extra.update(accuracy_extra(data, stick, answer, out_native))
    fields["percent_of_peak"], peak_extra = percent_of_peak(case, fields["tflops"], fields["bandwidth_gbs"],
                                                            settings.info, extra.get("fp32_math"))
    extra.update(peak_extra)
    if verdict.passed and not ran.wrong_kernel:
        return "ok"
    error = (f"holds NaN or Inf (bound {verdict.error_bound:.3g})" if finite(verdict.max_abs_error) is None
             else f"max |error| {verdict.max_abs_error:.3g} exceeds bound {verdict.error_bound:.3g}")
    mismatch = None if verdict.passed else f"{verdict.worst} {error}{note}"
    if ran.wrong_kernel:  # its time is kept, but it is not this backend's
        fields["mismatch_reason"] = ran.wrong_kernel + (f"; and {mismatch}" if mismatch else "")
        return "wrong_kernel"
    fields["mismatch_reason"] = mismatch
    return "mismatch"


def _repeat_check(data: CaseData, prepared: Prepared, canonical: tuple[torch.Tensor, ...],
                  leaves: tuple[torch.Tensor, ...], checked: Answer, native: tuple[torch.Tensor, ...] | None,
                  kept: KeepFirst, verdict: Verdict, fields: dict[str, Any], stick: Yardstick) -> tuple[Verdict, str]:
    """`repeatable`: the checked call against a second call on the same inputs, bit for bit — a forward's output, a
    backward's gradients where they are checked. The second call is the timer's first (kept), else one untimed call
    now. Where the two differ the second is judged too; a mismatch of either is judged once more on a fresh untimed
    call (the checked call again). The record takes the worst verdict, so it does not hang on which call was checked;
    returned with the words the mismatch reason adds (attnbench.verify.repeat.outcome)."""
    import torch

    case = data.case
    names = NAMES[:1] if case.mode == "fwd" else NAMES[1:]
    judged, calls, result = [("checked", verdict)], ["checked call"], None

    def judge_answer(answer: Answer) -> Verdict:  # by the checked call's yardstick (attnbench.verify.quant_data)
        return judge(answer, data.reference, stick.answer, stick.floor_dtype, stick.errors)

    if native is not None:
        calls.append("timer's first call" if kept.called else "untimed call after timing")
        second = as_tensors(prepared.to_tensor(kept.result if kept.called else kept()))
        if aliased(native, second):  # one buffer for every call: copy what the last call left, call once more
            native, second = tuple(t.clone() for t in second), as_tensors(prepared.to_tensor(kept.fn()))
            calls = [f"last {'timed ' if kept.called else ''}call, copied (the backend returns one buffer every call)",
                     "untimed call after it"]
        result = compare(native, second, names)
        if not result.equal:
            answer = (answer_of(prepared, canonical, leaves, second[0], None, data.rows, False)[0]
                      if checked.grads is None else Answer(checked.out, canonical_grads(prepared, canonical, second)))
            judged.append(("second", judge_answer(answer)))
    if not all(v.passed for _, v in judged):
        with torch.set_grad_enabled(case.needs_grad):
            out = prepared.to_tensor(prepared.call(*leaves))
        again, _, native_again = answer_of(prepared, canonical, leaves, out, data.inputs.dout, data.rows,
                                           grad_checkable(case))
        judged.append(("re-check", judge_answer(again)))
        if native is not None and native_again is not None:
            result = worse(result, compare(native, native_again, names))
            calls.append("re-check call")
    fields["repeatable"] = None if result is None else result.equal
    fields["extra"].update(repeat_extra(result, calls, names, GRADS_UNCHECKED), **judged_extra(judged))
    return outcome(judged)


def finite(value: float) -> float | None:
    """`value`, or None for an infinite error (a NaN or an Inf in the answer): JSON has no infinity, and a record
    must still be written."""
    return value if math.isfinite(value) else None


def answer_of(
    prepared: Prepared,
    canonical: tuple[torch.Tensor, ...],
    leaves: tuple[torch.Tensor, ...],
    out_native: torch.Tensor,
    dout: torch.Tensor | None,
    rows: torch.Tensor | None,
    with_grads: bool,
) -> tuple[Answer, torch.Tensor | None, tuple[torch.Tensor, ...] | None]:
    """The backend's output (and gradients) in canonical layout, dO in the backend's layout, and what the
    repeatability check compares: the native output of a forward, the native gradients where they are checked.

    Layout changes made in `prepare` were differentiable, so the chain rule maps the backend's
    gradients back onto the canonical q, k, v (summing over expanded K/V heads, undoing transposes).
    """
    import torch

    if dout is None:
        with torch.no_grad():
            out = prepared.to_canonical(out_native.detach())
        return Answer(out if rows is None else out[:, :, rows.to(out.device)], None), None, (out_native.detach(),)
    native = out_native.detach().requires_grad_()
    out = prepared.to_canonical(native)
    (dout_native,) = torch.autograd.grad(out, native, dout)
    dout_native = dout_native.contiguous()
    grads = native_grads = None
    if with_grads:
        native_grads = torch.autograd.grad(out_native, leaves, dout_native, retain_graph=True)
        grads = canonical_grads(prepared, canonical, native_grads)
    out = out.detach()
    return Answer(out if rows is None else out[:, :, rows.to(out.device)], grads), dout_native, native_grads


def canonical_grads(prepared: Prepared, canonical: tuple[torch.Tensor, ...],
                    native_grads: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """Gradients of the backend's inputs mapped onto the canonical q, k, v (the layout graph is kept: a second
    call's gradients are mapped the same way)."""
    import torch

    return torch.autograd.grad(prepared.inputs, canonical, native_grads, retain_graph=True)


def timed_call(
    mode: str,
    prepared: Prepared,
    leaves: tuple[torch.Tensor, ...],
    out_native: torch.Tensor,
    dout_native: torch.Tensor | None,
) -> Callable[[], object]:
    """The call a model would make, for the case's mode: forward, backward only, or both."""
    import torch

    if mode == "fwd":
        def forward() -> object:
            with torch.no_grad():
                return prepared.call(*leaves)
        return forward
    if mode == "bwd":
        return lambda: torch.autograd.grad(out_native, leaves, dout_native, retain_graph=True)
    return lambda: torch.autograd.grad(prepared.call(*leaves), leaves, dout_native)


def classify(exc: BaseException, backend: Backend, caught: list[warnings.WarningMessage],
             deterministic: bool = False) -> tuple[str, str]:
    """Status and reason for an exception raised while measuring."""
    if is_oom(exc):
        return "oom", f"out of memory: {first_line(exc)}"
    if deterministic and TORCH_REFUSAL in str(exc):  # an operation with no deterministic implementation
        return "skipped", f"deterministic asked, refused by PyTorch: {first_line(exc)}"
    reason = backend.skip_reason(exc, caught)
    if reason:
        return "skipped", reason
    return "error", f"{type(exc).__name__}: {first_line(exc)}"


def is_oom(exc: BaseException) -> bool:
    """CUDA's OutOfMemoryError, or the CPU allocator's failure to allocate."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, (RuntimeError, MemoryError)) and (
        isinstance(exc, MemoryError) or "can't allocate memory" in str(exc) or "out of memory" in str(exc).lower()
    )


def cuda_is_broken(device: str) -> bool:
    """Whether a CUDA error has poisoned this process's context (every later call would fail too)."""
    if device != "cuda":
        return False
    import torch

    try:
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - any failure here means the context is unusable
        return True
    return False


class InProcess:
    """Measures in this process, keeping one CaseData while consecutive tasks share a case.

    After an error that broke the CUDA context (a sticky error: every later call would fail too), the
    rest are recorded `skipped` with that reason; an isolated run replaces its worker instead.
    """

    def __init__(self, timer: Timer, settings: Settings) -> None:
        self.timer = timer
        self.settings = settings
        self.data: CaseData | None = None
        self.broken: str | None = None

    def measure(self, case: Case, backend: Backend,
                on_start: Callable[[CaseData], None] | None = None) -> Record:
        if self.broken:
            return unmeasured(self.settings.info, case, backend, "skipped", self.broken)
        record = measure(self.data_for(case), backend, self.timer, self.settings, on_start)
        if record.status == "error" and cuda_is_broken(case.device):
            self.data = None
            self.broken = (f"not run: {record.backend} on {record.case_id} broke this process's CUDA context "
                           f"({record.reason}); run isolated (the default on CUDA) to go on past it")
        return record

    def data_for(self, case: Case) -> CaseData:
        """The case's data: the one kept while consecutive tasks share a case, else made anew."""
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
            except Exception:  # noqa: BLE001 - a broken context is found and recorded by the next measurement
                pass

    def close(self) -> None:
        self._drop()
