"""The loop: case -> backend -> check, time, measure -> record. One failure never stops the sweep."""

from __future__ import annotations

import dataclasses
import gc
import threading
import time
import warnings
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol

from attnbench.gpu import sample as gpu_sample
from attnbench import inputs as inputs_mod
from attnbench.backends.base import Backend, Prepared, Unsupported, first_line, refusal
from attnbench.check import judge, naive_errors
from attnbench.conformance import conformance_problem
from attnbench.interval import Interval, median_interval
from attnbench.memory import PeakOnFirstCall, call_measuring_peak
from attnbench.peaks import peak_for
from attnbench.results import Record
from attnbench.sampling import STOPS
from attnbench.timing import Timer, TimingSettings, summarize

if TYPE_CHECKING:
    import torch

    from attnbench.case import Case
    from attnbench.inputs import Answer, Inputs

MAX_REASON = 600
# A case whose analytic estimate exceeds free device memory by this factor is skipped without trying it.
MEMORY_SKIP_FACTOR = 2.0


@dataclass(frozen=True)
class RunInfo:
    """What every record of one run shares."""

    run_id: str
    suite: str
    device_name: str | None = None
    # --peak-tflops / --peak-bandwidth: roofs for percent_of_peak in place of the datasheet table.
    peak_tflops: float | None = None
    peak_bandwidth_gbs: float | None = None


class Listener(Protocol):
    """Told about progress, so the CLI can draw it; the runner itself prints nothing."""

    def started(self, index: int, total: int, case: Case, backend: Backend) -> None: ...

    def finished(self, record: Record) -> None: ...


class Measurer(Protocol):
    """Makes one measurement: in this process, or in a worker process that may die or hang."""

    def measure(self, case: Case, backend: Backend) -> Record: ...

    def close(self) -> None: ...


class CaseData:
    """Everything shared by the backends of one case, made once and only when first needed.

    `reference_s` adds up the seconds spent on the reference and the naive run in the case's dtype (the
    correctness rule's two yardsticks): what checking costs, shown in the run's summary line.
    """

    def __init__(self, case: Case) -> None:
        self.case = case
        self.reference_s = 0.0

    @cached_property
    def inputs(self) -> Inputs:
        return inputs_mod.make_inputs(self.case)

    @cached_property
    def rows(self) -> torch.Tensor | None:
        return inputs_mod.checked_rows(self.case)

    @cached_property
    def reference(self) -> Answer:
        inputs, rows = self.inputs, self.rows
        with self._timed():
            return inputs_mod.reference(self.case, inputs, rows)

    @cached_property
    def naive(self) -> Answer:
        """Naive attention in the case's own dtype: how much rounding that dtype must be allowed."""
        inputs, rows = self.inputs, self.rows
        with self._timed():
            return inputs_mod.blocked_attention(self.case, inputs, rows, inputs_mod.grad_checkable(self.case))

    @cached_property
    def naive_errors(self) -> dict[str, float]:
        """err(naive) per tensor against the reference: every backend's bound, computed once per case."""
        return naive_errors(self.reference, self.naive)

    def _timed(self) -> _Stopwatch:
        return _Stopwatch(self)


class _Stopwatch:
    """Adds the seconds of a `with` block to a CaseData's reference_s (synchronising CUDA at both ends)."""

    def __init__(self, data: CaseData) -> None:
        self.data = data

    def __enter__(self) -> None:
        _sync(self.data.case.device)
        self.start = time.perf_counter()

    def __exit__(self, kind: type | None, *exc: object) -> None:
        if kind is None:  # after a failure (a sticky CUDA error) a synchronize would only raise again
            _sync(self.data.case.device)
        self.data.reference_s += time.perf_counter() - self.start


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


