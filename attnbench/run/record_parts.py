"""A record's fields and `extra` from a measurement's finished stages, in stored order."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from attnbench.records.parts import SetupParts, TimingParts, entries_of
from attnbench.run import stages as stage
from attnbench.run.recording import timing_extra
from attnbench.verify.repeat import GRADS_UNCHECKED, judged_extra, repeat_extra


@dataclass(frozen=True)
class Closing:
    """What a measurement adds after its stages."""

    phases_ms: dict[str, float]
    deterministic: str | None = None
    reference_s: float | None = None

    def fields(self, found: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
        extra = dict(extra)
        if self.deterministic is not None:
            extra["deterministic"] = self.deterministic
        if self.reference_s is not None:
            extra["reference_s"] = self.reference_s
        extra["phases_ms"] = self.phases_ms
        return {**found, "extra": extra}


@dataclass
class Progress:
    """The finished stages: a failed measurement's record keeps what they found."""

    ready: stage.Ready | None = None
    checked: stage.Checked | None = None
    sustained: stage.Sustained | None = None
    timed: stage.Timed | None = None
    memory: stage.Memory | None = None
    repeated: stage.Repeated | None = None
    kernels: stage.Kernels | None = None
    numbers: stage.Numbers | None = None

    def parts(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The record's fields the finished stages found, and its extra entries."""
        ready = self.ready
        if ready is None:
            return {}, {}
        found: dict[str, Any] = {"kernel": ready.prepared.kernel, "kv_expanded": ready.prepared.kv_expanded}
        setup = ready.setup if self.kernels is None else with_profile(ready.setup, self.kernels)
        extra = {**ready.prepared.extra, **entries_of(setup)}
        if self.sustained is not None:
            extra.update(self.sustained.entries)
        if self.timed is not None:
            self.add_timed(self.timed, found, extra)
        if self.repeated is not None:
            repeated = self.repeated
            found["repeatable"] = repeated.repeatable
            seen = repeat_extra(repeated.compared, list(repeated.calls), repeated.tensors, GRADS_UNCHECKED)
            extra.update(seen, **judged_extra(list(repeated.judged)))
        if self.kernels is not None:
            ran = self.kernels.ran
            found.update(as_fields(ran.fields))
            extra.update(ran.extra)
            extra["integrity"] = self.kernels.checks
        if self.numbers is not None:
            self.add_numbers(self.numbers, found, extra)
        return found, extra

    @staticmethod
    def add_timed(timed: stage.Timed, found: dict[str, Any], extra: dict[str, Any]) -> None:
        if timed.gpu is not None:
            state = timed.gpu.record_fields()
            extra.update(state.pop("extra"))
            found.update(state)
        if timed.bracket is not None:
            extra.update(timed.bracket.extra())
        if timed.events_note:
            extra["off_stream"] = timed.events_note

    def add_numbers(self, numbers: stage.Numbers, found: dict[str, Any], extra: dict[str, Any]) -> None:
        assert self.checked is not None and self.timed is not None and self.repeated is not None
        timing, samples, verdict = self.checked.timing, self.timed.samples, self.repeated.verdict
        memory = self.memory
        assert memory is not None
        found.update(numbers.timing, tflops=numbers.tflops, bandwidth_gbs=numbers.bandwidth_gbs,
                     peak_memory_bytes=memory.peak, memory_method=memory.method,
                     max_abs_error=stage.finite(verdict.max_abs_error),
                     error_bound=stage.finite(verdict.error_bound),
                     rows_checked=numbers.rows_checked, grad_checked=numbers.grad_checked,
                     percent_of_peak=numbers.percent_of_peak)
        extra.update(timing_extra(samples, numbers.timer_extra))
        if timing.warmed_ms:  # the checked call, a warm-up
            extra.update(entries_of(TimingParts(check_ms=timing.warmed_ms, check_sampled=samples.prior_joined,
                                                check_call_ms=timing.prior_ms)))
        errors = {name: stage.finite(value) for name, value in verdict.errors.items()}
        extra["errors"] = errors
        if any(value is None for value in errors.values()):
            extra["nonfinite"] = True
        extra.update(numbers.accuracy, **numbers.roof)


def with_profile(setup: SetupParts, kernels: stage.Kernels) -> SetupParts:
    """`setup` with the profiled (and traced) call's time added."""
    ran = kernels.ran
    parts = {**(setup.setup_parts or {}), "profile": ran.profile_ms}
    if ran.trace_ms:
        parts["trace"] = ran.trace_ms
    return SetupParts(setup_ms=(setup.setup_ms or 0.0) + (ran.profile_ms + ran.trace_ms), setup_parts=parts)


def as_fields(part: object) -> dict[str, Any]:
    """A typed part's fields by name."""
    return {f.name: getattr(part, f.name) for f in fields(part)}  # type: ignore[arg-type]
