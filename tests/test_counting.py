"""How work and memory are counted (attnbench.core.counting), held against what the H200 measured: every `ok` record of
the committed H200 runs has a memory estimate within 1.5x of its measured peak."""

from __future__ import annotations

import pytest

from attnbench.backends.registry import default_registry
from attnbench.backends.sage import mean_workspace
from attnbench.core import counting
from attnbench.core.case import Case
from attnbench.core.memory_methods import STORED_RSS_ON_GPU
from attnbench.records.record import Record
from attnbench.records.results import load_records
from tests.helpers import REPORTS, committed_runs, make_case

DEC4 = REPORTS / "NVIDIA-H200-20261204-c671d98"
MIB = 1 << 20


def h200_records() -> list[Record]:
    records = [record for run in committed_runs("NVIDIA-H200-*/**") for record in load_records(run)]
    return [r for r in records if r.status == "ok" and r.peak_memory_bytes]


def measured(folder: str, backend: str, case_id: str) -> tuple[Case, int]:
    """A committed H200 record's case and measured peak."""
    record = next(r for r in load_records(DEC4 / folder)
                  if r.backend == backend and r.case_id == case_id and r.status == "ok")
    return case_of(record), record.peak_memory_bytes


def case_of(record: Record) -> Case:
    return Case(**{name: getattr(record, name) for name in Case.__dataclass_fields__ if hasattr(record, name)})


def estimate(backend: str, case: Case) -> int:
    return default_registry().get(backend).estimate_memory(case)


def test_every_ok_h200_records_estimate_is_within_1_5x_of_its_measured_peak() -> None:
    records = h200_records()
    assert len(records) > 300  # the four committed runs
    off = []
    for record in records:
        ratio = estimate(record.backend, case_of(record)) / record.peak_memory_bytes
        if not 1 / 1.5 <= ratio <= 1.5:
            off.append((record.backend, record.case_id, round(ratio, 2)))
    assert off == []


def test_a_gpu_peak_read_from_host_rss_is_read_back_as_no_measurement() -> None:
    """jax-cudnn's H200 records held the process's RSS (2.3 MB, 7x under its output alone): host memory, not the
    device's. Read back, the peak is null and the method says why."""
    jax = [r for r in load_records(DEC4 / "check") if r.backend == "jax-cudnn" and r.time_ms]
    assert jax and all(r.peak_memory_bytes is None and r.memory_method == STORED_RSS_ON_GPU for r in jax)


@pytest.mark.parametrize("case_id, peak", [("cuda-bf16-b1-s4096-h16-kv16-d128-causal-fwd", 64 * MIB + 4096),
                                           ("cuda-bf16-b1-s4096-h16-kv4-d128-causal-fwd", 30 * MIB + 4096)])
def test_sage_holds_the_larger_of_smooth_ks_mean_and_its_quantized_copies(case_id: str, peak: int) -> None:
    """On the H200 sage's peak was 64 MiB at 16 KV heads, 4x its output: smooth_k's `k.mean` reduced across 64
    blocks per output in a float32 buffer (Reduce.cuh: 4 B x 2048 outputs x 64 x 32 x 4); at 4 KV heads the mean's
    buffer is 16 MiB, and the INT8 Q, K, float16 V and the output (30 MiB) are the peak."""
    case, measured_peak = measured("check", "sage", case_id)
    assert abs(estimate("sage", case) - measured_peak) <= 512  # the mean's semaphores, 512 B
    assert estimate("sage", case) == peak
    assert mean_workspace(2048, 4096) == 64 * MIB and mean_workspace(512, 4096) == 16 * MIB


