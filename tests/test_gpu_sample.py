"""attnbench.gpu.sample: what a CUDA record carries about its GPU."""

from __future__ import annotations

from attnbench.gpu.nvml import NvmlReader
from attnbench.gpu.sample import record_sample
from tests.conftest import make_case
from tests.fake_nvml import FakeNvml
from tests.fake_smi import H200


def test_record_sample_fills_the_record_on_cuda_and_nothing_on_cpu() -> None:
    fields: dict = {"extra": {"compile_s": 1.0}}
    record_sample(fields, "cpu", NvmlReader(FakeNvml(reasons=0x40)), H200)
    assert fields == {"extra": {"compile_s": 1.0}}
    record_sample(fields, "cuda", NvmlReader(FakeNvml(reasons=0x40)), H200)
    assert fields["throttled"] is True
    assert fields["extra"] == {"compile_s": 1.0, "sm_clock_mhz": 1980, "clock_event_reasons": ["hw_thermal_slowdown"],
                               "other_gpu_processes": 0, "power_w": 123.502}


def test_the_run_summary_marks_a_throttled_median() -> None:
    from rich.console import Console

    from attnbench.results import Record
    from attnbench.session import print_summary

    case = make_case(device="cuda").fields()
    record = Record(run_id="r", suite="s", timestamp="t", backend="sdpa", status="ok", time_ms=1.0, time_ms_iqr=0.01,
                    throttled=True, case_id="c", **case)
    console = Console(record=True, width=200)
    print_summary([record, Record(**{**record.to_dict(), "backend": "naive", "throttled": False})], console)
    text = console.export_text()
    assert "!1.000" in text and text.count("!1.000") == 1
    assert "! before a median: timed on a throttled or shared GPU" in text
