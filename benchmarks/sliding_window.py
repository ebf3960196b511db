"""Measure `sliding-window` against `naive` (same mask) with attnbench's own Runner, timer and memory.

The long-sequence targets: at seq_len 16384, window 512, batch 1, 4 heads, head_dim 64, float32,
causal, fwd on CPU, sliding-window should be >= 8x faster and need >= 8x less peak memory than
naive, and its time from 8K to 16K should grow by <= 2.3x (linear in seq_len, not quadratic).

    python benchmarks/sliding_window.py [--seq 8192 16384] [--samples 3] [--backends naive sliding-window]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnbench.core.case import Case  # noqa: E402
from attnbench.backends.registry import default_registry  # noqa: E402
from attnbench.runner import CaseData, Runner, RunInfo  # noqa: E402
from attnbench.timing.timers import ClockTimer, TimingSettings  # noqa: E402

MIB = 1 << 20


def main() -> int:
    """Run the cases, print one row per (seq_len, backend) and the ratios the targets are about."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, nargs="+", default=[8192, 16384])
    parser.add_argument("--window", type=int, default=512)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--backends", nargs="+", default=["naive", "sliding-window"])
    args = parser.parse_args()

    registry = default_registry()
    backends = registry.resolve(args.backends)
    runner = Runner(RunInfo("bench", "sliding-window"), ClockTimer(),
                    TimingSettings(warmup_ms=0, budget_ms=0, min_samples=args.samples, max_samples=args.samples))
    rows: dict[tuple[int, str], object] = {}
    print(f"{'seq_len':>8} {'backend':<16} {'status':<8} {'median ms':>10} {'min ms':>10} {'peak MiB':>10} "
          f"{'max err':>9} {'bound':>9}  kernel")
    for seq in args.seq:
        case = Case("cpu", "float32", 1, seq, seq, args.heads, args.heads, args.head_dim, True, args.window, "fwd")
        data = CaseData(case)
        for backend in backends:
            rec = runner.measure(data, backend)
            rows[seq, backend.name] = rec
            if rec.status in ("ok", "mismatch"):
                print(f"{seq:>8} {backend.name:<16} {rec.status:<8} {rec.time_ms:>10.1f} {rec.time_ms_min:>10.1f} "
                      f"{rec.peak_memory_bytes / MIB:>10.1f} {rec.max_abs_error:>9.2e} {rec.error_bound:>9.2e}  "
                      f"{rec.kernel}", flush=True)
            else:
                print(f"{seq:>8} {backend.name:<16} {rec.status:<8} {rec.reason}", flush=True)
        del data
    _ratios(rows, args.seq)
    return 0


def _ratios(rows: dict, seqs: list[int]) -> None:
    """Speed-up and memory ratio of sliding-window over naive per length, and its growth with length."""
    ok = lambda seq, name: (seq, name) in rows and rows[seq, name].status == "ok"  # noqa: E731
    for seq in seqs:
        if ok(seq, "naive") and ok(seq, "sliding-window"):
            n, s = rows[seq, "naive"], rows[seq, "sliding-window"]
            print(f"seq {seq}: sliding-window is {n.time_ms / s.time_ms:.1f}x faster and needs "
                  f"{n.peak_memory_bytes / max(1, s.peak_memory_bytes):.1f}x less peak memory than naive")
    if len(seqs) >= 2 and ok(seqs[0], "sliding-window") and ok(seqs[-1], "sliding-window"):
        a, b = rows[seqs[0], "sliding-window"], rows[seqs[-1], "sliding-window"]
        print(f"sliding-window time {seqs[0]} -> {seqs[-1]}: x{b.time_ms / a.time_ms:.2f} "
              f"(sequence x{seqs[-1] / seqs[0]:.1f})")


if __name__ == "__main__":
    raise SystemExit(main())
