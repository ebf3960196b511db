"""The long-sequence backends (sliding-window, flex) against the float64 reference, and their refusals."""

from __future__ import annotations

import pytest
import torch

from attnbench.backends.flex import FlexBackend
from attnbench.backends.registry import default_registry
from attnbench.backends.sliding_window import SlidingWindowBackend, plan_for
from attnbench.core import workload
from attnbench.core.case import Case
from attnbench.records.results import Record
from tests.gpu_expectations import must_be_ok
from tests.helpers import make_case, measure_one


def case(dtype="float32", sq=64, sk=None, heads=4, kv_heads=4, causal=True, window=8, mode="fwd", batch=1, d=16,
         device="cpu") -> Case:
    """A small case; sk defaults to sq."""
    return make_case(device=device, dtype=dtype, batch=batch, seq_len=sq, kv_seq_len=sk, heads=heads,
                     kv_heads=kv_heads, head_dim=d, causal=causal, window=window, mode=mode)


def assert_matches(record: Record) -> None:
    assert record.status == "ok", record.reason


SLIDING_CASES = [
    # causal windows: W = 0 (only itself), W not dividing seq_len, W >= seq_len, W far beyond it
    case(window=0, sq=37),
    case(window=5, sq=70, heads=6, kv_heads=2, mode="fwd_bwd"),
    case(window=100, sq=37, mode="fwd_bwd"),
    case(window=10_000, sq=45, heads=4, kv_heads=1),
    case(window=3, sq=129, batch=2, dtype="bfloat16", mode="fwd_bwd"),
    case(window=8, sq=96, dtype="float16", heads=4, kv_heads=2, mode="fwd_bwd"),
    # Sq != Sk (bottom-right): prefill with a cache, and decode (one query, long KV)
    case(window=16, sq=50, sk=130, heads=4, kv_heads=1, dtype="bfloat16", mode="fwd_bwd"),
    case(window=31, sq=1, sk=300, heads=8, kv_heads=2),
    case(window=10_000, sq=1, sk=300, heads=4, kv_heads=1, dtype="bfloat16"),
    # two-sided windows
    case(causal=False, window=0, sq=33, mode="fwd_bwd"),
    case(causal=False, window=7, sq=90, heads=6, kv_heads=3, dtype="bfloat16"),
    case(causal=False, window=9, sq=40, sk=100, heads=4, kv_heads=2, mode="fwd_bwd"),
    case(causal=False, window=500, sq=60),
    case(causal=False, window=4, sq=1, sk=77, heads=4, kv_heads=1, dtype="bfloat16"),
]


@pytest.mark.parametrize("c", SLIDING_CASES, ids=lambda c: c.case_id)
def test_sliding_window_matches_reference(c: Case) -> None:
    record = measure_one(c, SlidingWindowBackend())
    assert_matches(record)
    assert record.kv_expanded is False  # GQA/MQA broadcast over the group, K/V never repeated
    if c.needs_grad:
        assert record.grad_checked


@pytest.mark.slow
def test_sliding_window_bf16_gradients_sum_overlapping_windows_in_float32() -> None:
    """A key lies in ~9 windows here: summed in bf16, dV erred 1.3x the bound (as on an H200); in fp32 it passes."""
    record = measure_one(case(dtype="bfloat16", sq=1024, heads=8, kv_heads=8, d=128, window=1024, mode="fwd_bwd"),
                     SlidingWindowBackend())
    assert record.status == "ok", record.reason
    assert record.extra["errors"]["dv"] < 0.8 * record.error_bound
    assert record.kernel.startswith("attnbench sliding-window r2 ")  # the revision that sums in float32


def test_sliding_window_too_narrow_span_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule can fail it: a plan whose spans miss the window's oldest key is a mismatch."""
    import attnbench.backends.sliding_window as sw

    real = sw.plan_for
    monkeypatch.setattr(sw, "plan_for", lambda sq, sk, w, causal, allowed, **kw: real(
        sq, sk, w - 1, causal, allowed, **kw))
    record = measure_one(case(window=8, sq=200), SlidingWindowBackend())  # several blocks: their first rows lose a key
    assert record.status == "mismatch"


