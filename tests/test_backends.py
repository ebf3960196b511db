"""Every CPU backend matches the float64 reference under docs/conventions.md's rule, on every mask and head layout."""

from __future__ import annotations

import itertools

import pytest

from attnbench.backends.base import Backend, Prepared
from attnbench.backends.registry import default_registry
from attnbench.core import workload
from attnbench.verify.inputs import CaseData
from tests.helpers import make_case, measure_one

CPU_BACKENDS = ("naive", "sdpa", "sdpa-math", "sdpa-flash")
MASKS = [(False, None), (True, None), (True, 16), (False, 16), (True, 0)]
HEADS = [(4, 4), (4, 2), (4, 1)]  # MHA, GQA, MQA
SHAPES = [(64, 64), (16, 80), (1, 96)]  # self-attention, Sq < Sk (prefill with cache), decode
GRID = list(itertools.product(["float32", "bfloat16"], MASKS, HEADS, SHAPES, ["fwd", "bwd"]))


@pytest.mark.slow
@pytest.mark.parametrize("dtype, mask, heads, shape, mode", GRID,
                         ids=[f"{d}-{'causal' if m[0] else 'full'}-w{m[1]}-h{h[0]}kv{h[1]}-s{s[0]}kv{s[1]}-{mode}"
                              for d, m, h, s, mode in GRID])
def test_cpu_backends_match_reference(dtype: str, mask: tuple, heads: tuple, shape: tuple, mode: str) -> None:
    case = make_case(dtype=dtype, causal=mask[0], window=mask[1], heads=heads[0], kv_heads=heads[1],
                     seq_len=shape[0], kv_seq_len=shape[1], mode=mode)
    data = CaseData(case)
    registry = default_registry()
    for name in CPU_BACKENDS:
        record = measure_one(case, registry.get(name), data)
        assert record.status == "ok", (name, record.reason)
        assert record.grad_checked == (mode == "bwd")
        assert record.rows_checked == case.seq_len
    # naive has no native GQA: it must say it expanded K/V
    assert measure_one(case, registry.get("naive"), data).kv_expanded == (heads[0] != heads[1])


@pytest.mark.parametrize("name, kernel", [("sdpa-efficient", "EFFICIENT_ATTENTION"), ("sdpa-cudnn", "CUDNN_ATTENTION")])
def test_cuda_only_sdpa_kernels_skip_on_cpu_with_reason(name: str, kernel: str) -> None:
    record = measure_one(make_case(), default_registry().get(name))
    assert record.status == "skipped"
    assert record.reason == f"needs CUDA (PyTorch has no CPU implementation of {kernel})"


@pytest.mark.slow
def test_sdpa_records_the_kernel_pytorch_picked() -> None:
    record = measure_one(make_case(causal=True), default_registry().get("sdpa"))
    assert "auto→FLASH_ATTENTION" in record.kernel and "is_causal" in record.kernel
    lower_right = measure_one(make_case(causal=True, seq_len=16, kv_seq_len=80), default_registry().get("sdpa"))
    assert "explicit mask" in lower_right.kernel


class TopLeftCausal(Backend):
    """A plausible bug: SDPA's top-left `is_causal=True` used where queries are the last Sq positions."""

    name = "top-left"

    def prepare(self, case, q, k, v) -> Prepared:  # type: ignore[no-untyped-def]
        import torch.nn.functional as F

        return Prepared((q, k, v), lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=True), kernel="sdpa is_causal")


class WindowOffByOne(Backend):
    """A plausible bug: a window of W+1 keys before the query instead of W."""

    name = "window-off-by-one"

    def prepare(self, case, q, k, v) -> Prepared:  # type: ignore[no-untyped-def]
        from dataclasses import replace

        from attnbench.verify.inputs import naive_attention

        wider = replace(case, window=case.window + 1)
        return Prepared((q, k, v), lambda q, k, v: naive_attention(q, k, v, workload.mask(wider)), kernel="naive w+1")


def test_the_check_catches_a_top_left_causal_mask() -> None:
    record = measure_one(make_case(causal=True, seq_len=16, kv_seq_len=80), TopLeftCausal())
    assert record.status == "mismatch"
    assert record.max_abs_error > record.error_bound
    assert record.time_ms is not None, "a mismatch still reports its time, flagged"


@pytest.mark.slow
def test_the_check_catches_a_window_off_by_one() -> None:
    assert measure_one(make_case(causal=True, window=8), WindowOffByOne()).status == "mismatch"


def test_decode_over_a_long_cache_with_a_causal_window() -> None:
    """One query over an 8K-token cache, causal with a 256-token window, GQA: only the last 257 keys count."""
    case = make_case(seq_len=1, kv_seq_len=8192, heads=8, kv_heads=2, head_dim=64, causal=True, window=256)
    assert workload.visible_pairs(case) == 257 and case.memory_bound
    data = CaseData(case)
    registry = default_registry()
    for name in (*CPU_BACKENDS, "sliding-window"):
        record = measure_one(case, registry.get(name), data)
        assert record.status == "ok", (name, record.reason)
    mha = make_case(seq_len=1, kv_seq_len=8192, heads=2, kv_heads=2, head_dim=64, causal=True, window=256)
    assert measure_one(mha, WindowOffByOne()).status == "mismatch"  # one key too many is caught at this length


