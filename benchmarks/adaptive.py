"""attnbench's adaptive sampler against torch.utils.benchmark's adaptive_autorange(threshold=0.02), on CPU.

Both time the same call (SDPA, math or fused kernel) until they call the number stable: attnbench until the
median's 95% interval is within ±2% (timing.precision 0.02), adaptive_autorange until the IQR of its block
means is under 2% of their median. For each call the two take turns for a few rounds (so a change of the
machine's speed reaches both alike) and the script prints, side by side: each median, attnbench's interval,
adaptive_autorange's IQR/median, the wall time each took (warm-up included), and the ratios.

    python benchmarks/adaptive.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnbench.core.interval import median_interval  # noqa: E402
from attnbench.timing.timers import ClockTimer, TimingSettings  # noqa: E402

# Precision as adaptive_autorange's threshold; a budget and sample cap high enough that precision decides.
SETTINGS = TimingSettings(warmup_ms=50, budget_ms=10_000, min_samples=5, max_samples=100_000, precision=0.02)
CALLS = (  # (label, kernel, batch, heads, seq, head_dim)
    ("sdpa-math", "MATH", 1, 4, 256, 64),
    ("sdpa-flash", "FLASH_ATTENTION", 1, 8, 1024, 64),
    ("sdpa-math", "MATH", 1, 8, 2048, 64),
)


def make_call(kernel: str, batch: int, heads: int, seq: int, head_dim: int) -> tuple[Callable[[], object], str]:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(batch, heads, seq, head_dim, generator=gen) for _ in range(3))
    backend = getattr(SDPBackend, kernel)

    def call() -> object:
        with sdpa_kernel([backend]), torch.no_grad():
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    return call, f"fp32 b{batch} h{heads} seq {seq} d{head_dim} causal"


def ours(call: Callable[[], object]) -> tuple[float, float, float, int]:
    """(median ms, interval half-width, wall s, samples) of attnbench's ClockTimer at ±2%."""
    start = time.perf_counter()
    samples = ClockTimer().measure(call, SETTINGS).times
    wall = time.perf_counter() - start
    interval = median_interval(list(samples), SETTINGS.confidence)
    return interval.median, interval.half_width(), wall, len(samples)


def theirs(call: Callable[[], object]) -> tuple[float, float, float, int]:
    """(median ms, IQR/median, wall s, measurements) of adaptive_autorange(threshold=0.02)."""
    import torch
    from torch.utils.benchmark import Timer

    timer = Timer("call()", globals={"call": call}, num_threads=torch.get_num_threads())
    start = time.perf_counter()
    measurement = timer.adaptive_autorange(threshold=0.02)
    wall = time.perf_counter() - start
    return measurement.median * 1e3, measurement.iqr / measurement.median, wall, len(measurement.times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"{'call':<42} {'attnbench ms':>12} {'±interval':>9} {'wall s':>7} {'n':>5} | {'autorange ms':>12} "
          f"{'IQR/med':>8} {'wall s':>7} {'n':>4} | {'median ratio':>12} {'wall ratio':>10}")
    worst_median, worst_wall = 0.0, 0.0
    for label, kernel, batch, heads, seq, head_dim in CALLS:
        call, words = make_call(kernel, batch, heads, seq, head_dim)
        for _ in range(3):
            call()
        a, b = [], []
        for _ in range(args.rounds):
            a.append(ours(call))
            b.append(theirs(call))
        med = lambda rows, i: statistics.median(r[i] for r in rows)  # noqa: E731
        median_ratio = statistics.median(x[0] / y[0] for x, y in zip(a, b))
        wall_ratio = statistics.median(x[2] / y[2] for x, y in zip(a, b))
        worst_median = max(worst_median, abs(median_ratio - 1))
        worst_wall = max(worst_wall, wall_ratio)
        print(f"{label + ' ' + words:<42} {med(a, 0):>12.4f} {med(a, 1):>8.2%} {med(a, 2):>7.3f} {med(a, 3):>5.0f} | "
              f"{med(b, 0):>12.4f} {med(b, 1):>8.2%} {med(b, 2):>7.3f} {med(b, 3):>4.0f} | "
              f"{median_ratio:>12.3f} {wall_ratio:>10.2f}")
    print(f"medians agree within {worst_median:.1%} (bar: 5%); attnbench's wall is at most {worst_wall:.2f}x "
          f"adaptive_autorange's (bar: 1.00x); per call: medians over {args.rounds} alternating rounds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