def test_sliding_window_needs_a_window() -> None:
    record = measure_one(case(window=None), SlidingWindowBackend())
    assert record.status == "skipped"
    assert record.reason.startswith("needs a window")


def allowed_of(c: Case):  # type: ignore[no-untyped-def]
    """docs/conventions.md's mask of a dense case as plan_for takes it."""
    return lambda q, k: workload.allowed(q, k, c.offset, c.causal, c.window)


def test_sliding_window_work_is_linear_in_seq_len() -> None:
    """Each query sees a span that depends on the window, not on seq_len: work O(seq_len × window)."""
    c = case()
    short = plan_for(4096, 4096, 512, True, allowed_of(c))
    long = plan_for(65536, 65536, 512, True, allowed_of(c))
    assert short.span == long.span == short.block + 512
    assert long.blocks * long.block == 65536
    two_sided = plan_for(4096, 4096, 512, False, allowed_of(c))
    assert two_sided.span == two_sided.block + 2 * 512


def test_sliding_window_backward_memory_stays_linear() -> None:
    """The graph autograd keeps holds O(seq_len × span) elements, far below seq_len² at 8K."""
    seq, window = 8192, 64
    q, k, v = (torch.randn(1, 1, seq, 16, requires_grad=True) for _ in range(3))
    c = case(sq=seq, window=window, heads=1, kv_heads=1)
    plan = plan_for(seq, seq, window, True, allowed_of(c))
    saved: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t.numel())
        return t

    from attnbench.backends.sliding_window import sliding_window_attention

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = sliding_window_attention(q, k, v, plan)
    out.sum().backward()
    assert max(saved) <= seq * plan.span
    assert max(saved) < seq * seq / 32


FLEX_CASES = [
    case(window=32, sq=256, heads=4, kv_heads=2),
    case(causal=False, window=7, sq=256, heads=4, kv_heads=2, dtype="bfloat16"),
    case(window=50, sq=1, sk=300, heads=4, kv_heads=1),
]


@pytest.mark.slow
@pytest.mark.parametrize("c", FLEX_CASES, ids=lambda c: c.case_id)
def test_flex_matches_reference(c: Case) -> None:
    record = measure_one(c, FlexBackend())
    assert_matches(record)
    assert record.extra["compile_s"] > 0
    assert "flex_attention compiled (Inductor C++" in record.kernel
    if c.seq_len == 256 and c.causal:  # 2x2 blocks of 128: the one above the diagonal is skipped
        assert record.extra["sparsity_percent"] == 25.0


@pytest.mark.slow
def test_flex_forward_compiles_one_graph_and_records_how_its_mask_was_built() -> None:
    """The check runs in the timed grad mode, so no second compile (grad mode is in Dynamo's guards)."""
    from torch._dynamo.utils import counters

    before = counters["stats"]["unique_graphs"]
    record = measure_one(case(window=24, sq=200, heads=2, kv_heads=2, d=16), FlexBackend())
    assert record.status == "ok", record.reason
    assert counters["stats"]["unique_graphs"] - before == 1
    assert record.extra["mask_build"] == "eager" and record.extra["mask_build_s"] > 0


@pytest.mark.slow
def test_cases_differing_only_in_length_share_flex_dynamics_compile(tmp_path, monkeypatch) -> None:
    """flex-dynamic: one kernel serves every sequence length once Dynamo has made the lengths dynamic. With a block
    mask that takes two compiles (the mask's lengths are Python ints: Dynamo specialises them at first, and on
    the second length recompiles them as dynamic; at once where the process has seen other lengths of flex
    before), from the third length on nothing is traced or compiled; without a mask the first compile (or the
    first two, where an earlier case left the lengths specialised) serves every length. (flex, dynamic=False,
    compiles each length's own kernel: tests/test_flex_compile.py.) A fresh inductor cache, so that no earlier run's
    kernel is what is found."""
    from attnbench.backends.flex import FlexDynamicBackend

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))

    def compiled(backend, causal: bool, lengths: tuple[int, ...]) -> list[tuple[int, int]]:
        records = [measure_one(case(window=None, sq=sq, heads=3, kv_heads=3, d=24, causal=causal), backend)
                   for sq in lengths]
        assert all(r.status == "ok" for r in records), [r.reason for r in records]
        return [(r.extra["graphs_traced"], r.extra["kernels_compiled"]) for r in records]

    masked = compiled(FlexDynamicBackend(), True, (320, 448, 576, 704))
    assert masked[0] == (1, 1) and sum(k for _, k in masked) <= 2 and masked[2:] == [(0, 0), (0, 0)], masked
    assert compiled(FlexDynamicBackend(), False, (336, 464, 592))[1:] == [(0, 0), (0, 0)]


