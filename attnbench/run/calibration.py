"""The machine's speed, measured: the throughput a forecast divides work by (calibrate, cached an hour; a datasheet's
row for a GPU not here), and a CPU's roofs for `percent_of_peak` (measure_roofs, at every run's start, never cached:
a roof describes the run it was measured on)."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnbench.core.peaks import MatmulRoof, MeasuredRoofs

if TYPE_CHECKING:
    from attnbench.core.case import Case


@dataclass(frozen=True)
class Machine:
    device: str  # "cpu" or "cuda"
    name: str
    tflops: dict[str, float]  # matmul TFLOP/s by dtype
    bandwidth_gbs: float
    launch_ms: float  # fixed cost of one kernel call
    source: str  # in words
    estimate: bool = False  # a datasheet row, no measurement
    measured_at: float = 0.0  # time.time()
    memory_bytes: int | None = None  # free device memory; None on a CPU

    def rate(self, dtype: str) -> float:
        return self.tflops.get(dtype) or self.tflops.get("float32") or min(self.tflops.values())

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def calibrate(device: str) -> Machine:
    """This device's matmul rate (fp32, fp64, on CUDA half) and copy bandwidth, in well under 1 s."""
    import torch

    from attnbench.run.env import device_name

    start = time.perf_counter()
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def per_call_ms(fn: Any, budget_s: float) -> float:
        """Wall time per call over back-to-back calls: on a shared machine, the throughput the run will get."""
        fn()
        sync()
        calls = 0
        begin = time.perf_counter()
        while calls < 3 or (time.perf_counter() - begin < budget_s and calls < 200):
            fn()
            calls += 1
        sync()
        return (time.perf_counter() - begin) * 1e3 / calls

    tflops: dict[str, float] = {}
    dtypes = ("float32", "float64", "float16", "bfloat16") if cuda else ("float32", "float64")
    n = 4096 if cuda else 1024
    for name in dtypes:
        a = torch.randn(n, n, device=device, dtype=getattr(torch, name))
        ms = per_call_ms(lambda a=a: a @ a, 0.03 if cuda else 0.1)
        tflops[name] = 2 * n ** 3 / (ms * 1e-3) / 1e12
    if not cuda:
        tflops["float16"] = tflops["bfloat16"] = tflops["float32"] / 4  # no half matmul units on most CPUs
    size = (1 << 28) if cuda else (1 << 26)  # beyond any cache
    src = torch.ones(size // 4, device=device)
    dst = torch.empty_like(src)
    ms = per_call_ms(lambda dst=dst, src=src: dst.copy_(src), 0.03 if cuda else 0.08)
    bandwidth = 2 * size / (ms * 1e-3) / 1e9  # read and write
    tiny = torch.ones(8, device=device)
    launch = per_call_ms(lambda tiny=tiny: tiny.add_(1), 0.01)
    del a, src, dst, tiny
    free = int(torch.cuda.mem_get_info()[0]) if cuda else None
    took = time.perf_counter() - start
    rate = f"{tflops['float16']:.0f} TFLOP/s fp16" if cuda else f"{tflops['float32'] * 1e3:.0f} GFLOP/s fp32"
    return Machine(device, device_name(device), tflops, bandwidth, launch,
                   f"measured on this {'GPU' if cuda else 'CPU'} in {took:.2f} s: {rate} matmul, {bandwidth:.0f} GB/s "
                   f"copy", measured_at=time.time(), memory_bytes=free)


def calibrate_apart(device: str) -> Machine:
    """calibrate() in a child process: a CUDA context in the parent holds memory the workers lack and shows as
    another process on the GPU (every record `throttled`). Runs here where no child can start."""
    import subprocess
    import sys

    code = ("import json, sys; from attnbench.run.calibration import calibrate; "
            f"json.dump(calibrate({device!r}).to_dict(), sys.stdout)")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                              check=True)
        return Machine(**json.loads(done.stdout))
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError, TypeError):
        return calibrate(device)


def datasheet(gpu: str) -> Machine:
    """A GPU that is not here, from attnbench.core.peaks' datasheet table."""
    from attnbench.core.errors import AttnbenchError
    from attnbench.core.peaks import GPU_MEMORY_GB, PEAKS, _row

    row = _row(gpu)
    if row is None:
        known = ", ".join(label for label, *_ in PEAKS)
        raise AttnbenchError(f"--estimate-gpu {gpu}: not in the datasheet table; known: {known}")
    label, _, half, fp32, bandwidth, _ = row
    assert half and bandwidth
    fp32 = fp32 or half / 16
    memory = GPU_MEMORY_GB.get(label)
    return Machine("cuda", label, {"float16": half, "bfloat16": half, "float32": fp32, "float64": fp32},
                   bandwidth, 0.01, f"datasheet: {label} ({half:g} TFLOP/s dense fp16/bf16, {bandwidth:g} GB/s"
                   f"{f', {memory} GB' if memory else ''})", estimate=True,
                   memory_bytes=int(memory * 0.97e9) if memory else None)


# A machine's speed drifts (other jobs, clocks); the ETA corrects the rest.
CALIBRATION_TTL_S = 3600


