"""Counting work and bytes, the shared peaks table, and percent_of_peak against a known roof."""

from __future__ import annotations

import pytest

from attnbench.backends.registry import default_registry
from attnbench.core import counting
from attnbench.core.peaks import peak_bandwidth_for, peak_for
from attnbench.run.measure import Settings, measure
from attnbench.run.recording import RunInfo
from attnbench.timing.timers import Samples, Timer, TimingSettings
from attnbench.verify.inputs import CaseData
from tests.helpers import make_case

ONE_MS = TimingSettings(warmup_ms=0, budget_ms=0, min_samples=3, max_samples=3)


class FixedTimer(Timer):
    """Every call takes exactly `ms`: the throughput fields become exact arithmetic."""

    name = "fixed"

    def __init__(self, ms: float) -> None:
        self.ms = ms

    def measure(self, fn: object, settings: TimingSettings) -> Samples:  # type: ignore[override]
        return Samples((self.ms,) * settings.min_samples)


def test_flops_and_bytes_by_hand() -> None:
    # b1 h2 (kv 1) d4, Sq = Sk = 3, causal: visible pairs 1 + 2 + 3 = 6.
    case = make_case(batch=1, heads=2, kv_heads=1, head_dim=4, seq_len=3, causal=True)
    assert counting.flops(case) == 4 * 1 * 2 * 4 * 6
    q = o = 1 * 2 * 3 * 4 * 4  # fp32
    k = v = 1 * 1 * 3 * 4 * 4
    assert counting.bytes_moved(case) == q + k + v + o == counting.io_bytes(case) == 288
    bwd = make_case(batch=1, heads=2, kv_heads=1, head_dim=4, seq_len=3, causal=True, mode="bwd")
    assert counting.flops(bwd) == int(2.5 * 4 * 2 * 4 * 6)
    assert counting.bytes_moved(bwd) == 2 * (q + k + v) + 2 * o  # reads Q K V O dO, writes dQ dK dV
    both = make_case(batch=1, heads=2, kv_heads=1, head_dim=4, seq_len=3, causal=True, mode="fwd_bwd")
    assert counting.bytes_moved(both) == 3 * (q + k + v) + 3 * o


def test_decode_bytes_are_dominated_by_the_kv_cache() -> None:
    # One query over 1000 keys, 8 query heads on 2 KV heads, d64, bf16: K and V are 2*2*1000*64*2 bytes.
    case = make_case(dtype="bfloat16", heads=8, kv_heads=2, head_dim=64, seq_len=1, kv_seq_len=1000)
    assert case.memory_bound
    assert counting.bytes_moved(case) == 2 * (8 * 64 * 2) + 2 * (2 * 1000 * 64 * 2)
    assert counting.flops(case) == 4 * 8 * 64 * 1000


@pytest.mark.parametrize(("name", "bandwidth"), [
    ("NVIDIA H100 80GB HBM3", 3350.0), ("NVIDIA H100 PCIe", 2000.0), ("NVIDIA H200", 4800.0),
    ("NVIDIA A100-SXM4-40GB", 1555.0), ("NVIDIA A100-SXM4-80GB", 2039.0), ("NVIDIA A100 80GB PCIe", 1935.0),
    ("NVIDIA B200", 8000.0), ("NVIDIA L40S", 864.0), ("NVIDIA L4", 300.0), ("NVIDIA GeForce RTX 4090", 1008.0),
    ("Tesla T4", 320.0), ("Intel(R) Xeon(R)", None),
])
def test_bandwidth_by_device_name(name: str, bandwidth: float | None) -> None:
    assert peak_bandwidth_for(name) == bandwidth


def test_an_override_wins_and_says_so() -> None:
    peak = peak_for("NVIDIA H100 80GB HBM3", "bfloat16", tflops=500.0)
    assert (peak.tflops, peak.tflops_source) == (500.0, "--peak-tflops")
    assert (peak.bandwidth_gbs, peak.bandwidth_source) == (3350.0, "datasheet: H100 SXM")
    assert peak.ridge == pytest.approx(500e12 / 3350e9)


def measure_with(case: object, info: RunInfo, ms: float = 1.0) -> object:
    return measure(CaseData(case), default_registry().get("naive"), FixedTimer(ms), Settings(info, ONE_MS))  # type: ignore[arg-type]


