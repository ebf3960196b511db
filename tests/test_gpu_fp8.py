"""The FP8 paths on a real GPU (scripts/gpu-check.sh runs the `gpu` tests): naive-fp8 must be `ok` on every format;
each FP8 kernel that is installed must be `ok` or skipped with its library's refusal — never an error or a mismatch
— and an `ok` one carries both errors. SageAttention likewise on the bf16 axis."""

from __future__ import annotations

import pytest
import torch

from attnbench.backends.registry import default_registry
from attnbench.verify.quant_data import case_data
from tests.gpu_expectations import must_be_ok
from tests.helpers import make_case, measure_one

BASE = dict(device="cuda", causal=True, heads=8, kv_heads=2, head_dim=128, seq_len=1024)
CASES = [
    make_case(**BASE, dtype="float8_e4m3fn"),
    make_case(**BASE, dtype="float8_e4m3fn", quant="head"),
    make_case(**BASE, dtype="float8_e5m2", quant="block", quant_block=128),
    make_case(device="cuda", dtype="bfloat16", kv_dtype="float8_e4m3fn", batch=4, seq_len=1, kv_seq_len=4096,
              kv_lengths="random", page_size=16, causal=True, heads=8, kv_heads=2, head_dim=128),
]
FP8 = ["naive-fp8", "cudnn-fp8", "flash-attn-3", "sdpa-fp8", "flashinfer"]


@pytest.mark.gpu
@pytest.mark.parametrize("c", CASES, ids=lambda c: c.case_id)
def test_fp8_backends_on_gpu(c) -> None:  # type: ignore[no-untyped-def]
    cap = torch.cuda.get_device_capability()
    data = case_data(c)
    for name in FP8:
        record = measure_one(c, default_registry().get(name), data)
        print(name, c.case_id, record.status, record.reason or record.kernel, record.max_abs_error, record.error_bound)
        if must_be_ok(name, c, cap):
            assert record.status == "ok", (name, record.status, record.reason)
        assert record.status in ("ok", "skipped"), (name, record.status, record.reason)
        if record.status == "ok":
            extra = record.extra
            assert {"quant_error", "kernel_error", "error_vs_original", "bound_source", "out_dtype"} <= set(extra)
            assert extra["quant_error"] == data.quant_error


@pytest.mark.gpu
def test_sage_on_gpu() -> None:
    c = make_case(device="cuda", dtype="bfloat16", causal=True, heads=8, kv_heads=2, head_dim=128, seq_len=2048)
    record = measure_one(c, default_registry().get("sage"))
    print(record.status, record.reason or record.kernel, record.max_abs_error, record.error_bound)
    if record.status == "skipped" and "not installed" in (record.reason or ""):
        pytest.skip(record.reason)
    assert record.status == "ok", (record.status, record.reason)
    assert record.extra["quantized"] == "internal"