@pytest.mark.slow
def test_flex_backward_keeps_its_buffers_for_retained_graphs() -> None:
    """On CUDA, a compiled backward that donates buffers refuses retain_graph=True (every flex fwd_bwd
    record on the first H200 run was that error); the check and `bwd` timing need retain_graph."""
    import torch._functorch.config as functorch_config

    from attnbench.backends.flex import compiled_flex_attention

    compiled_flex_attention()
    assert functorch_config.donated_buffer is False


@pytest.mark.slow
def test_flex_builds_large_block_masks_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above the eager limit (12 GB at 32K tokens, eagerly) the mask comes from a compiled create_block_mask."""
    import attnbench.backends.flex as flex

    monkeypatch.setattr(flex, "MASK_EAGER_LIMIT", 0)
    c = case(window=24, sq=256, heads=2, kv_heads=2, d=16)
    block_mask, how = flex.flex_block_mask(c, "cpu")
    assert how["mask_build"] == "compiled"
    from torch.nn.attention.flex_attention import create_block_mask

    eager = create_block_mask(lambda b, h, q, k: workload.allowed(q, k, c.offset, c.causal, c.window), None, None,
                              256, 256, device="cpu")
    assert torch.equal(block_mask.kv_num_blocks, eager.kv_num_blocks)
    assert torch.equal(block_mask.kv_indices, eager.kv_indices)
    assert block_mask.sparsity() == eager.sparsity()


def test_flex_backward_on_cpu_is_refused_with_flex_reason() -> None:
    """FlexAttention has no CPU backward: the record is `skipped` with FlexAttention's own words."""
    record = measure_one(case(window=8, sq=64, mode="fwd_bwd"), FlexBackend())
    assert record.status == "skipped"
    assert "FlexAttention does not support backward on CPU" in record.reason


def test_long_backends_are_registered() -> None:
    names = default_registry().names()
    for name in ("flash-attn", "flash-attn-3", "flash-attn-4", "xformers", "flex", "sliding-window"):
        assert name in names


# ---- real libraries on a GPU (scripts/gpu-check.sh) ---------------------------------------------
GPU_CASES = [
    case(device="cuda", dtype="bfloat16", sq=2048, heads=8, kv_heads=2, d=64, window=256, mode="fwd_bwd"),
    case(device="cuda", dtype="float16", sq=1024, sk=3000, heads=8, kv_heads=8, d=128, causal=True, window=None),
    case(device="cuda", dtype="bfloat16", sq=1000, heads=8, kv_heads=1, d=64, causal=False, window=100),
    case(device="cuda", dtype="bfloat16", sq=1, sk=4096, heads=8, kv_heads=2, d=128, window=1024),
]


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["flash-attn", "flash-attn-3", "flash-attn-4", "xformers", "flex", "sliding-window",
                                  "cudnn"])
@pytest.mark.parametrize("c", GPU_CASES, ids=lambda c: c.case_id)
def test_real_library_on_gpu(name: str, c: Case) -> None:
    """A library that is not installed skips; one that tests/gpu_expectations.py lists for this GPU must be `ok`."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    backend = default_registry().get(name)
    cap = torch.cuda.get_device_capability()
    must = must_be_ok(name, c, cap)
    reason = backend.availability("cuda") or backend.unsupported(c)
    if reason and reason.startswith(f"{backend.library} is not installed"):
        pytest.skip(f"{name}: {reason}")
    if reason:
        assert not must, f"{name} must run {c.case_id} on sm{cap[0]}{cap[1]}, but: {reason}"
        pytest.skip(f"{name}: {reason}")
    record = measure_one(c, backend)
    if record.status == "skipped" and not must:
        pytest.skip(f"{name} refused: {record.reason}")
    assert_matches(record)
