"""One measurement: its record follows the guide, setup is outside the samples, the skip rule's memory limit, the
float64 reference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnbench.backends.registry import default_registry
from attnbench.core import counting
from attnbench.records.results import load_records
from attnbench.run.measure import Settings, measure
from attnbench.run.recording import RunInfo
from attnbench.timing.timers import ClockTimer
from attnbench.verify.inputs import CaseData
from tests.helpers import ONE_SAMPLE, ScriptedTimer, make_case, run_into


def test_record_fields_follow_the_guide(tmp_path: Path) -> None:
    (record,) = run_into(tmp_path / "results.jsonl", [make_case(causal=True, window=8, mode="fwd_bwd")],
                         [default_registry().get("sdpa-math")], timer=ScriptedTimer([2.5, 0.5, 1.5]))
    stored = json.loads((tmp_path / "results.jsonl").read_text())
    for field in ("schema_version", "run_id", "suite", "timestamp", "backend", "kernel", "device", "dtype", "batch",
                  "seq_len", "kv_seq_len", "heads", "kv_heads", "head_dim", "causal", "window", "mode", "status",
                  "time_ms", "time_ms_iqr", "time_ms_min", "samples", "times_ms", "timer", "flops", "tflops",
                  "peak_memory_bytes", "memory_method", "memory_estimate_bytes", "max_abs_error", "error_bound",
                  "rows_checked", "grad_checked", "kv_expanded"):
        assert field in stored, field
    assert stored["times_ms"] == [2.5, 0.5, 1.5] and stored["samples"] == 3
    assert (stored["time_ms"], stored["time_ms_min"], stored["time_ms_iqr"]) == (1.5, 0.5, 1.0)
    assert stored["timer"] == "scripted"
    assert stored["flops"] == counting.flops(make_case(causal=True, window=8, mode="fwd_bwd"))
    assert stored["tflops"] == pytest.approx(stored["flops"] / (stored["time_ms"] * 1e-3) / 1e12)
    assert record.grad_checked


def test_a_case_far_beyond_free_device_memory_is_skipped_with_the_estimate() -> None:
    naive = default_registry().get("naive")
    case = make_case(seq_len=256)  # naive: scores and probabilities, 2 x 4 x 256² fp32, plus the output: 2.1 MiB
    record = measure(CaseData(case), naive, ClockTimer(),
                     Settings(RunInfo("r", "unit"), ONE_SAMPLE, lambda device: 1 << 19))
    assert record.status == "skipped" and record.time_ms is None
    assert record.reason == "estimated memory 2.1 MiB exceeds 2x the free device memory 0.5 MiB; not tried"
    roomy = Settings(RunInfo("r", "unit"), ONE_SAMPLE, lambda device: 2 << 20)
    assert measure(CaseData(case), naive, ClockTimer(), roomy).status == "ok", "within 2x of free memory: tried"


def test_the_reference_is_float64_on_cuda_too_so_fp32_bounds_do_not_collapse() -> None:
    """An fp32 reference on CUDA is naive in fp32 itself: err(naive) = 0 and the bound a bare 1e-5 floor."""
    import dataclasses

    import torch

    from attnbench.verify import inputs as inputs_mod
    from attnbench.verify.check import max_abs_error

    cpu = make_case(dtype="float32", seq_len=512, heads=2, kv_heads=2, head_dim=64, causal=True)
    cuda = dataclasses.replace(cpu, device="cuda")  # the reference's precision must not depend on the device
    inputs = inputs_mod.make_inputs(cpu)
    ref = inputs_mod.reference(cuda, inputs, None)
    assert ref.out.dtype == torch.float64
    naive = inputs_mod.blocked_attention(cuda, inputs, None, False)
    assert max_abs_error(naive.out, ref.out) > 0  # an fp32 reference would make this exactly 0


def test_setup_is_the_whole_prepare_with_the_parts_the_backend_reports() -> None:
    """A backend whose prepare takes 30 ms, 10 of them a reported compile: setup_ms covers all of it, outside the
    samples, and the part not reported is `other`."""
    import time

    from attnbench.backends.base import Prepared
    from attnbench.backends.testing import FaultyBackend

    class SlowToPrepare(FaultyBackend):
        name = "slow-to-prepare"

        def prepare(self, case, q, k, v) -> Prepared:  # type: ignore[no-untyped-def]
            prepared = super().prepare(case, q, k, v)
            time.sleep(0.03)
            prepared.extra["compile_s"] = 0.01
            return prepared

    record = measure(CaseData(make_case()), SlowToPrepare(), ScriptedTimer([1.0] * 5),
                     Settings(RunInfo("s", "t"), ONE_SAMPLE))
    assert record.status == "ok", record.reason
    setup, parts = record.extra["setup_ms"], record.extra["setup_parts"]
    profile = parts["profile"]  # the profiled call after the samples is setup too (attnbench.run.profiled)
    assert 30 <= setup - profile < 1000 and parts["compile"] == pytest.approx(10.0)
    assert parts["other"] == pytest.approx(setup - 10.0 - profile) and parts["other"] >= 20
    assert record.time_ms == 1.0  # the samples are the timer's alone



def test_a_backend_that_answers_nan_is_a_mismatch_written_like_any_record(tmp_path: Path) -> None:
    """NaN in the output makes the error infinite; JSON has no infinity: the record says so in words and still lands
    on disk, and the sweep goes on."""
    import torch

    from attnbench.backends.base import Prepared
    from attnbench.backends.testing import FaultyBackend

    class NanOut(FaultyBackend):
        name = "nan-out"

        def prepare(self, case, q, k, v) -> Prepared:  # type: ignore[no-untyped-def]
            return Prepared((q, k, v), lambda q, k, v: torch.full_like(q, float("nan")), kernel="nan")

    naive = default_registry().get("naive")
    records = run_into(tmp_path / "results.jsonl", [make_case()], [NanOut(), naive])
    assert [r.status for r in records] == ["mismatch", "ok"]
    assert records[0].reason.startswith("out holds NaN or Inf") and records[0].max_abs_error is None
    assert records[0].extra["nonfinite"] is True and records[0].extra["errors"]["out"] is None
    assert [r.status for r in load_records(tmp_path)] == ["mismatch", "ok"]
