"""How work and memory are counted (attnbench.core.counting), held against what the H200 measured: every `ok` record of
the committed H200 runs has a memory estimate within 1.5x of its measured peak."""

from __future__ import annotations

import pytest

from attnbench.backends.registry import default_registry
from attnbench.core import counting
from attnbench.core.case import Case
from attnbench.records.results import stored_lines
from tests.helpers import committed_runs, make_case


def h200_records() -> list[dict]:
    records = [record for run in committed_runs("NVIDIA-H200-*/**") for record in stored_lines(run)]
    return [r for r in records if r["status"] == "ok" and r.get("peak_memory_bytes")]


def case_of(record: dict) -> Case:
    return Case(**{name: record[name] for name in Case.__dataclass_fields__ if name in record})


def test_every_ok_h200_records_estimate_is_within_1_5x_of_its_measured_peak() -> None:
    registry = default_registry()
    records = h200_records()
    assert len(records) > 300  # the four committed runs
    off = []
    for record in records:
        estimate = registry.get(record["backend"]).estimate_memory(case_of(record))
        ratio = estimate / record["peak_memory_bytes"]
        if not 1 / 1.5 <= ratio <= 1.5:
            off.append((record["backend"], record["case_id"], round(ratio, 2)))
    assert off == []


def test_the_math_kernel_upcasts_halves_and_does_not_fit_an_h200_at_32k() -> None:
    """sdpa-math in bf16 holds float32 scores: at 32K fwd_bwd (16 heads) its estimate is the ~258 GiB its measured
    peaks at 4K and 16K extrapolate to, beyond the H200's 141 GB, where the old estimate (no upcast, three score
    copies) said it fits."""
    math = default_registry().get("sdpa-math")
    case = make_case(device="cuda", dtype="bfloat16", seq_len=32768, heads=16, kv_heads=16, head_dim=128, causal=True,
                     mode="fwd_bwd")
    scores = 32768 * 32768 * 16  # one score matrix's elements
    assert math.estimate_memory(case) >= 8 * scores * 2  # four float32 copies: 8 half-precision matrices
    assert 250 << 30 < math.estimate_memory(case) < 266 << 30
    fp32 = make_case(device="cuda", dtype="float32", seq_len=4096, heads=4, kv_heads=4, head_dim=64, mode="fwd")
    out = counting.tensor_bytes(fp32)["o"]
    assert math.estimate_memory(fp32) == out + int(2.25 * 4 * 4096 * 4096 * 4)  # no float32 copies of Q, K, V


@pytest.mark.parametrize("kv_heads, expected_extra", [(8, 0), (2, 8 * 4096 * (128 + 128) * 2)])
def test_a_fused_backward_counts_its_workspace_and_per_head_dk_dv_under_gqa(kv_heads: int, expected_extra: int) -> None:
    flash = default_registry().get("sdpa-flash")
    case = make_case(device="cuda", dtype="bfloat16", seq_len=4096, heads=8, kv_heads=kv_heads, head_dim=128,
                     mode="fwd_bwd")
    sizes = counting.tensor_bytes(case)
    base = sizes["o"] + sizes["q"] + sizes["k"] + sizes["v"] + 4 * sizes["q"]
    assert flash.estimate_memory(case) == base + expected_extra