@dataclass
class Runner:
    """Runs backends over cases and hands each record to `sink` as soon as it exists."""

    info: RunInfo
    timer: Timer
    settings: TimingSettings = field(default_factory=TimingSettings)
    listener: Listener | None = None
    should_stop: Callable[[], bool] = lambda: False

    oom_pruning: bool = True
    free_memory: Callable[[str], int | None] = field(default=lambda device: free_device_memory(device))
    # Each backend's conformance verdict, by name: the installed libraries do not change during a run.
    _conformance: dict[str, str | None] = field(default_factory=dict, init=False, repr=False)

    def run(self, cases: Iterable[Case], backends: list[Backend], sink: Callable[[Record], None]) -> int:
        """Measure every (case, backend); returns how many measurements were made before any stop."""
        return self.run_tasks([(case, backend) for case in cases for backend in backends], sink)

    def run_tasks(self, tasks: list[tuple[Case, Backend]], sink: Callable[[Record], None],
                  measurer: Measurer | list[Measurer] | None = None) -> int:
        """Measure each (case, backend): in this process, or by `measurer`, or by several measurers at once.

        The one loop every run goes through. Tasks wait in a queue of whole cases (a case's backends stay
        together, so its inputs and reference are made once); each measurer takes the next case when it is
        free: one measurer (the usual run) takes them in order, several (one worker per GPU) share them.
        After an `oom`, longer sequences of the same backend and case group are recorded `skipped` without
        being tried (unless `oom_pruning` is off). Returns how many records were made before any stop.
        """
        measurers = measurer if isinstance(measurer, list) else [measurer or InProcess(self)]
        queue = TaskQueue(tasks)
        pruner = OomPruner(self.oom_pruning)
        lock = threading.Lock()
        done = 0

        def work(one: Measurer) -> None:
            nonlocal done
            while (group := queue.next_case()) is not None:
                for case, backend in group:
                    with lock:
                        if self.should_stop():
                            queue.clear()
                            return
                        if self.listener:
                            self.listener.started(done, len(tasks), case, backend)
                        reason = pruner.reason(case, backend)
                    record = self.unmeasured(case, backend, "skipped", reason) if reason else one.measure(case, backend)
                    with lock:
                        pruner.note(case, backend, record)
                        sink(record)
                        done += 1
                        if self.listener:
                            self.listener.finished(record)

        if len(measurers) == 1:
            try:
                work(measurers[0])
            except BaseException:  # a second Ctrl-C aborts: a worker is killed, not waited for
                getattr(measurers[0], "abort", measurers[0].close)()
                raise
            measurers[0].close()
            return done
        run_threads(work, measurers, queue)
        return done

    def unmeasured(self, case: Case, backend: Backend, status: str, reason: str) -> Record:
        """A record for a measurement that gave no numbers: skipped here, or lost with a worker."""
        return self._record(case, backend, status, reason, work_fields(case, backend))

    def skip_reason(self, case: Case, backend: Backend) -> str | None:
        """Why (case, backend) should not be tried here, known before any tensor exists; None to try it."""
        # Conformance first: availability probes may call the library themselves (xformers asks its dispatcher).
        if backend.name not in self._conformance:
            self._conformance[backend.name] = conformance_problem(backend)
        reason = self._conformance[backend.name] or backend.availability(case.device) or refusal(backend, case)
        if reason:
            return reason
        modes = getattr(self.timer, "modes", None)
        if modes is not None and case.mode not in modes:
            return f"the {self.timer.name} timer times {'/'.join(modes)} only, not {case.mode}"
        free = self.free_memory(case.device)
        estimate = backend.estimate_memory(case)
        if free is not None and estimate > MEMORY_SKIP_FACTOR * free:
            return (f"estimated memory {format_size(estimate)} exceeds {MEMORY_SKIP_FACTOR:g}x the free device "
                    f"memory {format_size(free)}; not tried")
        return None

    def measure(self, data: CaseData, backend: Backend, on_start: Callable[[CaseData], None] | None = None) -> Record:
        """One measurement; every outcome, including a crash of the backend, becomes a record.

        `on_start` is called once the measurement will really run (not skipped): a worker uses it to
        make the case's reference first and to tell its parent that the time limit starts now.
        """
        case = data.case
        fields = work_fields(case, backend)
        reason = self.skip_reason(case, backend)
        if reason:
            return self._record(case, backend, "skipped", reason, fields)
        reference_before = data.reference_s
        if on_start is not None:
            on_start(data)
        caught: list[warnings.WarningMessage] = []
        collect = False
        try:
            status = self._measure(data, backend, fields, caught)
            reason = None if status == "ok" else fields.pop("mismatch_reason")
        except Unsupported as exc:
            status, reason = "skipped", str(exc)
        except Exception as exc:  # a backend may fail in any way; the sweep goes on
            status, reason = classify(exc, backend, caught)
            del exc
            collect = True  # a traceback holds the failed call's tensors in cycles
        if data.reference_s > reference_before:  # this measurement made the case's reference: say what it cost
            fields.setdefault("extra", {})["reference_s"] = data.reference_s - reference_before
        try:
            release_memory(case.device, collect=collect)
        except Exception as exc:  # noqa: BLE001 - a sticky CUDA error (illegal memory access) raises again here
            status = "error"
            reason = f"{reason + '; then ' if reason else ''}{type(exc).__name__} while releasing memory: {first_line(exc)}"
        return self._record(case, backend, status, reason, fields)

    def _measure(self, data: CaseData, backend: Backend, fields: dict[str, Any], caught: list) -> str:
        import torch

        case = data.case
        inp = data.inputs
        canonical = tuple(t.detach().requires_grad_(case.needs_grad) for t in (inp.q, inp.k, inp.v))
        start = time.perf_counter()
        prepared = backend.prepare(case, *canonical)
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
        settings = self.settings
        with prepared.context():
            # The checked call runs in the grad mode of the timed one: a compiled backend guards on it.
            with warnings.catch_warnings(record=True) as seen, torch.set_grad_enabled(case.needs_grad):
                warnings.simplefilter("always")
                try:
                    if twin:
                        # Timed by the timer's own clock where it has one (the CPU's): a checked call that agrees
                        # with the samples after it may join them (attnbench.sampling), like a steady warm-up call.
                        clock = getattr(self.timer, "clock", None)
                        start = time.perf_counter()
                        checked = call_measuring_peak(lambda: prepared.call(*leaves), case.device, clock=clock)
                        out_native, peak, method = checked.result, checked.peak, checked.method
                        settings = dataclasses.replace(settings, warmed_ms=(time.perf_counter() - start) * 1e3,
                                                       prior_ms=checked.call_ms)
                    else:
                        out_native = prepared.call(*leaves)
                finally:
                    caught.extend(seen)
            answer, dout_native = answer_of(prepared, canonical, leaves, out_native, inp.dout, data.rows,
                                            inputs_mod.grad_checkable(case))
            verdict = judge(answer, data.reference, data.naive, case.dtype, data.naive_errors)
            fn = timed_call(case.mode, prepared, leaves, out_native, dout_native)
            first = None if twin else PeakOnFirstCall(fn, case.device)
            if first is not None:  # no garbage the first call would free may be counted in its "before"
                gc.collect(1)
            samples = self.timer.measure(first or fn, settings)
            gpu_sample.record_sample(fields, case.device)  # clocks, throttling, other processes: right after timing
            if first is not None:
                if first.peak is None:  # a timer that never called fn (a test's scripted timer)
                    first()
                peak, method = first.peak, first.method
        fields.update(timing_fields(samples, self.settings))
        fields.update(
            **throughput(case, fields["time_ms"]), peak_memory_bytes=peak, memory_method=method,
            max_abs_error=verdict.max_abs_error, error_bound=verdict.error_bound,
            rows_checked=case.seq_len if data.rows is None else len(data.rows),
            grad_checked=data.reference.grads is not None,
        )
        fields["extra"].update(timing_extra(samples, self.timer))
        if settings.warmed_ms:
            fields["extra"]["check_ms"] = settings.warmed_ms  # the checked call, which counted toward warmup_ms
            fields["extra"]["check_sampled"] = bool(getattr(samples, "prior_joined", False))  # and is a sample
            if settings.prior_ms is not None:
                fields["extra"]["check_call_ms"] = settings.prior_ms  # the call alone, by the timer's clock
        fields["extra"]["errors"] = verdict.errors
        fields["percent_of_peak"], peak_extra = percent_of_peak(case, fields["tflops"], fields["bandwidth_gbs"],
                                                                self.info, fields["extra"].get("fp32_math"))
        fields["extra"].update(peak_extra)
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


