"""Peak memory is measured, not estimated: naive grows with seq_len², a fused kernel linearly."""

from __future__ import annotations

import pytest

from attnbench.backends.registry import default_registry
from tests.helpers import make_case, measure_one


def peaks(name: str) -> tuple[int, int]:
    backend = default_registry().get(name)
    small, large = (measure_one(make_case(seq_len=s, heads=4, head_dim=64), backend) for s in (1024, 2048))
    assert small.status == large.status == "ok"
    assert small.memory_method == "torch.profiler CPU allocator events"
    return small.peak_memory_bytes, large.peak_memory_bytes


@pytest.mark.slow
def test_naive_memory_grows_with_the_square_of_seq_len() -> None:
    small, large = peaks("naive")
    assert 3.6 <= large / small <= 4.2
    # scores and probabilities, 4 heads × 2048² × 4 bytes each, dominate
    assert large >= 2 * 4 * 2048 * 2048 * 4


@pytest.mark.slow
def test_fused_cpu_kernel_memory_grows_linearly() -> None:
    small, large = peaks("sdpa-flash")
    assert large / small <= 2.5
    assert large < 4 * 2048 * 2048 * 4 / 8, "far below one score matrix"


def test_garbage_is_collected_before_the_call_and_never_during_it() -> None:
    """On an H200, a collection inside the call freed an earlier measurement's tensors first and naive's
    CUDA peak (max_memory_allocated minus the bytes allocated before) read 0. Garbage goes before."""
    import gc
    import weakref

    import torch

    from attnbench.timing.memory import call_measuring_peak

    class Cycle:
        def __init__(self) -> None:
            self.me = self
            self.tensor = torch.ones(1 << 20)  # held by a reference cycle: only a collection frees it

    seen: list[tuple[bool, bool]] = []

    def call() -> object:
        seen.append((garbage() is None, gc.isenabled()))
        return torch.ones(1 << 10)

    gc.disable()  # so that nothing but call_measuring_peak collects the garbage
    try:
        cycle = Cycle()
        garbage = weakref.ref(cycle)
        del cycle
        call_measuring_peak(call, "cpu")
        assert gc.isenabled() is False  # the caller's setting is restored
    finally:
        gc.enable()
    assert seen == [(True, False)]  # freed before the call; no collection can run inside it
    call_measuring_peak(lambda: torch.ones(1), "cpu")
    assert gc.isenabled()