# ---- what the record says ran, and that the pin holds ----------------------------------------------
def sdpa_enabled() -> set[str]:
    """Which SDPA kernels PyTorch may pick right now (the flags sdpa_kernel sets)."""
    import torch

    cuda = torch.backends.cuda
    flags = {"FLASH_ATTENTION": cuda.flash_sdp_enabled(), "EFFICIENT_ATTENTION": cuda.mem_efficient_sdp_enabled(),
             "MATH": cuda.math_sdp_enabled(), "CUDNN_ATTENTION": cuda.cudnn_sdp_enabled()}
    return {name for name, on in flags.items() if on}


@pytest.mark.parametrize("name, kernel", [("sdpa-math", "MATH"), ("sdpa-flash", "FLASH_ATTENTION"),
                                          ("sdpa-efficient", "EFFICIENT_ATTENTION"), ("sdpa-cudnn", "CUDNN_ATTENTION")])
def test_pinned_sdpa_runs_with_only_its_kernel_enabled(name: str, kernel: str) -> None:
    """The timed call runs inside the pin: PyTorch may pick no other kernel (prepare needs no GPU)."""
    import torch

    case = make_case(causal=True, seq_len=16, kv_seq_len=80, heads=4, kv_heads=2)
    q, k, v = (torch.zeros(1, h, s, 32) for h, s in ((4, 16), (2, 80), (2, 80)))
    prepared = default_registry().get(name).prepare(case, q, k, v)
    with prepared.context():
        assert sdpa_enabled() == {kernel}
    label = f"{kernel} (PyTorch's CPU flash kernel)" if kernel == "FLASH_ATTENTION" else kernel  # CPU tensors here
    assert prepared.kernel == f"torch {installed('torch')} sdpa {label} (explicit mask, enable_gqa)"


def installed(dist: str) -> str:
    from attnbench.backends.base import installed_version

    return str(installed_version(dist))


@pytest.mark.parametrize("case_kwargs, how", [
    (dict(), "no mask"), (dict(causal=True), "is_causal"), (dict(causal=True, window=4), "explicit mask"),
    (dict(causal=True, seq_len=16, kv_seq_len=80), "explicit mask"), (dict(heads=4, kv_heads=1), "no mask, enable_gqa"),
])
def test_sdpa_kernel_field_says_how_the_mask_was_given(case_kwargs: dict, how: str) -> None:
    record = measure_one(make_case(**case_kwargs), default_registry().get("sdpa"))
    assert record.status == "ok"
    assert record.kernel == f"torch {installed('torch')} sdpa auto→FLASH_ATTENTION ({how})"
    with_mask = measure_one(make_case(**case_kwargs), default_registry().get("naive"))
    assert with_mask.kernel == f"torch {installed('torch')} matmul+softmax" + (
        " (explicit mask)" if workload.has_mask(make_case(**case_kwargs)) else "")


def test_sdpa_auto_asks_pytorch_about_the_call_as_made_and_pins_its_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """`sdpa` records the kernel PyTorch's chooser names for these very arguments, and pins it for the timed call."""
    import torch
    from torch.nn.attention import SDPBackend

    asked: list[tuple] = []

    def choice(q, k, v, mask, dropout, is_causal, enable_gqa=False):  # type: ignore[no-untyped-def]
        asked.append((mask, dropout, is_causal, enable_gqa))
        return int(SDPBackend.EFFICIENT_ATTENTION)

    monkeypatch.setattr(torch, "_fused_sdp_choice", choice)
    q, k, v = (torch.zeros(1, h, s, 32) for h, s in ((4, 16), (1, 80), (1, 80)))
    window = default_registry().get("sdpa").prepare(make_case(causal=True, seq_len=16, kv_seq_len=80, kv_heads=1),
                                                    q, k, v)
    (mask, dropout, is_causal, gqa), = asked
    assert mask is not None and mask.shape == (16, 80) and dropout == 0.0 and is_causal is False and gqa is True
    assert window.kernel.endswith("sdpa auto→EFFICIENT_ATTENTION (explicit mask, enable_gqa)")
    with window.context():
        assert sdpa_enabled() == {"EFFICIENT_ATTENTION"}
    asked.clear()
    q = torch.zeros(1, 4, 16, 32)
    default_registry().get("sdpa").prepare(make_case(causal=True, seq_len=16), q, q, q)
    assert [(m, c, g) for m, _, c, g in asked] == [(None, True, False)]


def test_sdpa_explicit_mask_is_additive_in_the_inputs_dtype_and_device() -> None:
    import torch

    from attnbench.backends.sdpa import mask_arguments

    case = make_case(causal=True, window=2, seq_len=4, kv_seq_len=6)
    kwargs, how = mask_arguments(case, torch.zeros(1, 4, 4, 8, dtype=torch.bfloat16))
    bias = kwargs["attn_mask"]
    assert how == "explicit mask" and bias.dtype == torch.bfloat16
    assert torch.equal(bias == 0, workload.mask(case)) and bool((bias[~workload.mask(case)] == float("-inf")).all())
    on_meta, _ = mask_arguments(case, torch.zeros(1, 4, 4, 8, device="meta"))
    assert on_meta["attn_mask"].device.type == "meta"  # built where the inputs live (the GPU), outside the timing


def test_first_line_of_an_exception() -> None:
    from attnbench.backends.base import first_line

    assert first_line(RuntimeError("  No available kernel.\n  more detail")) == "No available kernel."
    assert first_line(ValueError()) == "ValueError"
