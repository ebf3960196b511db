"""The stages of one measurement, in order: prepare, check, sustain, time, memory, repeat, kernels. Each returns a
frozen value; attnbench.run.record_parts makes the record from them, also when a stage raised."""

from __future__ import annotations

import dataclasses
import gc
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnbench.backends.base import Backend, Prepared
from attnbench.backends.registry import declared_kernels
from attnbench.gpu import sample as gpu_sample
from attnbench.gpu.state import torch_gpu
from attnbench.records.parts import SetupParts
from attnbench.run import sustain
from attnbench.run.profiled import Profiled, profiled
from attnbench.run.recording import setup_fields
from attnbench.timing.bracket import Bracket, judged
from attnbench.timing.memory import PeakOnFirstCall, call_measuring_peak
from attnbench.timing.timers import Samples, Timer, TimingSettings
from attnbench.verify.check import NAMES, Verdict, judge
from attnbench.verify.inputs import Answer, CaseData, grad_checkable
from attnbench.verify.integrity import Guard, other_inputs
from attnbench.verify.quant_data import Yardstick, prepare_kwargs, yardstick
from attnbench.verify.repeat import (
    KeepFirst,
    Repeat,
    aliased,
    as_tensors,
    compare,
    outcome,
    worse,
)

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case


@dataclass(frozen=True)
class Ready:
    """The backend's case made ready, its inputs as leaves, and `prepare`'s time as setup."""

    prepared: Prepared
    canonical: tuple[torch.Tensor, ...]
    leaves: tuple[torch.Tensor, ...]
    setup: SetupParts


@dataclass(frozen=True)
class Memory:
    """Peak memory of one call (bytes) and how it was read."""

    peak: int | None
    method: str | None


@dataclass(frozen=True)
class Checked:
    """The checked call's output, answer, verdict and yardstick; dO in the backend's layout; what the repeatability
    check compares; the timing (a forward's checked call is a warm-up); its memory."""

    out_native: torch.Tensor
    answer: Answer
    dout_native: torch.Tensor | None
    native: tuple[torch.Tensor, ...] | None
    stick: Yardstick
    verdict: Verdict
    timing: TimingSettings
    memory: Memory | None


@dataclass(frozen=True)
class Calls:
    """The timed call, and its first call reading peak memory where the checked call is not its twin."""

    fn: Callable[[], object]
    first: PeakOnFirstCall | None


@dataclass(frozen=True)
class Sustained:
    """The loop's and its energy's entries (run.sustain)."""

    entries: dict[str, Any]


@dataclass(frozen=True)
class Timed:
    """The samples, the timer's first call kept for the repeatability check, and the GPU's state right after."""

    samples: Samples
    kept: KeepFirst
    gpu: gpu_sample.GpuSample | None
    bracket: Bracket | None = None  # the host's time beside the events'
    events_note: str | None = None  # how the events' time was judged
    off_stream: str | None = None  # the events bracketed none of the call's work: its time is of nothing


@dataclass(frozen=True)
class Repeated:
    """The worst verdict and its note; the calls compared and how; each judged call's verdict."""

    verdict: Verdict
    note: str
    compared: Repeat | None
    calls: tuple[str, ...]
    tensors: tuple[str, ...]
    judged: tuple[tuple[str, Verdict], ...]

    @property
    def repeatable(self) -> bool | None:
        return None if self.compared is None else self.compared.equal


@dataclass(frozen=True)
class Numbers:
    """The statistics of the samples, and the entries the timer, the check and the roof add."""

    timing: dict[str, Any]
    tflops: float
    bandwidth_gbs: float
    percent_of_peak: float | None
    rows_checked: int
    grad_checked: bool
    timer_extra: dict[str, Any]
    accuracy: dict[str, Any]
    roof: dict[str, Any]


@dataclass(frozen=True)
class Kernels:
    ran: Profiled
    checks: list[str]
    broken: list[str]