def test_sages_mean_buffer_is_capped_by_one_resident_grid_and_absent_when_short() -> None:
    """At 16K the mean's blocks per output stop at one resident grid of an H200 (132 SMs x 16): 132 MiB, not the
    256 MiB 16 values per thread would ask; below 1024 keys a block reduces each output alone."""
    assert mean_workspace(2048, 16384) == 132 * MIB
    assert mean_workspace(2048, 512) == 0
    fp16 = make_case(device="cuda", dtype="float16", seq_len=16384, heads=16, kv_heads=16, head_dim=128, causal=True)
    bf16 = make_case(device="cuda", dtype="bfloat16", seq_len=16384, heads=16, kv_heads=16, head_dim=128, causal=True)
    km = 16 * 128 * 2
    assert estimate("sage", fp16) == km + 132 * MIB  # V stays float16: the mean's buffer is the peak
    scales = 4 * (16 * 16384 // 128 + 16 * 16384 // 64)
    assert estimate("sage", bf16) == km + (64 + 32 + 32 + 64) * MIB + scales  # V to float16, INT8 Q and K, output


@pytest.mark.parametrize("kv_heads", [16, 4])
def test_varlen_backward_counts_dq_accum_its_padding_and_the_output_copy(kv_heads: int) -> None:
    """sdpa-varlen fwd+bwd on the H200: 114 MiB at 16 KV heads, 122 MiB at 4, against 64 and 40 estimated as fused.
    mha_varlen_bwd holds a float32 dq_accum of (total_q + 128) rows and, under GQA, dK/dV per query head;
    _flash_attention_backward copies the output, strided as the packed query (one request)."""
    case, measured_peak = measured("check", "sdpa-varlen", f"cuda-bf16-b1-s4096-h16-kv{kv_heads}-d128-causal-fwd_bwd")
    sizes = counting.tensor_bytes(case)
    grads = sizes["q"] + sizes["k"] + sizes["v"]
    dq_accum = (4096 + 128) * 16 * 128 * 4
    expanded = 0 if kv_heads == 16 else 2 * 4096 * 16 * 128 * 2
    assert estimate("sdpa-varlen", case) == 2 * sizes["o"] + grads + dq_accum + expanded
    assert 0.98 <= estimate("sdpa-varlen", case) / measured_peak <= 1.0  # lse and softmax_d, 0.75 MiB, aside


def test_varlen_pads_dq_accum_per_document_and_copies_no_contiguous_output() -> None:
    """32 documents of 128 tokens pad dq_accum by 128 rows each (31 more than one sequence: 31 MiB at 16 x 128); two
    requests pack into a contiguous query, so the output needs no copy."""
    one = make_case(device="cuda", dtype="bfloat16", seq_len=4096, heads=16, kv_heads=16, head_dim=128, causal=True,
                    mode="fwd_bwd")
    docs = make_case(device="cuda", dtype="bfloat16", seq_len=4096, heads=16, kv_heads=16, head_dim=128, causal=True,
                     mode="fwd_bwd", doc_lens=(128,) * 32)
    assert estimate("sdpa-varlen", docs) - estimate("sdpa-varlen", one) == 31 * 128 * 16 * 128 * 4
    two = make_case(device="cuda", dtype="bfloat16", batch=2, seq_len=4096, heads=16, kv_heads=16, head_dim=128,
                    causal=True, mode="fwd_bwd")
    assert estimate("sdpa-varlen", two) == 2 * (estimate("sdpa-varlen", one) - 16 * MIB - 128 * 16 * 128 * 4) \
        + 2 * 128 * 16 * 128 * 4


def test_flash_attn_4s_backward_holds_float32_dq_and_per_kv_head_dk_dv_accumulators() -> None:
    """flash-attn-4 fwd+bwd at GQA 16/4 on the H200: 88.75 MiB, against 40 estimated as fused. _flash_attn_bwd holds
    a float32 dq_accum (32 MiB) and, with several query heads per KV head, float32 dk_accum and dv_accum per KV
    head (16 MiB); without GQA no accumulators for dK and dV."""
    case, measured_peak = measured("fa4", "flash-attn-4", "cuda-bf16-b1-s4096-h16-kv4-d128-causal-fwd_bwd")
    assert estimate("flash-attn-4", case) == 88 * MIB
    assert 0.99 <= estimate("flash-attn-4", case) / measured_peak <= 1.0  # dpsum, lse_log2 and the lse aside
    mha = make_case(device="cuda", dtype="bfloat16", seq_len=4096, heads=16, kv_heads=16, head_dim=128, causal=True,
                    mode="fwd_bwd")
    assert estimate("flash-attn-4", mha) == (16 + 48 + 32) * MIB


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
