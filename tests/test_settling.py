"""The first screen's line on noisy timings says how many windows ±precision needs and how many the budget gave."""

from __future__ import annotations

from typing import Any

from attnbench.records.record import Record
from attnbench.report.findings import noisy_line


def cpu_record(backend: str, windows_ms: list[float], noisy: bool) -> Record:
    """An ok CPU record whose windows each took one sample."""
    data: dict[str, Any] = dict(
        schema_version=1, run_id="r1", suite="t", timestamp="2026-01-01T00:00:00+00:00", backend=backend,
        kernel="k", device="cpu", device_name="AMD EPYC", dtype="float32", batch=1, seq_len=4096, kv_seq_len=4096,
        heads=8, kv_heads=8, head_dim=64, causal=True, window=None, mode="fwd", status="ok", reason=None,
        time_ms=sorted(windows_ms)[len(windows_ms) // 2], time_ms_iqr=1.0, samples=len(windows_ms),
        times_ms=windows_ms, ci_low_ms=90.0, ci_high_ms=110.0, ci_level=0.95, noisy=noisy, throttled=False,
        case_id=f"cpu-fp32-b1-s4096-h8-kv8-d64-causal-fwd-{backend}",
        extra={"rounds": [{"median_ms": w, "samples": 1} for w in windows_ms]},
    )
    return Record.from_dict(data)


def test_three_close_windows_need_four_at_the_cpu_prior() -> None:
    # Three windows 1% apart are noisy at ±10% on a CPU; a fourth that agrees settles them: by hand, the prior of
    # 4 windows at 10.6% pooled with 3 · 0.01² over 7 degrees of freedom, sqrt(0.00646 / 4) · t(7) 2.365 = 9.51%,
    # within log(1.10) = 9.53%.
    tight = cpu_record("a", [99.0, 100.0, 101.0], noisy=True)
    settled = cpu_record("b", [100.0] * 6, noisy=False)
    line = noisy_line([tight, settled])
    assert line is not None
    assert line.startswith("1 of 2 timings are noisy")
    assert "needs about 4 windows" in line and "gave them 3" in line


def test_no_line_when_every_timing_settled() -> None:
    assert noisy_line([cpu_record("b", [100.0] * 6, noisy=False)]) is None