def prepare(data: CaseData, backend: Backend) -> Ready:
    """The backend's `prepare`, timed as setup."""
    import torch

    case = data.case
    inp = data.inputs
    canonical = tuple(t.detach().requires_grad_(case.needs_grad) for t in (inp.q, inp.k, inp.v))
    start = time.perf_counter()
    prepared = backend.prepare(case, *canonical, **prepare_kwargs(data))
    if case.device == "cuda":
        torch.cuda.synchronize()
    setup_s = time.perf_counter() - start
    leaves = tuple(t.detach().requires_grad_(case.needs_grad) for t in prepared.inputs)
    return Ready(prepared, canonical, leaves, setup_fields(setup_s, prepared.extra))


def check(data: CaseData, backend: Backend, ready: Ready, guard: Guard, timer: Timer, timing: TimingSettings,
          caught: list[warnings.WarningMessage]) -> Checked:
    """The checked call, judged against the reference. A forward's is the timed call's twin, so its peak memory is
    the record's and it is the first warm-up call; a backward mode's peak comes from the first timed call."""
    import torch

    case, prepared, leaves = data.case, ready.prepared, ready.leaves
    memory = None
    # In the timed call's grad mode: a compiled backend guards on it.
    with warnings.catch_warnings(record=True) as seen, torch.set_grad_enabled(case.needs_grad):
        warnings.simplefilter("always")
        try:
            if case.mode == "fwd":
                # By the timer's clock: it may join the samples (attnbench.timing.sampling).
                start = time.perf_counter()
                call = call_measuring_peak(lambda: prepared.call(*leaves), case.device, clock=timer.clock,
                                           memory=prepared.memory)
                out_native, memory = prepared.to_tensor(call.result), Memory(call.peak, call.method)
                timing = dataclasses.replace(timing, warmed_ms=(time.perf_counter() - start) * 1e3,
                                             prior_ms=call.call_ms)
            else:
                out_native = prepared.to_tensor(prepared.call(*leaves))
        finally:
            caught.extend(seen)
    guard.returned(out_native)
    answer, dout_native, native = answer_of(prepared, ready.canonical, leaves, out_native, data.inputs.dout,
                                            data.rows, grad_checkable(case))
    stick = yardstick(data, backend)
    verdict = judge(answer, data.reference, stick.answer, stick.floor_dtype, stick.errors)
    return Checked(out_native, answer, dout_native, native, stick, verdict, timing, memory)


def calls(case: Case, ready: Ready, checked: Checked) -> Calls:
    fn = timed_call(case.mode, ready.prepared, ready.leaves, checked.out_native, checked.dout_native)
    if case.mode == "fwd":
        return Calls(fn, None)
    first = PeakOnFirstCall(fn, case.device, memory=ready.prepared.memory)
    gc.collect(1)  # no garbage the first call would free may be counted in its "before"
    return Calls(fn, first)


def sustained(case: Case, fn: Callable[[], object], timing: TimingSettings) -> Sustained:
    if not timing.energy_ms > 0:
        return Sustained({})
    read_energy, probe, sync = sustain.for_device(case.device)
    return Sustained(sustain.sustained_loop(fn, min_s=timing.energy_ms / 1e3, read_energy=read_energy, probe=probe,
                                            sync=sync, tokens_per_call=case.batch * case.seq_len))


def timed(case: Case, backend: Backend, timer: Timer, chosen: Calls, checked: Checked) -> Timed:
    """The samples; the GPU's clocks, throttling and other processes read right after them; on CUDA the events
    judged against the host's time (attnbench.timing.bracket)."""
    kept = KeepFirst(chosen.first or chosen.fn)  # the second call the repeatability check compares
    samples = timer.measure(kept if checked.native is not None else chosen.first or chosen.fn, checked.timing)
    gpu = gpu_now(case.device)
    bracket = timer.bracket
    problem, note = judged(bracket, backend.capabilities.runs_on)
    return Timed(samples, kept, gpu, bracket, note, problem)


def gpu_now(device: str) -> gpu_sample.GpuSample | None:
    if device != "cuda":
        return None
    import torch

    return gpu_sample.measurement_sample(torch_gpu(torch.cuda.current_device()))


def memory(chosen: Calls, checked: Checked) -> Memory | None:
    first = chosen.first
    if first is None:
        return checked.memory
    if first.method is None:  # a timer that never called fn
        first()
    return Memory(first.peak, first.method)


