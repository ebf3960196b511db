"""attnbench.gpu.sample: what a CUDA record carries about its GPU, and what a run's records say together."""

from __future__ import annotations

import json
from pathlib import Path

from attnbench.gpu.nvml import NvmlReader
from attnbench.gpu.sample import GpuSample, RunSpan, record_sample, run_span
from tests.fake_nvml import FakeNvml
from tests.fake_smi import H200

H200_RUNS = json.loads((Path(__file__).parent / "data" / "gpu" / "h200-runs.json").read_text())["runs"]


def test_record_sample_fills_the_record_on_cuda_and_nothing_on_cpu() -> None:
    fields: dict = {"extra": {"compile_s": 1.0}}
    record_sample(fields, "cpu", NvmlReader(FakeNvml(reasons=0x40)), H200)
    assert fields == {"extra": {"compile_s": 1.0}}
    record_sample(fields, "cuda", NvmlReader(FakeNvml(reasons=0x40)), H200)
    assert fields["throttled"] is True
    assert fields["extra"] == {"compile_s": 1.0, "sm_clock_mhz": 1980, "clock_event_reasons": ["hw_thermal_slowdown"],
                               "other_gpu_processes": 0, "power_w": 123.502}


def test_a_sample_reads_back_from_the_record_it_wrote() -> None:
    sample = GpuSample(1710, 699.5, ("sw_power_cap",), 0, True)
    fields = sample.record_fields()
    assert GpuSample.from_record({"throttled": fields["throttled"], "extra": fields["extra"]}) == sample
    assert GpuSample.from_record({"extra": {"gpu_state_error": "no NVML"}}) == GpuSample(error="no NVML")
    assert GpuSample.from_record({"extra": {"compile_s": 1.0}}) is None  # a CPU record


def test_the_state_during_the_h200_run_is_the_range_its_records_recorded() -> None:
    """reports/NVIDIA-H200-20261130-012712 was timed at 1695-1980 MHz, 15 timings power-capped; env.json's snapshot,
    taken idle before the run, says 345 MHz and no clock event but gpu_idle."""
    run = H200_RUNS["NVIDIA-H200-20261130-012712"]
    [span] = run_span(run["records"])
    assert span == RunSpan(gpu=None, timings=120, sm_clock_mhz=(1695, 1980), power_w=None,
                           reasons={"sw_power_cap": 15}, shared=120, throttled=120, unread=0)
    assert run["gpu_state"][0]["sm_clock_mhz"] == 345 and run["gpu_state"][0]["clock_event_reasons"] == ["gpu_idle"]
    clocks = [r["extra"]["sm_clock_mhz"] for r in run["records"]]
    assert (min(clocks), max(clocks)) == (1695, 1980)


def test_a_run_on_several_gpus_has_a_span_per_gpu_and_power_when_recorded() -> None:
    def timed(gpu: str, clock: int, power: float, reasons: list[str]) -> dict:
        return {"throttled": bool(reasons), "extra": {"gpu": gpu, "sm_clock_mhz": clock, "power_w": power,
                                                      "clock_event_reasons": reasons, "other_gpu_processes": 0}}

    records = [timed("4", 1980, 410.0, []), timed("4", 1755, 699.9, ["sw_power_cap"]), timed("5", 1980, 380.5, []),
               {"status": "skipped", "extra": {}}]
    four, five = run_span(records)
    assert (four.gpu, four.timings, four.sm_clock_mhz, four.power_w, four.reasons, four.throttled) == (
        "4", 2, (1755, 1980), (410.0, 699.9), {"sw_power_cap": 1}, 1)
    assert (five.gpu, five.sm_clock_mhz, five.power_w, five.throttled) == ("5", (1980, 1980), (380.5, 380.5), 0)
    assert run_span([{"extra": {}}]) == []
