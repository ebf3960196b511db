"""attnbench.gpu.describe: a GPU's state, and its span over a run's timings, in the words doctor and the report use."""

from __future__ import annotations

import json
from pathlib import Path

from attnbench.gpu.describe import describe, describe_span
from attnbench.gpu.read import snapshot
from attnbench.gpu.sample import RunSpan, run_span
from attnbench.gpu.smi import SmiReader
from attnbench.gpu.state import GpuState
from tests.fake_smi import H200, smi

H200_RUNS = json.loads((Path(__file__).parent / "data" / "gpu" / "h200-runs.json").read_text())["runs"]


def test_the_idle_h200_in_one_line() -> None:
    assert describe(snapshot(H200, SmiReader(smi()))) == (
        "GPU 0 state (nvidia-smi): SM clock 345 MHz (application 1980, max 1980) · memory clock 3201 MHz "
        "(application 3201, max 3201) · 81 W of 700 W · 34 °C · persistence on · ECC on · MIG off · "
        "compute mode default · clock events: gpu_idle · no other processes · clocks not locked")
    assert describe(GpuState(2, error="no NVML")) == "GPU 2 state: unknown (no NVML)"
    assert describe(GpuState(0, source="nvml")).endswith("clock events: none · other processes unknown · "
                                                         "clocks perhaps not locked")


def test_the_h200_run_while_timing_in_one_line() -> None:
    [span] = run_span(H200_RUNS["NVIDIA-H200-20261130-012712"]["records"])
    assert describe_span(span) == (
        "120 timings · SM clock 1695–1980 MHz · power not recorded · clock events: sw_power_cap (15 of 120) · "
        "other processes in 120 of 120 · 120 of 120 flagged throttled (!)")
    calm = RunSpan(None, 1, (1980, 1980), (412.4, 412.4), {}, 0, 0, 0)
    assert describe_span(calm) == ("1 timing · SM clock 1980 MHz · power 412 W · clock events: none · "
                                   "no other processes · none flagged throttled")
