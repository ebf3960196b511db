"""Repeatability: two calls on the same inputs compared bit for bit, recorded as `repeatable`; a mismatch re-checked on
a fresh call, and the record's verdict the worst of the calls judged (docs/conventions.md "Correctness rule")."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import ClassVar

import pytest
import torch

from attnbench.backends.base import Backend, Prepared
from attnbench.backends.registry import default_registry
from attnbench.core import workload
from attnbench.records.results import Record, ResultsWriter
from attnbench.run.measure import Settings, measure
from attnbench.run.recording import RunInfo
from attnbench.timing.timers import Samples, Timer
from attnbench.verify.inputs import CaseData, naive_attention
from attnbench.verify.repeat import bitwise_equal, compare, max_difference
from tests.helpers import ONE_SAMPLE, ScriptedTimer, make_case, run_cases


class Flaky(Backend):
    """Naive attention that adds `noise` to one element on every other call: the output's first element on the
    calls `noisy` names (1 = the first call, the checked one), or with `grad`, dQ's first element on those backward
    calls. A stand-in for a kernel whose atomics add in a different order each time."""

    name = "flaky"
    noise: ClassVar[float] = 1e-6
    noisy: ClassVar[int] = 0  # the parity of the noisy calls: 0 → 2nd, 4th, …; 1 → 1st, 3rd, …
    grad: ClassVar[bool] = False

    def deterministic(self, case):  # type: ignore[no-untyped-def]
        return "honoured (a test's stand-in)"

    def prepare(self, case, q, k, v) -> Prepared:  # type: ignore[no-untyped-def]
        mask = workload.mask(case, device=q.device)
        calls = {"fwd": 0, "bwd": 0}
        backend = self

        class NoisyGrad(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):  # type: ignore[no-untyped-def, override]
                return x.view_as(x)

            @staticmethod
            def backward(ctx, grad):  # type: ignore[no-untyped-def, override]
                calls["bwd"] += 1
                return backend.plant(grad, calls["bwd"])

        def call(q, k, v):  # type: ignore[no-untyped-def]
            calls["fwd"] += 1
            out = naive_attention(NoisyGrad.apply(q) if self.grad else q, k, v, mask)
            return out if self.grad else self.plant(out, calls["fwd"])

        return Prepared((q, k, v), call, kernel="flaky")

    def plant(self, x: torch.Tensor, count: int) -> torch.Tensor:
        if count % 2 != self.noisy:
            return x
        bump = torch.zeros_like(x)
        bump.view(-1)[0] = self.noise
        return x + bump


def flaky(noise: float, noisy: int = 0, grad: bool = False) -> Flaky:
    return type("Flaky", (Flaky,), {"noise": noise, "noisy": noisy, "grad": grad})()


def measured(backend: Backend, mode: str = "fwd", timer: object = None) -> Record:
    case = make_case(mode=mode, seq_len=48, heads=2, kv_heads=2, head_dim=16, causal=True)
    settings = Settings(RunInfo("r", "t"), ONE_SAMPLE)
    return measure(CaseData(case), backend, timer or ScriptedTimer([1.0, 1.0, 1.0]), settings)


# ---- bit for bit ---------------------------------------------------------------------------------

def test_bitwise_means_the_bytes_same_nans_equal_signed_zeros_not() -> None:
    a = torch.tensor([1.0, float("nan"), 0.0])
    assert bitwise_equal(a, a.clone())  # a NaN in the same place with the same bits is equal
    assert not bitwise_equal(a, torch.tensor([1.0, float("nan"), -0.0]))
    assert max_difference(a, torch.tensor([1.0, float("nan"), -0.0])) == 0.0  # the values agree, the bits do not
    assert max_difference(a, torch.tensor([1.0, 2.0, 0.0])) == math.inf  # a NaN in one call only
    assert max_difference(torch.tensor([float("inf")]), torch.tensor([float("inf")])) == 0.0
    result = compare((a, torch.ones(3)), (a.clone(), torch.tensor([1.0, 1.25, 1.0])), ("dq", "dk"))
    assert (result.equal, result.max_diff, result.tensor) == (False, 0.25, "dk")


# ---- every record -----------------------------------------------------------------------------------

@pytest.mark.slow
def test_every_record_carries_repeatable(tmp_path: Path) -> None:
    """True where two calls agreed, null where nothing was compared (a skip; a backward whose gradients are not
    checked), on every line of results.jsonl."""
    registry = default_registry()
    cases = [make_case(mode="fwd"), make_case(mode="fwd_bwd", seq_len=32),
             make_case(mode="bwd", seq_len=4200, heads=1, kv_heads=1, head_dim=8)]  # too large for a backward check
    with ResultsWriter(tmp_path / "results.jsonl") as writer:
        run_cases(cases, [registry.get("naive"), registry.get("sdpa"), registry.get("flash-attn")], writer.append)
    stored = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(stored) == 9 and all("repeatable" in r for r in stored)
    by = {(r["backend"], r["mode"]): r for r in stored}
    for backend in ("naive", "sdpa"):
        assert by[backend, "fwd"]["repeatable"] is True and by[backend, "fwd"]["extra"]["repeat_tensors"] == ["out"]
        assert by[backend, "fwd_bwd"]["repeatable"] is True
        assert by[backend, "fwd_bwd"]["extra"]["repeat_tensors"] == ["dq", "dk", "dv"]
        unchecked = by[backend, "bwd"]
        assert unchecked["grad_checked"] is False and unchecked["repeatable"] is None
        assert unchecked["extra"]["repeat_note"].startswith("not compared")
    assert {by["flash-attn", m]["status"] for m in ("fwd", "bwd", "fwd_bwd")} == {"skipped"}
    assert {by["flash-attn", m]["repeatable"] for m in ("fwd", "bwd", "fwd_bwd")} == {None}


# ---- a planted non-deterministic backend --------------------------------------------------------

@pytest.mark.parametrize("mode, tensor", [("fwd", "out"), ("fwd_bwd", "dq"), ("bwd", "dq")])
def test_noise_on_every_other_call_is_not_repeatable(mode: str, tensor: str) -> None:
    """Within the bound: `ok`, and `repeatable: false` with the largest difference and the tensor it is in."""
    record = measured(flaky(1e-6, grad=mode != "fwd"), mode)
    assert record.status == "ok", record.reason
    assert record.repeatable is False
    assert record.extra["repeat_tensor"] == tensor
    assert record.extra["repeat_max_diff"] == pytest.approx(1e-6, rel=0.05)
    assert record.extra["repeat_calls"] == ["checked call", "timer's first call"]
    assert record.extra["second_check"]["passed"] is True and "recheck" not in record.extra


def test_the_same_backend_without_noise_is_repeatable() -> None:
    record = measured(flaky(0.0))
    assert (record.status, record.repeatable) == ("ok", True)
    assert "repeat_max_diff" not in record.extra and "second_check" not in record.extra


def test_a_second_call_out_of_bound_makes_the_record_a_mismatch() -> None:
    """The checked call passes, the timer's first call is off by far more than the bound: the verdict must not hang
    on which call was checked, so the record is a `mismatch` of the second call, re-checked on a fresh call."""
    record = measured(flaky(0.5))
    assert record.status == "mismatch" and record.repeatable is False
    assert record.reason.startswith("out max |error| 0.5")
    assert "on the second call; checked call passed, re-check call passed" in record.reason
    assert record.max_abs_error == pytest.approx(0.5, rel=0.01) and record.max_abs_error > record.error_bound
    assert record.extra["recheck"]["passed"] is True and record.extra["recheck"]["agreed"] is False
    assert record.time_ms == 1.0  # timed all the same, flagged


def test_a_checked_call_out_of_bound_is_rechecked_on_a_fresh_call() -> None:
    """Noise on the 1st and 3rd calls: the checked call fails, the timer's first passes, the re-check (a fresh,
    untimed call) fails again — it agrees, and the calls differ: `repeatable: false`."""
    record = measured(flaky(0.5, noisy=1), timer=ScriptedTimer([1.0]))
    assert record.status == "mismatch" and record.repeatable is False
    assert record.reason.endswith("; second call passed, re-check call failed")
    recheck = record.extra["recheck"]
    assert recheck["agreed"] is True and recheck["max_abs_error"] == pytest.approx(0.5, rel=0.01)
    assert record.extra["second_check"]["passed"] is True
    assert record.extra["repeat_calls"] == ["checked call", "timer's first call", "re-check call"]


def test_a_steady_mismatch_is_rechecked_and_reproduces() -> None:
    """A backend wrong the same way every time: `mismatch`, repeatable, and its re-check agrees."""
    from attnbench.backends.testing import Wrong

    record = measured(Wrong())
    assert record.status == "mismatch" and record.repeatable is True
    assert record.reason.endswith("; re-check call failed")
    assert record.extra["recheck"]["agreed"] is True and "second_check" not in record.extra


def test_gradient_noise_out_of_bound_is_a_mismatch_of_dq() -> None:
    record = measured(flaky(0.5, grad=True), "bwd")
    assert record.status == "mismatch" and record.reason.startswith("dq max |error|")
    assert record.extra["repeat_tensor"] == "dq" and record.repeatable is False


class Counting(Flaky):
    name = "counting"
    noise = 0.0

    def __init__(self) -> None:
        self.calls = 0

    def prepare(self, case, q, k, v) -> Prepared:  # type: ignore[no-untyped-def]
        prepared = super().prepare(case, q, k, v)
        inner = prepared.call

        def call(*args):  # type: ignore[no-untyped-def]
            self.calls += 1
            return inner(*args)

        prepared.call = call
        return prepared


class NoCalls(Timer):
    """A timer that reports samples without calling the function (a scripted test timer)."""

    name = "scripted"

    def measure(self, fn, settings):  # type: ignore[no-untyped-def]
        return Samples((1.0,))


def test_the_second_call_is_the_timers_own_and_an_untimed_one_only_without_it() -> None:
    backend = Counting()
    record = measured(backend, timer=ScriptedTimer([1.0, 1.0, 1.0]))
    # the checked call, three timed ones, and the profiled call after them (attnbench.run.profiled), which in a
    # forward is also the integrity guard's call on other inputs (attnbench.verify.integrity)
    assert backend.calls == 1 + 3 + 1 and record.extra["repeat_calls"][1] == "timer's first call"
    backend = Counting()
    record = measured(backend, timer=NoCalls())
    assert backend.calls == 2 + 1 and record.extra["repeat_calls"][1] == "untimed call after timing"  # + profiled
    assert record.repeatable is True


def test_an_inf_difference_is_stored_as_null() -> None:
    """A NaN in one call only: an infinite difference, which JSON cannot hold, is stored as null."""
    record = measured(flaky(float("nan")))
    assert record.status == "mismatch" and record.repeatable is False
    assert record.extra["repeat_max_diff"] is None and record.extra["second_check"]["max_abs_error"] is None
    json.dumps({k: record.extra[k] for k in ("repeat_max_diff", "second_check", "recheck")}, allow_nan=False)


class OneBuffer(Flaky):
    """Flaky's noise on every other call, each result copied into one buffer that every call returns: a plugin
    whose two results are the same tensor, so comparing them as they are would find them equal by construction."""

    name = "one-buffer"
    noise = 1e-6

    def prepare(self, case, q, k, v) -> Prepared:  # type: ignore[no-untyped-def]
        inner = super().prepare(case, q, k, v)
        buffer: list[torch.Tensor] = []

        def call(q, k, v):  # type: ignore[no-untyped-def]
            out = inner.call(q, k, v)
            if not buffer:
                buffer.append(torch.empty_like(out))
            return buffer[0].copy_(out)

        return Prepared(inner.inputs, call, kernel="one-buffer")


def test_a_backend_returning_one_buffer_every_call_is_not_repeatable_by_construction() -> None:
    record = measured(OneBuffer())
    assert record.status == "ok", record.reason
    assert record.repeatable is False  # before: true, the buffer compared with itself
    assert record.extra["repeat_max_diff"] == pytest.approx(1e-6, rel=0.05)
    assert record.extra["repeat_calls"][0].startswith("last timed call, copied")
    steady = type("Steady", (OneBuffer,), {"noise": 0.0})()
    assert measured(steady).repeatable is True  # the same buffer with the same bits on every call is repeatable
