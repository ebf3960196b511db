"""Behaviour-wide: the profiled call names what ran, and planted backends that run the wrong kernel, spend their call
in a copy, or lose a kernel in a graph replay are caught by name (attnbench.run.profiled, attnbench.timing.profile)."""

from __future__ import annotations

import json

import pytest

from attnbench.backends.base import Backend, Prepared
from attnbench.backends.registry import default_registry
from attnbench.backends.sdpa import SDPA_FLASH
from attnbench.core.case import Case
from attnbench.run import measure as measure_module
from attnbench.run.measure import Settings, measure
from attnbench.run.recording import RunInfo
from attnbench.timing.timers import ClockTimer, TimingSettings
from attnbench.verify.quant_data import case_data

FEW = TimingSettings(warmup_ms=0.0, budget_ms=0.0, min_samples=5, max_samples=5)


def case(window: int | None = None, mode: str = "fwd") -> Case:
    return Case("cpu", "float32", 1, 256, 256, 4, 4, 64, True, window, mode)


def run(backend: Backend, timer: object = None, c: Case | None = None, settings: Settings | None = None):  # type: ignore[no-untyped-def]
    return measure(case_data(c or case()), backend, timer or ClockTimer(), settings or Settings(RunInfo("r", "t"), FEW))


class _Sdpa(Backend):
    """SDPA with causal=True, bound to the kernel the subclass's call picks."""

    kernel_names = SDPA_FLASH

    def deterministic(self, c: Case) -> str:
        return "honoured (plain PyTorch ops on a CPU)"

    def prepare(self, c: Case, q, k, v) -> Prepared:  # type: ignore[no-untyped-def]
        return Prepared(inputs=(q, k, v), call=self.call, kernel="sdpa flash (as claimed)")

    @staticmethod
    def call(q, k, v):  # type: ignore[no-untyped-def]
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class ClaimsFlashRunsMath(_Sdpa):
    name = "claims-flash-runs-math"

    @staticmethod
    def call(q, k, v):  # type: ignore[no-untyped-def]
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel([SDPBackend.MATH]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class CopiesFirst(_Sdpa):
    name = "copies-first"

    @staticmethod
    def call(q, k, v):  # type: ignore[no-untyped-def]
        import torch

        waste = torch.empty(64, *q.shape)
        for _ in range(16):  # 1024 copies of Q's layout: a copy that dwarfs the kernel
            waste.copy_(q.transpose(-1, -2).reshape(q.shape).expand(64, *q.shape))
        return _Sdpa.call(q, k, v)


def test_the_cpu_flash_kernel_is_named_and_math_is_not_it() -> None:
    flash = run(default_registry().get("sdpa-flash"))
    math = run(default_registry().get("sdpa-math"))
    assert flash.status == "ok" and flash.kernels[0]["name"] == "aten::_scaled_dot_product_flash_attention_for_cpu"
    assert flash.attention_share >= 0.8 and flash.overhead is None
    assert math.status == "ok" and not any("flash" in k["name"] for k in math.kernels)
    assert {"aten::bmm", "aten::_softmax"} <= {k["name"] for k in math.kernels}
    shares = [k["share"] for k in flash.kernels]
    assert shares == sorted(shares, reverse=True) and sum(shares) == pytest.approx(1.0, abs=1e-3)


def test_a_backend_that_claims_flash_but_runs_math_is_wrong_kernel_with_its_time_kept() -> None:
    record = run(ClaimsFlashRunsMath())
    assert record.status == "wrong_kernel"
    assert "none of claims-flash-runs-math's declared kernels ran" in record.reason and "aten::" in record.reason
    assert record.time_ms is not None and record.samples == 5  # kept, never reported as the backend's


def test_a_large_copy_inside_the_call_is_flagged_overhead_and_named() -> None:
    record = run(CopiesFirst())
    assert record.status == "ok" and record.attention_share < 0.8
    assert record.overhead is not None and "aten::copy_" in record.overhead and "(copy)" in record.overhead


class DroppingGraphTimer(ClockTimer):
    """A CPU stand-in of CudaGraphTimer: after its samples it keeps a 'replay' — here one that lost the softmax."""

    name = "graph-stand-in"

    def __init__(self, replay_runs_all: bool) -> None:
        super().__init__()
        self.replay_runs_all = replay_runs_all

    def measure(self, fn, settings):  # type: ignore[no-untyped-def]
        samples = super().measure(fn, settings)
        self.replay = (fn if self.replay_runs_all else self._lossy, 1)
        return samples

    @staticmethod
    def _lossy() -> None:
        import torch

        a = torch.randn(4, 256, 64)
        torch.bmm(a, a.transpose(1, 2))  # the matmul, but no softmax and no second matmul's partner


def test_a_graph_replay_that_drops_a_kernel_is_wrong_kernel() -> None:
    naive = default_registry().get("naive")
    lost = run(naive, DroppingGraphTimer(replay_runs_all=False))
    whole = run(naive, DroppingGraphTimer(replay_runs_all=True))
    assert lost.status == "wrong_kernel" and "graph replay ran" in lost.reason and "aten::_softmax" in lost.reason
    assert whole.status == "ok", whole.reason


def test_profiling_leaves_the_samples_as_they_were(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each call lasts longer than the one before (its index in ms on the injected clock): a profiled call before
    or among the samples would shift every sample after it."""
    calls = [0]

    class Counting(_Sdpa):
        name = "counting"

        def prepare(self, c, q, k, v):  # type: ignore[no-untyped-def]
            prepared = super().prepare(c, q, k, v)
            inner = prepared.call

            def call(*args):  # type: ignore[no-untyped-def]
                calls[0] += 1
                return inner(*args)
            prepared.call = call
            return prepared

    clock = lambda: calls[0] ** 2 * 1_000_000  # noqa: E731 - call n lasts 2n-1 ms
    with_profile = run(Counting(), ClockTimer(clock))
    calls[0] = 0
    monkeypatch.setattr(measure_module, "profiled", lambda *a, **k: _unprofiled())
    without = run(Counting(), ClockTimer(clock))
    assert with_profile.kernels and without.kernels is None
    assert with_profile.times_ms == without.times_ms and with_profile.time_ms == without.time_ms


def _unprofiled():  # type: ignore[no-untyped-def]
    from attnbench.run.profiled import Profiled

    return Profiled({}, None, 0.0)


def test_trace_is_written_as_chrome_json_holding_the_kernel(tmp_path) -> None:  # type: ignore[no-untyped-def]
    record = run(default_registry().get("sdpa-flash"), settings=Settings(RunInfo("r", "t"), FEW, trace_dir=tmp_path))
    trace = tmp_path / record.trace
    assert record.trace == f"traces/{record.case_id}-sdpa-flash.json"
    names = {event.get("name") for event in json.loads(trace.read_text())["traceEvents"]}
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in names


def test_a_profiler_that_cannot_run_gives_null_kernels_with_a_reason() -> None:
    from attnbench.timing.profile import profile_call

    def boom() -> None:
        raise RuntimeError("launch hidden")

    profile = profile_call(boom, "cpu")
    assert profile.kernels is None and "launch hidden" in profile.reason


def test_recommend_never_chooses_an_overhead_or_wrong_kernel_record() -> None:
    from attnbench.records.results import kernel_trouble
    from attnbench.report.pooling import TIME, trouble

    clean = {"status": "ok", "time_ms": 1.0, "ci_low_ms": 0.9, "ci_high_ms": 1.1, "noisy": False}
    assert trouble(clean, TIME) is None
    assert trouble({**clean, "overhead": "declared kernels 40% of the call"}, TIME) == "overhead"
    assert kernel_trouble({**clean, "status": "wrong_kernel"}) == "wrong kernel"


def test_the_report_names_the_top_kernel_and_lists_overhead_and_wrong_kernel() -> None:
    from attnbench.report.findings import build_findings
    from attnbench.report.groups import group_records
    from attnbench.report.rows import ran_text

    flash = run(default_registry().get("sdpa-flash")).to_dict()
    copies = run(CopiesFirst()).to_dict()
    wrong = run(ClaimsFlashRunsMath()).to_dict()
    assert ran_text(flash).startswith("aten::_scaled_dot_product_flash_attention_for_cpu ")
    assert "overhead" in ran_text(copies)
    records = [flash, copies, wrong]
    found = build_findings(group_records(records), records, None)
    assert any("copies-first" in line and "aten::copy_" in line for line in found.kernels)
    assert any(f.status == "wrong_kernel" for f in found.failures)


def test_compare_calls_out_a_backend_whose_kernel_changed() -> None:
    from attnbench.report.compare import compare_records

    flash = run(default_registry().get("sdpa-flash")).to_dict()
    math = {**run(default_registry().get("sdpa-math")).to_dict(), "backend": "sdpa-flash"}
    comparison = compare_records([flash], [math], "base", "new")
    assert comparison.matches[0].kernel_change == (
        f"sdpa-flash ran {math['kernels'][0]['name']}, was aten::_scaled_dot_product_flash_attention_for_cpu")
    assert "### Kernel changed" in comparison.to_markdown()
