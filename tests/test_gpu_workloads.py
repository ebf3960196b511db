"""The workload-axis adapters against the real libraries on a GPU (scripts/gpu-check.sh runs the `gpu` tests).

On CPU these adapters are held to stand-ins (tests/test_flashinfer_standin.py, tests/test_sdpa_varlen_standin.py,
tests/test_flash_standin.py, tests/test_xformers.py, tests/test_cudnn_standin.py); here the libraries themselves
answer. A backend whose library is missing, or that says why it cannot run a case before it runs, skips; a case it
runs must match the float64 reference (`mismatch` or `error` fails), and where its library refuses at call time that
refusal is a skip — except for `sdpa-varlen`, PyTorch's own varlen FlashAttention, which must be `ok` on sm80–sm90
wherever the adapter maps the case. Small shapes: the whole file is meant to take seconds (FlashInfer's first calls
JIT-compile, which costs more).
"""

from __future__ import annotations

import pytest
import torch

from attnbench.backends.registry import default_registry
from attnbench.core.case import Case
from tests.helpers import make_case, measure_one


def gpu_case(**overrides) -> Case:  # type: ignore[no-untyped-def]
    fields = dict(device="cuda", dtype="bfloat16", seq_len=512, heads=8, kv_heads=2, head_dim=128, causal=True)
    fields.update(overrides)
    return make_case(**fields)


WORKLOADS = {
    "documents": gpu_case(documents=5, doc_lengths="random"),
    "documents-window-bwd": gpu_case(documents=4, window=64, mode="fwd_bwd", dtype="float16"),
    "ragged-prefill": gpu_case(batch=4, seq_len=64, kv_seq_len=1024, kv_lengths="random"),
    "ragged-decode": gpu_case(batch=8, seq_len=1, kv_seq_len=2048, kv_lengths="random", window=300),
    "paged-256-decode": gpu_case(batch=8, seq_len=1, kv_seq_len=2048, kv_lengths="random", page_size=256),
    "paged-16-prefill": gpu_case(batch=4, seq_len=32, kv_seq_len=1000, kv_lengths="random", page_size=16),
    "paged-full-last-page": gpu_case(batch=2, seq_len=1, kv_seq_len=1024, page_size=256),
    "softcap": gpu_case(softcap=30.0),
    "alibi": gpu_case(alibi=True, heads=8, kv_heads=8),
}
BACKENDS = ("sdpa-varlen", "flashinfer", "flash-attn", "flash-attn-3", "flash-attn-4", "xformers", "cudnn")


@pytest.mark.gpu
@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_workload_axes_on_the_real_library(name: str, workload: str) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    c = WORKLOADS[workload]
    backend = default_registry().get(name)
    from attnbench.backends.base import unmapped_axes

    reason = backend.availability("cuda") or backend.unsupported(c) or unmapped_axes(backend, c)
    if reason:
        pytest.skip(f"{name}: {reason}")
    record = measure_one(c, backend)
    cap = torch.cuda.get_device_capability()
    must = name == "sdpa-varlen" and (8, 0) <= cap < (10, 0)
    if record.status == "skipped" and not must:
        pytest.skip(f"{name} refused: {record.reason}")
    assert record.status == "ok", (record.status, record.reason, record.kernel)
