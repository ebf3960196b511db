"""The loop: case -> backend -> check, time, measure -> record. One failure never stops the sweep."""

from __future__ import annotations

import gc
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol

from attnbench import inputs as inputs_mod
from attnbench.backends.base import Backend, Prepared, Unsupported
from attnbench.check import judge
from attnbench.memory import measure_peak
from attnbench.results import Record
from attnbench.timing import Timer, TimingSettings, summarize

if TYPE_CHECKING:
    import torch

    from attnbench.case import Case
    from attnbench.inputs import Answer, Inputs

MAX_REASON = 600


@dataclass(frozen=True)
class RunInfo:
    """What every record of one run shares."""

    run_id: str
    suite: str
    device_name: str | None = None


class Listener(Protocol):
    """Told about progress, so the CLI can draw it; the runner itself prints nothing."""

    def started(self, index: int, total: int, case: Case, backend: Backend) -> None: ...

    def finished(self, record: Record) -> None: ...


class CaseData:
    """Everything shared by the backends of one case, made once and only when first needed."""

    def __init__(self, case: Case) -> None:
        self.case = case

    @cached_property
    def inputs(self) -> Inputs:
        return inputs_mod.make_inputs(self.case)

    @cached_property
    def rows(self) -> torch.Tensor | None:
        return inputs_mod.checked_rows(self.case)

    @cached_property
    def reference(self) -> Answer:
        return inputs_mod.reference(self.case, self.inputs, self.rows)

    @cached_property
    def naive(self) -> Answer:
        """Naive attention in the case's own dtype: how much rounding that dtype must be allowed."""
        return inputs_mod.blocked_attention(self.case, self.inputs, self.rows, inputs_mod.grad_checkable(self.case))


@dataclass
class Runner:
    """Runs backends over cases and hands each record to `sink` as soon as it exists."""

    info: RunInfo
    timer: Timer
    settings: TimingSettings = field(default_factory=TimingSettings)
    listener: Listener | None = None
    should_stop: Callable[[], bool] = lambda: False

    def run(self, cases: Iterable[Case], backends: list[Backend], sink: Callable[[Record], None]) -> int:
        """Measure every (case, backend); returns how many measurements were made before any stop."""
        cases = list(cases)
        total, done = len(cases) * len(backends), 0
        for case in cases:
            data = CaseData(case)
            for backend in backends:
                if self.should_stop():
                    return done
                if self.listener:
                    self.listener.started(done, total, case, backend)
                record = self.measure(data, backend)
                sink(record)
                done += 1
                if self.listener:
                    self.listener.finished(record)
            del data
            release_memory(case.device, collect=True)
        return done

    def measure(self, data: CaseData, backend: Backend) -> Record:
        """One measurement; every outcome, including a crash of the backend, becomes a record."""
        case = data.case
        fields: dict[str, Any] = {"memory_estimate_bytes": backend.estimate_memory(case), "flops": case.flops()}
        reason = backend.availability(case.device) or backend.unsupported(case)
        if reason:
            return self._record(case, backend, "skipped", reason, fields)
        caught: list[warnings.WarningMessage] = []
        try:
            status = self._measure(data, backend, fields, caught)
            reason = None if status == "ok" else fields.pop("mismatch_reason")
        except Unsupported as exc:
            status, reason = "skipped", str(exc)
        except Exception as exc:  # a backend may fail in any way; the sweep goes on
            status, reason = classify(exc, backend, caught)
            del exc
            release_memory(case.device, collect=True)  # a traceback holds the failed call's tensors in cycles
        release_memory(case.device)
        return self._record(case, backend, status, reason, fields)

    def _measure(self, data: CaseData, backend: Backend, fields: dict[str, Any], caught: list) -> str:
        case = data.case
        inp = data.inputs
        canonical = tuple(t.detach().requires_grad_(case.needs_grad) for t in (inp.q, inp.k, inp.v))
        prepared = backend.prepare(case, *canonical)
        fields.update(kernel=prepared.kernel, kv_expanded=prepared.kv_expanded, extra=dict(prepared.extra))
        leaves = tuple(t.detach().requires_grad_(case.needs_grad) for t in prepared.inputs)
        with prepared.context():
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                try:
                    out_native = prepared.call(*leaves)
                finally:
                    caught.extend(seen)
            answer, dout_native = answer_of(prepared, canonical, leaves, out_native, inp.dout, data.rows,
                                            inputs_mod.grad_checkable(case))
            verdict = judge(answer, data.reference, data.naive, case.dtype)
            fn = timed_call(case.mode, prepared, leaves, out_native, dout_native)
            samples = self.timer.measure(fn, self.settings)
            peak, method = measure_peak(fn, case.device)
        stats = summarize(samples)
        fields.update(
            time_ms=stats.median, time_ms_iqr=stats.iqr, time_ms_min=stats.minimum, samples=len(samples),
            times_ms=samples, tflops=case.flops() / (stats.median * 1e-3) / 1e12,
            peak_memory_bytes=peak, memory_method=method, max_abs_error=verdict.max_abs_error,
            error_bound=verdict.error_bound,
            rows_checked=case.seq_len if data.rows is None else len(data.rows),
            grad_checked=data.reference.grads is not None,
        )
        fields["extra"]["errors"] = verdict.errors
        if verdict.passed:
            return "ok"
        fields["mismatch_reason"] = (
            f"{verdict.worst} max |error| {verdict.max_abs_error:.3g} exceeds bound {verdict.error_bound:.3g}"
        )
        return "mismatch"

    def _record(self, case: Case, backend: Backend, status: str, reason: str | None, fields: dict[str, Any]) -> Record:
        if reason is not None and len(reason) > MAX_REASON:
            reason = reason[: MAX_REASON - 1] + "…"
        return Record(
            run_id=self.info.run_id, suite=self.info.suite, timestamp=now(), backend=backend.name,
            device_name=self.info.device_name, case_id=case.case_id, status=status, reason=reason,
            timer=self.timer.name if status in ("ok", "mismatch") else None,
            **case.fields(), **fields,
        )


