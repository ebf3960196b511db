"""Peak memory is measured, not estimated: naive grows with seq_len², a fused kernel linearly."""

from __future__ import annotations

from attnbench.registry import default_registry
from tests.conftest import make_case, measure


def peaks(name: str) -> tuple[int, int]:
    backend = default_registry().get(name)
    small, large = (measure(make_case(seq_len=s, heads=4, head_dim=64), backend) for s in (1024, 2048))
    assert small.status == large.status == "ok"
    assert small.memory_method == "torch.profiler CPU allocator events"
    return small.peak_memory_bytes, large.peak_memory_bytes


def test_naive_memory_grows_with_the_square_of_seq_len() -> None:
    small, large = peaks("naive")
    assert 3.6 <= large / small <= 4.2
    # scores and probabilities, 4 heads × 2048² × 4 bytes each, dominate
    assert large >= 2 * 4 * 2048 * 2048 * 4


def test_fused_cpu_kernel_memory_grows_linearly() -> None:
    small, large = peaks("sdpa-flash")
    assert large / small <= 2.5
    assert large < 4 * 2048 * 2048 * 4 / 8, "far below one score matrix"
