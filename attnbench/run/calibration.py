"""The throughput a forecast divides work by: measured on this device in well under a second and kept for an hour
in the cache directory, or, for a GPU that is not here, a datasheet's row (attnbench.core.peaks), labelled an estimate."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Machine:
    """The throughput a forecast divides work by: measured on this device, or a datasheet's."""

    device: str  # "cpu" or "cuda"
    name: str
    tflops: dict[str, float]  # matmul TFLOP/s by dtype
    bandwidth_gbs: float
    launch_ms: float  # fixed cost of one kernel call
    source: str  # how the numbers were obtained, in words
    estimate: bool = False  # True when no measurement on this device backs them (a datasheet row)
    measured_at: float = 0.0  # time.time() of the calibration
    memory_bytes: int | None = None  # free device memory (None on a CPU: no limit is checked there)

    def rate(self, dtype: str) -> float:
        return self.tflops.get(dtype) or self.tflops.get("float32") or min(self.tflops.values())

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def calibrate(device: str) -> Machine:
    """Measure this device's matmul rate (fp32, fp64 and, on CUDA, half) and copy bandwidth in well under 1 s."""
    import torch

    from attnbench.run.env import device_name

    start = time.perf_counter()
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def per_call_ms(fn: Any, budget_s: float) -> float:
        """Wall time per call over a window of back-to-back calls: on a machine shared with other jobs this is
        the throughput the run will get, where a single call's best time would be the machine's alone."""
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
        ms = per_call_ms(lambda: a @ a, 0.03 if cuda else 0.1)
        tflops[name] = 2 * n ** 3 / (ms * 1e-3) / 1e12
    if not cuda:
        tflops["float16"] = tflops["bfloat16"] = tflops["float32"] / 4  # no half matmul units on most CPUs
    size = (1 << 28) if cuda else (1 << 26)  # beyond any cache
    src = torch.ones(size // 4, device=device)
    dst = torch.empty_like(src)
    ms = per_call_ms(lambda: dst.copy_(src), 0.03 if cuda else 0.08)
    bandwidth = 2 * size / (ms * 1e-3) / 1e9  # read and write
    tiny = torch.ones(8, device=device)
    launch = per_call_ms(lambda: tiny.add_(1), 0.01)
    del a, src, dst, tiny
    free = int(torch.cuda.mem_get_info()[0]) if cuda else None
    took = time.perf_counter() - start
    rate = f"{tflops['float16']:.0f} TFLOP/s fp16" if cuda else f"{tflops['float32'] * 1e3:.0f} GFLOP/s fp32"
    return Machine(device, device_name(device), tflops, bandwidth, launch,
                   f"measured on this {'GPU' if cuda else 'CPU'} in {took:.2f} s: {rate} matmul, {bandwidth:.0f} GB/s "
                   f"copy", measured_at=time.time(), memory_bytes=free)


def calibrate_apart(device: str) -> Machine:
    """calibrate() in a child process, so the parent holds no CUDA context during the run.

    A context left in the parent holds memory (the context, the caching allocator's blocks) that the measuring
    workers then lack, and shows on the GPU as another process, which marks every record `throttled`. Where the
    child cannot run (no interpreter to spawn), the calibration runs here.
    """
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
    """A GPU that is not here, from attnbench.core.peaks' datasheet table: an estimate."""
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


# A calibration is reused for this long: a machine's speed drifts (other jobs, clocks), the ETA corrects the rest.
CALIBRATION_TTL_S = 3600


def cached_calibration(device: str, cache_dir: Path | None) -> Machine:
    """This device's calibration, measured at most every CALIBRATION_TTL_S per device name and torch version and
    kept in the cache dir."""
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
            pass  # a read-only cache costs a calibration next time, nothing else
    return machine
