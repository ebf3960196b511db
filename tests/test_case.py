"""The mask, the visible-pair count and the FLOP formula, against brute force and hand counts."""

from __future__ import annotations

import pytest
import torch

from attnbench.core import counting, workload
from tests.helpers import make_case


@pytest.mark.parametrize("seq, kv, causal, window", [
    (64, 64, True, None), (64, 64, False, 5), (64, 64, True, 5), (16, 80, True, None), (16, 80, True, 7),
    (1, 100, True, 10), (40, 64, False, 0), (64, 64, True, 1000),
])
def test_visible_pairs_is_the_mask_count(seq: int, kv: int, causal: bool, window: int | None) -> None:
    case = make_case(seq_len=seq, kv_seq_len=kv, causal=causal, window=window)
    mask = workload.mask(case)
    count = seq * kv if mask is None else int(mask.sum())
    assert workload.visible_pairs(case) == count


def test_bottom_right_causal_and_window_by_hand() -> None:
    # 2 queries over 4 keys: the queries are positions 2 and 3 (off = 2).
    case = make_case(seq_len=2, kv_seq_len=4, causal=True, window=1)
    assert workload.mask(case).tolist() == [[False, True, True, False], [False, False, True, True]]
    two_sided = make_case(seq_len=2, kv_seq_len=4, causal=False, window=1)
    assert workload.mask(two_sided).tolist() == [[False, True, True, True], [False, False, True, True]]


def test_flops_hand_computed() -> None:
    full = make_case(batch=2, heads=4, head_dim=32, seq_len=64)
    assert counting.flops(full) == 4 * 2 * 4 * 32 * 64 * 64
    tiny = dict(batch=1, heads=1, head_dim=8, seq_len=4, causal=True)
    causal = make_case(**tiny)
    assert workload.visible_pairs(causal) == 1 + 2 + 3 + 4
    assert counting.flops(causal) == 4 * 8 * 10
    assert counting.flops(make_case(**tiny, mode="bwd")) == 4 * 8 * 10 * 2.5
    assert counting.flops(make_case(**tiny, mode="fwd_bwd")) == 4 * 8 * 10 * 3.5


def test_decode_causal_sees_the_whole_cache() -> None:
    case = make_case(seq_len=1, kv_seq_len=4096, causal=True)
    assert not workload.has_mask(case) and workload.mask(case) is None
    windowed = make_case(seq_len=1, kv_seq_len=4096, causal=True, window=255)
    assert workload.visible_pairs(windowed) == 256


def test_seed_depends_on_the_case_only() -> None:
    assert make_case().seed == make_case().seed
    assert make_case().seed != make_case(causal=True).seed
    assert torch.equal(*(torch.randn(3, generator=torch.Generator().manual_seed(make_case().seed)) for _ in range(2)))


def test_case_id_and_description_name_every_axis() -> None:
    case = make_case(dtype="bfloat16", batch=2, seq_len=16, kv_seq_len=80, heads=8, kv_heads=2, head_dim=64,
                     causal=True, window=7, mode="fwd_bwd")
    assert case.case_id == "cpu-bf16-b2-s16-kv80-h8-kv2-d64-causal-w7-fwd_bwd"
    assert case.describe() == "bf16 b2 seq 16 kv 80 8/2 heads d64 causal w7 fwd_bwd"
    plain = make_case(seq_len=64)
    assert plain.case_id == "cpu-fp32-b1-s64-h4-kv4-d32-full-fwd"
    assert plain.describe() == "fp32 b1 seq 64 4/4 heads d32 full fwd"
    assert plain.offset == 0 and case.offset == 64 and case.group_size == 4
    assert not plain.needs_grad and case.needs_grad


def test_tensor_bytes_and_decode_is_memory_bound() -> None:
    case = make_case(dtype="float16", batch=2, seq_len=3, kv_seq_len=10, heads=4, kv_heads=2, head_dim=8)
    assert counting.tensor_bytes(case) == {"q": 2 * 4 * 3 * 8 * 2, "k": 2 * 2 * 10 * 8 * 2, "v": 2 * 2 * 10 * 8 * 2,
                                   "o": 2 * 4 * 3 * 8 * 2}
    assert counting.io_bytes(case) == 384 + 640 + 640 + 384
    assert make_case(seq_len=1, kv_seq_len=100).memory_bound and not case.memory_bound


def test_memory_estimate_by_hand() -> None:
    """Output; + Q, K, V grads in backward; + the score-sized buffers a backend declares it holds (naive: scores and
    probabilities forward, four with backward); + K/V repeated per query head when the backend expands them for GQA."""
    from attnbench.core.counting import MemoryCost

    scored = MemoryCost(score_copies_fwd=2, score_copies_bwd=4)
    expanding = MemoryCost(expands_kv=True)
    both = MemoryCost(score_copies_fwd=2, score_copies_bwd=4, expands_kv=True)
    fwd = make_case(batch=2, seq_len=16, kv_seq_len=32, heads=4, kv_heads=2, head_dim=8)  # fp32
    out, q, kv = 2 * 4 * 16 * 8 * 4, 2 * 4 * 16 * 8 * 4, 2 * 2 * 32 * 8 * 4
    scores = 2 * 4 * 16 * 32 * 4
    expanded = 2 * (2 * 4 * 32 * 8 * 4)  # K and V at every query head
    assert counting.memory_estimate(fwd) == out
    assert counting.memory_estimate(fwd, scored) == out + 2 * scores
    assert counting.memory_estimate(fwd, expanding) == out + expanded
    bwd = make_case(batch=2, seq_len=16, kv_seq_len=32, heads=4, kv_heads=2, head_dim=8, mode="bwd")
    assert counting.memory_estimate(bwd, both) == out + expanded + q + 2 * kv + 4 * scores
    mha = make_case(batch=2, seq_len=16, kv_seq_len=32, heads=4, kv_heads=4, head_dim=8)
    assert counting.memory_estimate(mha, expanding) == out  # nothing to expand


def test_mask_is_built_on_the_device_asked_for() -> None:
    """A CUDA backend asks for its mask on the GPU; the meta device stands in for it here."""
    case = make_case(seq_len=8, kv_seq_len=12, causal=True, window=3)
    assert workload.mask(case, device="meta").device.type == "meta"
    assert workload.mask(case, rows=torch.tensor([0, 5]), device="meta").device.type == "meta"
    assert workload.mask(case, rows=torch.tensor([0, 5])).tolist() == workload.mask(case)[[0, 5]].tolist()


def test_a_backend_estimate_counts_its_own_kv_expansion_and_scores() -> None:
    """naive repeats K/V per query head and holds the scores; sdpa-flash does neither: their estimates differ so."""
    from attnbench.backends.registry import default_registry

    gqa = make_case(batch=2, seq_len=16, kv_seq_len=32, heads=4, kv_heads=1, head_dim=8)
    from attnbench.core.counting import MemoryCost

    naive = MemoryCost(score_copies_fwd=2, score_copies_bwd=4, expands_kv=True)
    assert default_registry().get("naive").estimate_memory(gqa) == counting.memory_estimate(gqa, naive)
    assert default_registry().get("sdpa-flash").estimate_memory(gqa) == counting.memory_estimate(gqa)
