"""How far attnbench's median is from an independent timer's, for a short and a long kernel.

CPU: against torch.utils.benchmark's blocked_autorange, on sdpa-math. CUDA (when there is one): against
triton.testing.do_bench(return_mode="median"), on sdpa, for a call under 50 µs and one over 5 ms.
The two timers take turns in short rounds, A B then B A (as tests/test_timing.py's fidelity test), so that a
change of the machine's speed reaches both alike and neither always runs second; each repeat prints the median of
its per-round ratios (attnbench / the other timer), then the median over the repeats, with the load average
before and after (on a shared machine a ratio is only worth the load it was measured under).

    python benchmarks/fidelity.py [--rounds 8] [--repeats 3] [--device cpu|cuda|both]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnbench.core.case import Case  # noqa: E402
from attnbench.backends.registry import default_registry  # noqa: E402
from attnbench.run.measure import Settings, measure  # noqa: E402
from attnbench.run.recording import RunInfo  # noqa: E402
from attnbench.timing.timers import ClockTimer, TimingSettings, timer_for  # noqa: E402
from attnbench.verify.inputs import CaseData  # noqa: E402

SETTINGS = TimingSettings(warmup_ms=50, budget_ms=300)
SAMPLES = 10  # on a CPU each timer gets the time for this many calls (at least 300 ms), as tests/test_timing.py


def case(device: str, dtype: str, seq: int, heads: int, head_dim: int, causal: bool) -> Case:
    return Case(device, dtype, 1, seq, seq, heads, heads, head_dim, causal, None, "fwd")


def rounds(ours: Callable[[], float], theirs: Callable[[], float], n: int) -> tuple[float, float, float]:
    """Median of per-round ratios ours/theirs, with the two medians (ms); a first round of each thrown away, then
    rounds that alternate which timer goes first (A B, B A, ...)."""
    ours(), theirs()
    a, b = [], []
    for i in range(n):
        if i % 2 == 0:
            a.append(ours())
            b.append(theirs())
        else:
            b.append(theirs())
            a.append(ours())
    return statistics.median(x / y for x, y in zip(a, b)), statistics.median(a), statistics.median(b)


def cpu_ratio(c: Case, n: int) -> tuple[float, float, float]:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.benchmark import Timer

    data = CaseData(c)
    backend = default_registry().get("sdpa-math")
    q, k, v = data.inputs.q, data.inputs.k, data.inputs.v
    timer = Timer(f"F.scaled_dot_product_attention(q, k, v, is_causal={c.causal})",
                  globals={"F": torch.nn.functional, "q": q, "k": k, "v": v}, num_threads=torch.get_num_threads())
    with sdpa_kernel([SDPBackend.MATH]), torch.no_grad():
        call_ms = timer.timeit(2).median * 1e3
    budget_ms = max(SETTINGS.budget_ms, SAMPLES * call_ms)
    settings = Settings(RunInfo("fidelity", "fidelity"), dataclasses.replace(SETTINGS, budget_ms=budget_ms,
                                                                             min_samples=SAMPLES))

    def ours() -> float:
        record = measure(data, backend, ClockTimer(), settings)
        assert record.status == "ok", record.reason
        return float(record.time_ms)

    def theirs() -> float:
        with sdpa_kernel([SDPBackend.MATH]), torch.no_grad():
            return timer.blocked_autorange(min_run_time=budget_ms / 1e3).median * 1e3

    return rounds(ours, theirs, n)


def cuda_ratio(c: Case, n: int) -> tuple[float, float, float]:
    import torch
    import torch.nn.functional as F
    from triton.testing import do_bench

    data = CaseData(c)
    settings = Settings(RunInfo("fidelity", "fidelity", torch.cuda.get_device_name()), SETTINGS)
    timer = timer_for("cuda")
    backend = default_registry().get("sdpa")
    q, k, v = data.inputs.q, data.inputs.k, data.inputs.v

    def call() -> object:
        with torch.no_grad():
            return F.scaled_dot_product_attention(q, k, v, is_causal=c.causal)

    def ours() -> float:
        record = measure(data, backend, timer, settings)
        assert record.status == "ok", record.reason
        return float(record.time_ms)

    return rounds(ours, lambda: float(do_bench(call, warmup=25, rep=100, return_mode="median")), n)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", choices=("cpu", "cuda", "both"), default="both")
    args = parser.parse_args()
    import torch

    print(f"{'device':<6} {'case':<44} {'attnbench ms':>13} {'other ms':>10} {'ratio':>7}  other timer, load")

    def report(device: str, c: Case, measure_ratio: Callable[[Case, int], tuple[float, float, float]],
               other: str) -> None:
        ratios = []
        for _ in range(args.repeats):
            before = os.getloadavg()[0]
            ratio, ours, theirs = measure_ratio(c, args.rounds)
            ratios.append(ratio)
            print(f"{device:<6} {c.describe():<44} {ours:>13.4f} {theirs:>10.4f} {ratio:>7.3f}  {other}, "
                  f"load {before:.2f} -> {os.getloadavg()[0]:.2f}")
        print(f"{device:<6} {c.describe():<44} {'':>13} {'':>10} {statistics.median(ratios):>7.3f}  "
              f"median of {len(ratios)} repeats")

    if args.device in ("cpu", "both"):
        for c in (case("cpu", "float32", 128, 4, 64, False), case("cpu", "float32", 1024, 8, 64, True),
                  case("cpu", "float32", 2048, 8, 64, True)):
            report("cpu", c, cpu_ratio, "blocked_autorange")
    if args.device in ("cuda", "both"):
        if not torch.cuda.is_available():
            print("cuda: no GPU here; the do_bench comparison was not run")
        else:  # a call well under 50 µs, and one well over 5 ms (H100-class GPU)
            for c in (case("cuda", "bfloat16", 256, 8, 64, False), case("cuda", "bfloat16", 32768, 32, 128, True)):
                report("cuda", c, cuda_ratio, "triton do_bench (median)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