class InProcess:
    """Measures in this process, keeping one CaseData while consecutive tasks share a case.

    After an error that broke the CUDA context (a sticky error: every later call would fail too), the
    rest are recorded `skipped` with that reason; an isolated run replaces its worker instead.
    """

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.data: CaseData | None = None
        self.broken: str | None = None

    def measure(self, case: Case, backend: Backend) -> Record:
        if self.broken:
            return self.runner.unmeasured(case, backend, "skipped", self.broken)
        if self.data is None or self.data.case != case:
            self._drop()
            self.data = CaseData(case)
        record = self.runner.measure(self.data, backend)
        if record.status == "error" and cuda_is_broken(case.device):
            self.data = None
            self.broken = (f"not run: {record.backend} on {record.case_id} broke this process's CUDA context "
                           f"({record.reason}); run isolated (the default on CUDA) to go on past it")
        return record

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


class TaskQueue:
    """The measurements still to make, as whole cases (consecutive tasks of one case), taken one case at a time."""

    def __init__(self, tasks: list[tuple[Case, Backend]]) -> None:
        self.groups: deque[list[tuple[Case, Backend]]] = deque()
        for case, backend in tasks:
            if self.groups and self.groups[-1][0][0] == case:
                self.groups[-1].append((case, backend))
            else:
                self.groups.append([(case, backend)])
        self.lock = threading.Lock()

    def next_case(self) -> list[tuple[Case, Backend]] | None:
        with self.lock:
            return self.groups.popleft() if self.groups else None

    def clear(self) -> None:
        with self.lock:
            self.groups.clear()