def test_percent_of_peak_against_an_overridden_compute_roof() -> None:
    case = make_case(seq_len=64, heads=4, head_dim=32)
    record = measure_with(case, RunInfo("r", "t", "cpu", peak_tflops=0.01))
    tflops = counting.flops(case) / 1e-3 / 1e12
    assert record.tflops == pytest.approx(tflops)
    naive_bytes = counting.bytes_moved(case) + 4 * 4 * 64 * 64 * 4  # and its scores: written and read, twice
    assert record.bytes_moved == naive_bytes
    assert record.bandwidth_gbs == pytest.approx(naive_bytes / 1e-3 / 1e9)
    assert record.percent_of_peak == pytest.approx(100 * tflops / 0.01)
    assert record.extra["peak_source"] == "--peak-tflops" and record.extra["peak_bound"] == "compute"


def test_decode_percent_of_peak_is_of_memory_bandwidth() -> None:
    case = make_case(seq_len=1, kv_seq_len=512, heads=4, kv_heads=1, head_dim=32)
    record = measure_with(case, RunInfo("r", "t", "cpu", peak_tflops=0.01, peak_bandwidth_gbs=1.0), ms=0.5)
    moved = default_registry().get("naive").bytes_moved(case)
    assert record.percent_of_peak == pytest.approx(100 * (moved / 0.5e-3 / 1e9) / 1.0)
    assert record.extra["peak_bound"] == "memory" and record.extra["peak_source"] == "--peak-bandwidth"


def test_a_cpu_has_no_datasheet_peak_but_its_measured_one() -> None:
    record = measure_with(make_case(), RunInfo("r", "t", "Intel(R) Xeon(R) CPU"))
    assert record.status == "ok" and record.percent_of_peak is None and record.extra["peak_source"] is None
    assert "percent_of_measured_peak" not in record.extra  # no calibration given
    calibrated = RunInfo("r", "t", "Intel(R) Xeon(R) CPU", measured_tflops=(("float32", 0.05),),
                         measured_bandwidth_gbs=9.0)
    record = measure_with(make_case(), calibrated)
    assert record.extra["measured_peak"] == 0.05
    assert record.extra["percent_of_measured_peak"] == pytest.approx(100 * record.tflops / 0.05)


@pytest.mark.slow
def test_run_peak_options_reach_an_isolated_worker(tmp_path: object) -> None:
    """--peak-tflops / --peak-bandwidth travel in RunInfo to the worker process and into every record and env.json."""
    import json
    from pathlib import Path

    from typer.testing import CliRunner

    from attnbench.cli.main import app
    from attnbench.records.results import load_records

    suite = Path(str(tmp_path)) / "peaks.yaml"
    suite.write_text("name: peaks\ndevice: cpu\nbackends: [naive]\n"
                     "timing: {warmup_ms: 0, budget_ms: 1, min_samples: 2}\n"
                     "sweep: {seq_len: [1, 32], kv_seq_len: [64], heads: [2], head_dim: [16]}\n")
    out = Path(str(tmp_path)) / "out"
    result = CliRunner().invoke(app, ["run", str(suite), "--out", str(out), "--no-report", "--isolate",
                                      "--peak-tflops", "0.5", "--peak-bandwidth", "20"])
    assert result.exit_code == 0, result.output
    records = {r.seq_len: r for r in load_records(out)}
    assert records[32].percent_of_peak == pytest.approx(100 * records[32].tflops / 0.5)
    assert records[1].percent_of_peak == pytest.approx(100 * records[1].bandwidth_gbs / 20)
    assert records[1].extra["peak_source"] == "--peak-bandwidth"
    env = json.loads((out / "env.json").read_text())
    assert (env["peak_tflops"], env["peak_bandwidth_gbs"]) == (0.5, 20.0)


def test_a_window_reads_only_the_keys_it_can_see() -> None:
    # One query, window 256 over an 8192-key cache: 257 K and V rows are read, not 8192.
    case = make_case(seq_len=1, kv_seq_len=8192, heads=8, kv_heads=2, head_dim=64, causal=True, window=256)
    assert counting.key_rows_read(case) == 257
    assert counting.bytes_moved(case) == 2 * (8 * 64 * 4) + 2 * (2 * 257 * 64 * 4)
    # Prefill with a window: every key is seen by some query.
    assert counting.key_rows_read(make_case(seq_len=512, causal=True, window=64)) == 512
    # 16 queries at the end of an 80-key cache, window 16: keys 48 to 79.
    assert counting.key_rows_read(make_case(seq_len=16, kv_seq_len=80, causal=True, window=16)) == 32