def answer_of(
    prepared: Prepared,
    canonical: tuple[torch.Tensor, ...],
    leaves: tuple[torch.Tensor, ...],
    out_native: torch.Tensor,
    dout: torch.Tensor | None,
    rows: torch.Tensor | None,
    with_grads: bool,
) -> tuple[Answer, torch.Tensor | None]:
    """The backend's output (and gradients) in canonical layout, and dO in the backend's layout.

    Layout changes made in `prepare` were differentiable, so the chain rule maps the backend's
    gradients back onto the canonical q, k, v (summing over expanded K/V heads, undoing transposes).
    """
    import torch

    Answer = inputs_mod.Answer
    if dout is None:
        with torch.no_grad():
            out = prepared.to_canonical(out_native.detach())
        return Answer(out if rows is None else out[:, :, rows.to(out.device)], None), None
    native = out_native.detach().requires_grad_()
    out = prepared.to_canonical(native)
    (dout_native,) = torch.autograd.grad(out, native, dout)
    dout_native = dout_native.contiguous()
    grads = None
    if with_grads:
        native_grads = torch.autograd.grad(out_native, leaves, dout_native, retain_graph=True)
        grads = torch.autograd.grad(prepared.inputs, canonical, native_grads)
    out = out.detach()
    return Answer(out if rows is None else out[:, :, rows.to(out.device)], grads), dout_native


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


def classify(exc: BaseException, backend: Backend, caught: list[warnings.WarningMessage]) -> tuple[str, str]:
    """Status and reason for an exception raised while measuring."""
    if is_oom(exc):
        return "oom", f"out of memory: {first_line(exc)}"
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


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def release_memory(device: str, collect: bool = False) -> None:
    """Drop what a finished measurement left behind, so the next one starts from the same state."""
    if collect:
        gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