def kernels(case: Case, backend: Backend, timer: Timer, trace_dir: Path | None, ready: Ready, checked: Checked,
            chosen: Calls, guard: Guard) -> Kernels:
    """The profiled call, after the samples, and the integrity guards (attnbench.verify.integrity)."""
    prepared = ready.prepared
    other = other_inputs(prepared, ready.leaves, case.needs_grad, checked.out_native)
    ran = profiled(other if case.mode == "fwd" and other is not None else chosen.fn, case, backend, timer,
                   declared_kernels(case.device, case.mode), trace_dir, prepared.profile)
    broken = guard.problems(checked.out_native, other) + ([ran.foreign] if ran.foreign else [])
    return Kernels(ran, guard.checks, broken)


def repeated(data: CaseData, ready: Ready, checked: Checked, kept: KeepFirst) -> Repeated:
    """`repeatable`: the checked call against a second call on the same inputs, bit for bit. Where they differ the
    second is judged too, a mismatch once more on a fresh call, and the worst verdict is the record's."""
    import torch

    case, prepared, canonical, leaves, native = data.case, ready.prepared, ready.canonical, ready.leaves, checked.native
    names = NAMES[:1] if case.mode == "fwd" else NAMES[1:]
    judged, calls_made, result = [("checked", checked.verdict)], ["checked call"], None
    stick = checked.stick

    def judge_answer(answer: Answer) -> Verdict:  # by the checked call's yardstick
        return judge(answer, data.reference, stick.answer, stick.floor_dtype, stick.errors)

    if native is not None:
        calls_made.append("timer's first call" if kept.called else "untimed call after timing")
        second = as_tensors(prepared.to_tensor(kept.result if kept.called else kept()))
        if aliased(native, second):  # one buffer for every call: copy it, call once more
            native, second = tuple(t.clone() for t in second), as_tensors(prepared.to_tensor(kept.fn()))
            calls_made = [f"last {'timed ' if kept.called else ''}call, copied (the backend returns one buffer every "
                          "call)", "untimed call after it"]
        result = compare(native, second, names)
        if not result.equal:
            answer = (answer_of(prepared, canonical, leaves, second[0], None, data.rows, False)[0]
                      if checked.answer.grads is None
                      else Answer(checked.answer.out, canonical_grads(prepared, canonical, second)))
            judged.append(("second", judge_answer(answer)))
    if not all(v.passed for _, v in judged):
        with torch.set_grad_enabled(case.needs_grad):
            out = prepared.to_tensor(prepared.call(*leaves))
        again, _, native_again = answer_of(prepared, canonical, leaves, out, data.inputs.dout, data.rows,
                                           grad_checkable(case))
        judged.append(("re-check", judge_answer(again)))
        if native is not None and native_again is not None:
            result = worse(result, compare(native, native_again, names))
            calls_made.append("re-check call")
    verdict, note = outcome(judged)
    return Repeated(verdict, note, result, tuple(calls_made), tuple(names), tuple(judged))


def finite(value: float) -> float | None:
    """`value`, or None for an infinite error: JSON has no infinity."""
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
    repeatability check compares. `prepare`'s layout changes are differentiable, so the chain rule maps gradients
    back onto the canonical q, k, v."""
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
    """Gradients mapped onto the canonical q, k, v; the graph is kept for a second call's."""
    import torch

    return torch.autograd.grad(prepared.inputs, canonical, native_grads, retain_graph=True)


def timed_call(
    mode: str,
    prepared: Prepared,
    leaves: tuple[torch.Tensor, ...],
    out_native: torch.Tensor | None,
    dout_native: torch.Tensor | None,
) -> Callable[[], object]:
    """The call a model would make in the case's mode."""
    import torch

    if mode == "fwd":
        def forward() -> object:
            with torch.no_grad():
                return prepared.call(*leaves)
        return forward
    if mode == "bwd":
        assert out_native is not None
        return lambda: torch.autograd.grad(out_native, leaves, dout_native, retain_graph=True)
    return lambda: torch.autograd.grad(prepared.call(*leaves), leaves, dout_native)