def run_threads(work: Callable[[Measurer], None], measurers: list[Measurer], queue: TaskQueue) -> None:
    """`work` once per measurer, each in its own thread, all feeding from `queue`; every measurer is closed.

    A failure in one thread (an exception out of a measurer) empties the queue and is raised here once
    the others finish; a Ctrl-C while waiting kills every worker before leaving.
    """
    failures: list[BaseException] = []

    def guarded(one: Measurer) -> None:
        try:
            work(one)
        except BaseException as exc:  # noqa: BLE001 - surfaced in the calling thread below
            queue.clear()
            failures.append(exc)
        finally:
            one.close()

    threads = [threading.Thread(target=guarded, args=(m,), name=f"attnbench-measurer-{i}", daemon=True)
               for i, m in enumerate(measurers)]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except BaseException:  # a second Ctrl-C: stop every worker before leaving
        queue.clear()
        for one in measurers:
            getattr(one, "abort", one.close)()
        raise
    if failures:
        raise failures[0]


class OomPruner:
    """Remembers the shortest sequence each (backend, case group) ran out of memory at."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.limits: dict[tuple, tuple[int, int]] = {}

    def reason(self, case: Case, backend: Backend) -> str | None:
        """Why (case, backend) is not worth trying after an earlier oom; None to try it."""
        limit = self.limits.get((backend.name, group_of(case)))
        if self.enabled and limit is not None and longer_than(case, limit):
            return pruning_reason(limit)
        return None

    def note(self, case: Case, backend: Backend, record: Record) -> None:
        if record.status == "oom":
            key, length = (backend.name, group_of(case)), (case.seq_len, case.kv_seq_len)
            self.limits[key] = min(self.limits.get(key, length), length)


def throughput(case: Case, median_ms: float) -> dict[str, Any]:
    """Achieved TFLOP/s and GB/s at the median time (GUIDE.md "Counting work")."""
    seconds = median_ms * 1e-3
    return {"tflops": case.flops() / seconds / 1e12, "bandwidth_gbs": case.bytes_moved() / seconds / 1e9}


def timing_fields(samples: list[float], settings: TimingSettings) -> dict[str, Any]:
    """The record's time fields from the raw samples: median, IQR, minimum, the median's interval, why it stopped.

    `noisy` when the spread is wide (IQR over NOISE_THRESHOLD of the median) or the interval is wider than the
    precision asked (±precision of the median), or too few samples were taken for an interval at the confidence
    asked (under 6 at 95%: one 4 s call has no interval at all): the number is not known as well as the suite wanted.
    """
    stats = summarize(samples)
    interval = median_interval(samples, settings.confidence)
    return {
        "time_ms": stats.median, "time_ms_iqr": stats.iqr, "time_ms_min": stats.minimum, "samples": len(samples),
        "times_ms": list(samples), "ci_low_ms": interval.low, "ci_high_ms": interval.high,
        "ci_level": interval.level, "stop": stop_of(samples, settings, interval),
        "noisy": stats.noisy or interval.level < settings.confidence or interval.half_width() > settings.precision,
    }


def stop_of(samples: list[float], settings: TimingSettings, interval: Interval) -> str:
    """Why sampling stopped: as the timer says, else as the samples show (a timer that returns a plain list)."""
    stop = getattr(samples, "stop", None)
    if stop in STOPS:
        return stop
    if len(samples) >= settings.max_samples:
        return "max_samples"
    if interval.level >= settings.confidence and interval.half_width() <= settings.precision:
        return "precision"
    return "budget"


def timing_extra(samples: list[float], timer: Timer) -> dict[str, Any]:
    """What the timer spent warming up (ms, calls, whether the call time settled) and its own details."""
    extra: dict[str, Any] = {}
    if hasattr(samples, "warmup_calls"):
        extra.update(warmup_ms=getattr(samples, "warmup_ms"), warmup_calls=getattr(samples, "warmup_calls"),
                     warmup_steady=getattr(samples, "steady"))
    extra.update(getattr(timer, "extra", None) or {})
    return extra


def percent_of_peak(case: Case, tflops: float, bandwidth_gbs: float, info: RunInfo,
                    fp32_math: str | None = None) -> tuple[float | None, dict[str, Any]]:
    """Percent of the device's roof, and the `extra` entries saying which roof (peak_bound, peak) and whence (peak_source).

    Decode-like cases (one query row) are judged against memory bandwidth, the rest against the dense
    compute rate for the dtype. The datasheet table is consulted only on CUDA; an override applies anywhere.
    """
    name = info.device_name if case.device == "cuda" else None
    peak = peak_for(name, case.dtype, info.peak_tflops, info.peak_bandwidth_gbs, fp32_math)
    if case.memory_bound:
        roof, achieved, source, bound = peak.bandwidth_gbs, bandwidth_gbs, peak.bandwidth_source, "memory"
    else:
        roof, achieved, source, bound = peak.tflops, tflops, peak.tflops_source, "compute"
    if not roof:
        return None, {"peak_bound": bound, "peak_source": None}
    return 100.0 * achieved / roof, {"peak_bound": bound, "peak_source": source, "peak": roof}


def group_of(case: Case) -> tuple:
    """A case without its sequence lengths (nor the document and request lengths drawn from them): the cases
    whose memory grows only with the sequence."""
    fields = case.fields()
    del fields["seq_len"], fields["kv_seq_len"], fields["doc_lens"], fields["kv_lens"]
    return tuple(sorted(fields.items()))


def longer_than(case: Case, limit: tuple[int, int]) -> bool:
    """Whether `case` is at least as long as the (seq_len, kv_seq_len) that ran out of memory, and longer."""
    seq, kv = limit
    return case.seq_len >= seq and case.kv_seq_len >= kv and (case.seq_len, case.kv_seq_len) != limit


# The one-time parts of a backend's setup its `prepare` reports in `extra`: (name in setup_parts, key, ms per unit).
SETUP_PARTS = (("mask_build", "mask_build_s", 1e3), ("compile", "compile_s", 1e3), ("plan", "plan_ms", 1.0))


def setup_fields(setup_s: float, extra: dict[str, Any]) -> dict[str, Any]:
    """`setup_ms` (the whole of `prepare`, outside every timed call) and `setup_parts` (ms): the parts the backend
    reported (block-mask build, compile, plan) and `other`, the rest (layout conversion, packing, page tables)."""
    parts = {name: float(extra[key]) * scale for name, key, scale in SETUP_PARTS if extra.get(key) is not None}
    parts["other"] = max(0.0, setup_s * 1e3 - sum(parts.values()))
    return {"setup_ms": setup_s * 1e3, "setup_parts": parts}


def pruning_reason(limit: tuple[int, int]) -> str:
    seq, kv = limit
    return f"oom at seq_len {seq}" + (f" (kv_seq_len {kv})" if kv != seq else "") + "; longer sequences not tried"


def free_device_memory(device: str) -> int | None:
    """Free bytes on the current CUDA device; None on a CPU (no limit is checked there)."""
    if device != "cuda":
        return None
    import torch

    return torch.cuda.mem_get_info()[0]


def format_size(n: int) -> str:
    """Bytes as GiB, or MiB below one GiB, for skip reasons."""
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"


def work_fields(case: Case, backend: Backend) -> dict[str, Any]:
    """What every record carries whether or not it was measured: FLOPs, bytes and the memory estimate."""
    return {"memory_estimate_bytes": backend.estimate_memory(case), "flops": case.flops(),
            "bytes_moved": case.bytes_moved()}


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


def release_memory(device: str, collect: bool = False) -> None:
    """Drop what a finished measurement left behind, so the next one starts from the same state."""
    if collect:
        gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