def cached_calibration(device: str, cache_dir: Path | None) -> Machine:
    """Calibrated at most every CALIBRATION_TTL_S per device name and torch version, kept in the cache dir."""
    import torch

    from attnbench.run.env import device_name

    key = f"{device}|{device_name(device)}|{torch.__version__}"
    path = cache_dir / "calibration.json" if cache_dir is not None else None
    stored: dict[str, Any] = {}
    if path is not None and path.is_file():
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            stored = {}
    if key in stored:
        try:
            machine = Machine(**stored[key])
            if 0 <= time.time() - machine.measured_at < CALIBRATION_TTL_S:
                return machine
        except TypeError:
            pass
    machine = calibrate_apart(device) if device == "cuda" else calibrate(device)
    if path is not None:
        stored[key] = machine.to_dict()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(stored, indent=1), encoding="utf-8")
        except OSError:
            pass  # costs a calibration next time
    return machine


# A CPU's roofs: the best of short repetitions over a few sizes (the fastest differs by dtype).
ROOF_SIZES = (512, 1024, 2048)
ROOF_BUDGET_S = 0.8  # per dtype; at least MIN_ROUNDS rounds whatever it costs
COPY_BUDGET_S = 0.25
COPY_BYTES = 1 << 26  # beyond private caches and most shared ones
MIN_ROUNDS = 2
# A size whose first call takes over budget / WARM_SHARE is the last tried.
WARM_SHARE = 8 * (MIN_ROUNDS + 1) * 2
ROOF_BUDGET_VAR = "ATTNBENCH_ROOF_BUDGET_S"  # overrides ROOF_BUDGET_S; 0 measures no roof


def roof_budget_s() -> float:
    from attnbench.core.errors import AttnbenchError

    text = os.environ.get(ROOF_BUDGET_VAR)
    if text is None or not text.strip():
        return ROOF_BUDGET_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 60:
        raise AttnbenchError(f"{ROOF_BUDGET_VAR}={text!r}: give the seconds per dtype, from 0 (no roof) to 60")
    return value


def roof_dtypes(cases: list[Case]) -> tuple[str, ...]:
    """The dtypes of the run's CPU cases (FP8 inputs: their bf16 originals')."""
    return tuple(sorted({case.unquantized.dtype for case in cases if case.device == "cpu"}))


def roofs_seconds(dtypes: tuple[str, ...]) -> float:
    """The roofs' cost, for the forecast."""
    budget = roof_budget_s()
    return len(dtypes) * budget + COPY_BUDGET_S if dtypes and budget > 0 else 0.0


def timed_rounds(calls: dict[Any, Callable[[], Any]], budget_s: float, clock: Callable[[], float],
                 min_rounds: int = MIN_ROUNDS) -> dict[Any, list[float]]:
    """Seconds of each call, taken in turn so interference falls on all alike: `min_rounds` rounds, then on until
    `budget_s` is spent."""
    times: dict[Any, list[float]] = {key: [] for key in calls}
    start = now = clock()
    rounds = 0
    while rounds < min_rounds or now - start < budget_s:
        for key, call in calls.items():
            if rounds >= min_rounds and now - start >= budget_s:
                break
            begin = clock()
            call()
            now = clock()
            times[key].append(now - begin)
        rounds += 1
    return times


def matmul_roof(dtype: str, times: dict[int, list[float]]) -> MatmulRoof:
    """The best repetition of any size (seconds of an n×n matmul, 2n³ FLOPs)."""
    rates = {n: 2 * n ** 3 / max(min(ts), 1e-12) / 1e9 for n, ts in times.items() if ts}
    size = max(rates, key=lambda n: rates[n])
    median = sorted(times[size])[len(times[size]) // 2]
    return MatmulRoof(dtype, rates[size], size, sum(len(ts) for ts in times.values()),
                      2 * size ** 3 / max(median, 1e-12) / 1e9)


def measure_roofs(dtypes: tuple[str, ...], budget_s: float | None = None,
                  clock: Callable[[], float] = time.perf_counter, sizes: tuple[int, ...] = ROOF_SIZES,
                  copy_bytes: int = COPY_BYTES) -> MeasuredRoofs | None:
    """This CPU's roofs on the run's thread count; None with no dtype or a budget of 0."""
    import torch

    budget = roof_budget_s() if budget_s is None else budget_s
    if not dtypes or budget <= 0:
        return None
    began = clock()
    roofs = []
    for dtype in dtypes:
        kind = getattr(torch, dtype)
        calls: dict[int, Callable[[], Any]] = {}
        for n in sorted(sizes):
            a, b, c = (torch.randn(n, n, dtype=kind), torch.randn(n, n, dtype=kind), torch.empty(n, n, dtype=kind))
            def call(a=a, b=b, c=c):
                return (torch.mm(a, b, out=c))
            first = clock()
            call()  # picks and packs its kernel: not the roof
            calls[n] = call
            if clock() - first > budget / WARM_SHARE:
                break
        roofs.append(matmul_roof(dtype, timed_rounds(calls, budget, clock)))
        del calls
    src = torch.ones(copy_bytes // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)  # the first touch of dst's pages: not the roof
    copies = timed_rounds({"copy": lambda dst=dst, src=src: dst.copy_(src)}, min(COPY_BUDGET_S, budget), clock,
                          min_rounds=3)["copy"]
    del src, dst
    threads = torch.get_num_threads()
    return MeasuredRoofs(
        threads, tuple(roofs), 2 * copy_bytes / max(min(copies), 1e-12) / 1e9, copy_bytes, len(copies),
        clock() - began,
        f"at the run's start, on {threads} threads: per dtype the best of repetitions of n×n matmuls "
        f"(n up to {max(sizes)}, taken in turn for {budget:g} s), and the best of {len(copies)} copies of "
        f"{copy_bytes / 2 ** 20:.0f} MiB (read and write counted); the best repetition, since interference only "
        "slows one")
