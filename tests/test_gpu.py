"""CUDA paths, run only where a GPU is (scripts/gpu-check.sh): every SDPA kernel on the real device."""

from __future__ import annotations

import itertools

import pytest

from attnbench.registry import default_registry
from attnbench.runner import CaseData
from tests.conftest import make_case, measure

pytestmark = pytest.mark.gpu
SDPA = ("naive", "sdpa", "sdpa-math", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn")
GRID = list(itertools.product(["bfloat16", "float16"], [(True, None), (False, None), (True, 64)],
                              [(8, 8), (8, 2)], [(256, 256), (64, 320)], ["fwd", "fwd_bwd"]))


@pytest.mark.parametrize("dtype, mask, heads, shape, mode", GRID)
def test_sdpa_kernels_on_cuda_match_or_skip_with_pytorchs_reason(dtype, mask, heads, shape, mode) -> None:  # type: ignore[no-untyped-def]
    case = make_case(device="cuda", dtype=dtype, causal=mask[0], window=mask[1], heads=heads[0], kv_heads=heads[1],
                     seq_len=shape[0], kv_seq_len=shape[1], head_dim=64, mode=mode)
    data = CaseData(case)
    for name in SDPA:
        record = measure(case, default_registry().get(name), data)
        assert record.status in ("ok", "skipped"), (name, record.status, record.reason)
        if record.status == "skipped":
            assert "PyTorch refused" in record.reason, (name, record.reason)
        else:
            assert record.max_abs_error <= record.error_bound
            assert record.memory_method == "torch.cuda.max_memory_allocated"
            assert record.timer == "cuda-event"


def test_flash_refuses_float32_instead_of_falling_back() -> None:
    record = measure(make_case(device="cuda", dtype="float32"), default_registry().get("sdpa-flash"))
    assert record.status == "skipped" and "PyTorch refused FLASH_ATTENTION" in record.reason


def test_naive_cuda_memory_is_quadratic_and_flash_linear() -> None:
    def peak(name: str, seq: int) -> int:
        record = measure(make_case(device="cuda", dtype="bfloat16", seq_len=seq, heads=8, kv_heads=8, head_dim=64),
                         default_registry().get(name))
        assert record.status == "ok", record.reason
        return record.peak_memory_bytes

    assert 3.5 <= peak("naive", 4096) / peak("naive", 2048) <= 4.5
    assert peak("sdpa-flash", 4096) / peak("sdpa-flash", 2048) <= 2.5


def test_cuda_event_median_agrees_with_triton_do_bench() -> None:
    triton_testing = pytest.importorskip("triton.testing")
    import torch
    import torch.nn.functional as F

    from attnbench.timing import CudaEventTimer, TimingSettings, summarize

    for seq in (256, 8192):  # a short (< 50 µs) and a long (> 5 ms at 32 heads) kernel
        q = torch.randn(1, 32, seq, 128, device="cuda", dtype=torch.bfloat16)
        fn = lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True)  # noqa: E731
        ours = summarize(CudaEventTimer().measure(fn, TimingSettings(warmup_ms=100, budget_ms=500))).median
        theirs = triton_testing.do_bench(fn, warmup=100, rep=500, return_mode="median")
        assert abs(ours / theirs - 1) <= 0.05, (seq, ours, theirs)


def test_cuda_graph_timer_agrees_with_cuda_events_on_a_long_call_and_refuses_backward() -> None:
    """A call long enough that launch overhead is noise: the graph's per-call time is the event time within 10%."""
    from attnbench.runner import RunInfo, Runner
    from attnbench.timing import CudaEventTimer, CudaGraphTimer, TimingSettings

    settings = TimingSettings(warmup_ms=20, budget_ms=100, min_samples=5)
    case = make_case(device="cuda", dtype="bfloat16", seq_len=4096, heads=16, kv_heads=16, head_dim=128, causal=True)
    data = CaseData(case)
    sdpa = default_registry().get("sdpa")
    graph = Runner(RunInfo("g", "t"), CudaGraphTimer(), settings).measure(data, sdpa)
    events = Runner(RunInfo("e", "t"), CudaEventTimer(flush_l2=False), settings).measure(data, sdpa)
    assert graph.status == "ok" and graph.timer == "cuda-graph", graph.reason
    assert abs(graph.time_ms / events.time_ms - 1) < 0.10, (graph.time_ms, events.time_ms)
    short = make_case(device="cuda", dtype="bfloat16", seq_len=128, heads=8, kv_heads=8, head_dim=64)
    quick = Runner(RunInfo("g", "t"), CudaGraphTimer(), settings).measure(CaseData(short), sdpa)
    assert quick.status == "ok" and quick.time_ms > 0
    backward = make_case(device="cuda", dtype="bfloat16", mode="fwd_bwd")
    refused = Runner(RunInfo("g", "t"), CudaGraphTimer(), settings).measure(CaseData(backward), sdpa)
    assert refused.status == "skipped" and "cuda-graph timer times fwd only" in refused.reason


def test_the_flush_is_twice_this_gpus_l2_and_the_interval_stops_sampling() -> None:
    """On an H200 (L2 62914560 bytes) the flush is 120 MiB; a steady 8K-token kernel stops at the precision asked
    long before its budget, with its interval inside ±1%."""
    import torch

    from attnbench.runner import RunInfo, Runner
    from attnbench.timing import CudaEventTimer, TimingSettings

    timer = CudaEventTimer()
    assert timer.flush_bytes == 2 * torch.cuda.get_device_properties(0).L2_cache_size
    case = make_case(device="cuda", dtype="bfloat16", seq_len=8192, heads=16, kv_heads=16, head_dim=128, causal=True)
    settings = TimingSettings(warmup_ms=100, budget_ms=2000, min_samples=5, precision=0.01)
    record = Runner(RunInfo("g", "t"), timer, settings).measure(CaseData(case), default_registry().get("sdpa"))
    assert record.status == "ok", record.reason
    assert record.extra["l2_flush_bytes"] == timer.flush_bytes
    assert record.stop == "precision" and not record.noisy, (record.stop, record.ci_low_ms, record.ci_high_ms)
    assert sum(record.times_ms) < 0.5 * settings.budget_ms


def test_cuda_peak_memory_from_the_checked_call_equals_a_separate_measurement() -> None:
    """A forward's peak is read around its checked call, a fwd_bwd's around its first warm-up call: the same
    bytes as a call made only to measure them."""
    import torch

    from attnbench.backends.naive import naive_attention
    from attnbench.memory import measure_peak

    for mode in ("fwd", "fwd_bwd"):
        case = make_case(device="cuda", dtype="bfloat16", seq_len=2048, heads=8, kv_heads=8, head_dim=64, mode=mode)
        record = measure(case, default_registry().get("naive"))
        assert record.status == "ok", record.reason
        q, k, v = (torch.randn(1, 8, 2048, 64, device="cuda", dtype=torch.bfloat16, requires_grad=mode != "fwd")
                   for _ in range(3))
        if mode == "fwd":
            def alone() -> object:
                with torch.no_grad():
                    return naive_attention(q, k, v, None)
        else:
            def alone() -> object:
                out = naive_attention(q, k, v, None)
                return torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
        alone()
        separate, _ = measure_peak(alone, "cuda")
        assert abs(record.peak_memory_bytes - separate) <= 0.1 * separate, (mode, record.peak_memory_bytes, separate)
