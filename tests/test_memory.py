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


class FakeDevice:
    """A device's own accounting (JAX's Device.memory_stats()) with a high-water mark that never resets."""

    def __init__(self, in_use: int, peak: int) -> None:
        self.in_use, self.peak = in_use, peak

    def memory_stats(self) -> dict[str, int]:
        return {"bytes_in_use": self.in_use, "peak_bytes_in_use": self.peak}

    def allocate(self, held: int, kept: int) -> object:
        """A call that holds `held` bytes at its peak and returns `kept` of them."""
        self.peak = max(self.peak, self.in_use + held)
        self.in_use += kept
        return kept


def stats_of(device: FakeDevice) -> object:
    from attnbench.timing.memory import DeviceStats

    return DeviceStats(device.memory_stats, "fake Device.memory_stats()")


def test_a_runtimes_device_peak_is_its_high_water_mark_where_the_call_raised_it() -> None:
    """Inputs of 48 MiB resident, a call holding 96 MiB at its peak: 96 MiB above the state before it."""
    from attnbench.timing.memory import RAISED, call_measuring_peak

    device = FakeDevice(in_use=48 << 20, peak=50 << 20)
    measured = call_measuring_peak(lambda: device.allocate(96 << 20, 16 << 20), "cuda", memory=stats_of(device))
    assert measured.peak == 96 << 20 and measured.result == 16 << 20
    assert measured.method == f"fake Device.memory_stats() {RAISED}"


def test_a_call_under_an_earlier_high_water_mark_has_no_peak_and_says_why() -> None:
    """The mark has no reset: a call that stays under an earlier one (a compile's autotuning, a larger case) hides
    its own peak, and the record says so instead of reporting the earlier mark."""
    from attnbench.timing.memory import HIDDEN, UNREPORTED, DeviceStats, call_measuring_peak

    device = FakeDevice(in_use=48 << 20, peak=1 << 30)
    measured = call_measuring_peak(lambda: device.allocate(96 << 20, 16 << 20), "cuda", memory=stats_of(device))
    assert measured.peak is None and measured.method.endswith(HIDDEN)
    silent = call_measuring_peak(lambda: 1, "cuda", memory=DeviceStats(lambda: None, "fake"))
    assert silent.peak is None and silent.result == 1 and silent.method == f"fake: {UNREPORTED}"


def test_host_rss_is_never_a_gpus_peak_and_the_first_call_is_measured_once() -> None:
    from attnbench.timing.memory import NO_DEVICE_METHOD, PeakOnFirstCall, call_measuring_peak

    calls: list[int] = []
    measured = call_measuring_peak(lambda: calls.append(1), "cuda", memory="rss")
    assert (measured.peak, measured.method, calls) == (None, NO_DEVICE_METHOD, [1])
    first = PeakOnFirstCall(lambda: calls.append(2), "cuda", memory="rss")
    first(), first()
    assert (first.peak, first.method, calls) == (None, NO_DEVICE_METHOD, [1, 2, 2])


def test_jax_on_a_gpu_reads_its_devices_accounting_and_on_the_cpu_its_rss(monkeypatch: pytest.MonkeyPatch) -> None:
    """jax-cudnn's H200 records read the host's RSS for a GPU runtime. On CUDA the prepared call now carries the JAX
    device's memory_stats (here the CPU device standing in for the GPU's); on the CPU it stays RSS."""
    jax = pytest.importorskip("jax")
    import torch

    from attnbench.timing.memory import DeviceStats

    cpu = jax.devices("cpu")
    monkeypatch.setattr(jax, "devices", lambda kind=None: cpu)
    backend = default_registry().get("jax")
    q, k, v = (torch.randn(1, 2, 16, 8) for _ in range(3))
    on_gpu = backend.prepare(make_case(device="cuda", heads=2, kv_heads=2, seq_len=16, head_dim=8), q, k, v)
    assert isinstance(on_gpu.memory, DeviceStats)
    assert on_gpu.memory.read.__self__ is cpu[0] and on_gpu.memory.read.__name__ == "memory_stats"
    assert on_gpu.memory.source == f"jax {jax.__version__} Device.memory_stats()"
    on_cpu = backend.prepare(make_case(heads=2, kv_heads=2, seq_len=16, head_dim=8), q, k, v)
    assert on_cpu.memory == "rss"
