"""A run's wall time before it starts (`run --dry-run`), and its ETA while it runs: one model for both.

Each measurement costs the harness's own overhead, the backend's setup (a flex compile), the checked call,
warm-up and samples as the sampler will take them, plus each case's reference. Call times come from the
case's work (FLOPs, and the score matrix's bytes for kernels that materialise it) over the device's
throughput: measured on the spot on this machine (a few matmuls and a copy, well under a second, kept in the
cache directory for an hour), or, for a GPU that is not here, the datasheet table (attnbench.peaks) — an estimate, and
labelled so. The per-kernel efficiencies below were fitted on the runs named beside them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attnbench.backends.base import Backend
    from attnbench.case import Case
    from attnbench.timing import TimingSettings

MODE_PARTS = {"fwd": ("fwd",), "bwd": ("bwd",), "fwd_bwd": ("fwd", "bwd")}
BWD_FLOPS = 2.5  # backward = 2.5 x forward (FlashAttention's accounting, as Case.flops)
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


@dataclass(frozen=True)
class Kernel:
    """How a backend's call time follows its work: which pairs it computes, at what share of the matmul rate,
    and how many times it moves the (Sq, Sk) score matrix through memory (0 for fused kernels)."""

    # "visible": skips masked blocks; "causal": skips the causal triangle only; "dense": every pair;
    # "causal-flag": skips the causal triangle when that is the whole mask, else (a window, passed as an explicit
    # mask) computes every pair
    pairs: str
    efficiency_fwd: float
    efficiency_bwd: float
    score_passes_fwd: float = 0.0
    score_passes_bwd: float = 0.0
    calls: int = 1  # kernel launches per forward (launch overhead on a GPU)


# Fitted on a 2-core AMD EPYC VM (torch 2.13.0+cpu), suites/quick.yaml and the CPU block of suites/long.yaml
# (2026-11-30), against that machine's calibration (fp32 matmul rate, copy bandwidth). The materialising kernels'
# score passes are mostly first touches of freshly allocated pages (40 "passes" at 2K-4K, 63 at 8K). SDPA's CPU
# kernels skip the causal triangle only under is_causal: a window reaches them as an explicit mask.
CPU_KERNELS = {
    "naive": Kernel("dense", 0.55, 0.8, 40.0, 14.0, 6),
    "sdpa-math": Kernel("dense", 0.55, 0.8, 35.0, 14.0, 6),
    "sdpa": Kernel("causal-flag", 0.8, 0.35),
    "sdpa-flash": Kernel("causal-flag", 0.8, 0.35),
    "flex": Kernel("visible", 0.5, 0.25),
    "flex-dynamic": Kernel("visible", 0.5, 0.25),
    "sliding-window": Kernel("visible", 0.2, 0.2, 0.0, 0.0, 8),
}
CPU_DEFAULT = Kernel("dense", 0.3, 0.2)
# GPU kernels against the datasheet's dense tensor rate and bandwidth (published FlashAttention-2/3 and cuDNN
# figures on H100: 50-75% of peak forward, 35-55% backward); the materialising ones are bound by the scores' bytes.
GPU_KERNELS = {
    "naive": Kernel("dense", 0.45, 0.35, 6.0, 14.0, 6),
    "sdpa-math": Kernel("dense", 0.45, 0.35, 8.0, 16.0, 8),
    "sdpa": Kernel("visible", 0.50, 0.35),
    "sdpa-flash": Kernel("causal", 0.45, 0.32),
    "sdpa-flash-fa3": Kernel("visible", 0.60, 0.45),
    "sdpa-flash-fa4": Kernel("visible", 0.60, 0.45),
    "sdpa-efficient": Kernel("causal", 0.30, 0.20),
    "sdpa-cudnn": Kernel("visible", 0.50, 0.35),
    "flash-attn": Kernel("visible", 0.50, 0.35),
    "flash-attn-3": Kernel("visible", 0.65, 0.45),
    "flash-attn-4": Kernel("visible", 0.65, 0.45),
    "xformers": Kernel("visible", 0.40, 0.30),
    # By analogy, not yet fitted: varlen_attn is PyTorch's FlashAttention 2; FlashInfer's prefill kernels are FA2/FA3
    # class (forward only: its backward share is never used).
    "sdpa-varlen": Kernel("visible", 0.50, 0.35),
    "flashinfer": Kernel("visible", 0.55, 0.0),
    "flex": Kernel("visible", 0.40, 0.28),
    "flex-dynamic": Kernel("visible", 0.36, 0.25),  # bounds-checked loads (IS_DIVISIBLE unknown)
    "sliding-window": Kernel("visible", 0.25, 0.15, 0.0, 0.0, 8),
}
GPU_DEFAULT = Kernel("visible", 0.3, 0.2)

# How often a slow CPU forward's checked call agrees with its samples and is one of them (fitted, as above).
CHECK_JOINS = 0.5
# Relative spread of a call's samples (their coefficient of variation): how many samples the interval needs.
NOISE = {"cpu": 0.03, "cuda": 0.01}


@dataclass(frozen=True)
class Overheads:
    """Fixed costs of the harness, in seconds (fitted on the same runs as the kernels)."""

    startup_s: float  # interpreter, imports, env.json: before the first measurement
    per_measurement_s: float  # prepare, check, record, progress: around every measurement that runs
    per_skip_s: float  # a measurement recorded `skipped` before any tensor exists
    per_case_s: float  # inputs, and freeing them
    worker_start_s: float  # an isolated run's worker process (imports torch again)
    report_s: float  # the report: HTML, Markdown and the fixed charts
    per_chart_s: float  # each case group's chart
    compile_s: float  # one flex compile of a forward with a cold cache
    compile_cached_s: float  # the same graph from inductor's on-disk cache
    backward_compile: float  # a forward-and-backward compile costs this many forward ones


CPU_OVERHEADS = Overheads(2.0, 0.012, 0.001, 0.01, 3.0, 0.6, 0.12, 6.0, 0.6, 2.0)
# compile: the H200 run of suites/gpu-check.yaml (torch 2.11): compile_s 2.8 s forward, 4.2 s fwd_bwd.
GPU_OVERHEADS = Overheads(6.0, 0.06, 0.001, 0.05, 8.0, 1.5, 0.35, 3.0, 0.6, 1.5)
# Memory of the GPUs in the datasheet table (GB), for the run's own rule: a case estimated above twice the
# free memory is skipped without trying it.
GPU_MEMORY_GB = {"H100 PCIe": 80, "H100 NVL": 94, "H100 SXM": 80, "GH200 144GB HBM3e": 144, "GH200 96GB HBM3": 96,
                 "H200 NVL": 141, "H200 SXM": 141, "B200": 180, "A100 80GB PCIe": 80, "A100 80GB SXM": 80,
                 "A100 40GB": 40, "A10": 24, "L40S": 48, "L40": 48, "L4": 24, "V100 PCIe": 16, "V100 SXM2": 16,
                 "T4": 16, "RTX 4090": 24, "RTX 3090": 24, "MI300X": 192}


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

    from attnbench.env import device_name

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

    code = ("import json, sys; from attnbench.forecast import calibrate; "
            f"json.dump(calibrate({device!r}).to_dict(), sys.stdout)")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                              check=True)
        return Machine(**json.loads(done.stdout))
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError, TypeError):
        return calibrate(device)


def datasheet(gpu: str) -> Machine:
    """A GPU that is not here, from attnbench.peaks' datasheet table: an estimate."""
    from attnbench.errors import AttnbenchError
    from attnbench.peaks import PEAKS, _row

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

    from attnbench.env import device_name

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


def kernel_for(backend: str, device: str) -> Kernel:
    table, default = (GPU_KERNELS, GPU_DEFAULT) if device == "cuda" else (CPU_KERNELS, CPU_DEFAULT)
    return table.get(backend, default)


def pairs(case: Case, kind: str) -> int:
    """(query, key) pairs a kernel of this kind computes, over the batch and heads."""
    explicit = kind == "causal-flag" and case.window is not None  # a window given as an explicit mask
    if kind == "dense" or explicit or not (case.causal or case.window is not None):
        count = case.seq_len * case.kv_seq_len
    elif kind == "causal" and case.window is not None:
        count = dataclasses.replace(case, window=None).visible_pairs() if case.causal else case.seq_len * case.kv_seq_len
    else:
        count = case.visible_pairs()
    return case.batch * case.heads * count


def call_s(case: Case, backend: str, machine: Machine, dtype: str | None = None) -> float:
    """Predicted seconds of one timed call of `backend` on `case` (computed in `dtype`, default the case's)."""
    kernel = kernel_for(backend, machine.device)
    dtype = dtype or case.dtype
    work = 4 * case.head_dim * pairs(case, kernel.pairs)
    scores = case.batch * case.heads * case.seq_len * case.kv_seq_len * DTYPE_BYTES[dtype]
    rate = machine.rate(dtype) * 1e12
    total = 0.0
    for part in MODE_PARTS[case.mode]:
        backward = part == "bwd"
        efficiency = kernel.efficiency_bwd if backward else kernel.efficiency_fwd
        passes = kernel.score_passes_bwd if backward else kernel.score_passes_fwd
        flops = work * (BWD_FLOPS if backward else 1.0)
        total += flops / (rate * efficiency) + passes * scores / (machine.bandwidth_gbs * 1e9)
        total += kernel.calls * (2 if backward else 1) * machine.launch_ms * 1e-3
    return total


def reference_s(case: Case, machine: Machine) -> float:
    """The case's reference (float64 naive on the checked rows, with gradients when they are checked) and the
    naive run in the case's own dtype (attnbench.inputs)."""
    from attnbench.inputs import FULL_CHECK_PAIRS, SUBSET_ROWS, grad_checkable

    full = case.batch * case.heads * case.seq_len * case.kv_seq_len <= FULL_CHECK_PAIRS[case.device]
    share = 1.0 if full or case.seq_len <= SUBSET_ROWS + 2 else (SUBSET_ROWS + 2) / case.seq_len
    checked = dataclasses.replace(case, mode="fwd_bwd" if grad_checkable(case) else "fwd")
    return share * (call_s(checked, "naive", machine, "float64") + call_s(checked, "naive", machine))


@dataclass(frozen=True)
class TaskForecast:
    backend: str
    seconds: float
    runs: bool  # False when the measurement is skipped before any tensor exists


@dataclass
class Forecast:
    """Predicted seconds per measurement, per backend and in total."""

    machine: Machine
    tasks: list[TaskForecast] = field(default_factory=list)
    startup_s: float = 0.0  # imports, env.json, an isolated run's worker
    report_s: float = 0.0
    reference_s: float = 0.0  # included in the tasks' seconds (each case's first measurement)
    compile_s: float = 0.0  # likewise

    @property
    def fixed_s(self) -> float:
        return self.startup_s + self.report_s

    @property
    def total_s(self) -> float:
        return self.fixed_s + sum(t.seconds for t in self.tasks)

    def by_backend(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for task in self.tasks:
            out[task.backend] = out.get(task.backend, 0.0) + task.seconds
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"total_s": round(self.total_s, 2), "startup_s": round(self.startup_s, 2),
                "report_s": round(self.report_s, 2),
                "reference_s": round(self.reference_s, 2), "compile_s": round(self.compile_s, 2),
                "by_backend_s": {k: round(v, 2) for k, v in self.by_backend().items()},
                "measurements": len(self.tasks), "measured": sum(t.runs for t in self.tasks),
                "machine": self.machine.to_dict(), "estimate": self.machine.estimate}


def measurement_s(case: Case, backend: Backend, machine: Machine, settings: TimingSettings,
                  overheads: Overheads, compiled: bool, shared: bool = False) -> tuple[float, float]:
    """(seconds, of which compile) of one measurement that runs: overhead, setup, the checked call, warm-up, samples.
    `compiled`: its graph is in inductor's cache (a load); `shared`: a kernel already compiled serves it (nothing)."""
    t = call_s(case, backend.name, machine)
    t_ms = t * 1e3
    compile_s = 0.0
    if backend.name in COMPILED and not shared:
        per_graph = overheads.compile_cached_s if compiled else overheads.compile_s
        compile_s = per_graph * (overheads.backward_compile if case.needs_grad else 1)
    check = call_s(dataclasses.replace(case, mode="fwd_bwd"), backend.name, machine) if case.needs_grad else t
    if case.needs_grad:  # a separate check; warm-up on timed calls
        warm_ms = t_ms if t_ms >= settings.warmup_ms else min(settings.warmup_ms, 6 * t_ms)
    else:  # the check is the first warm-up call (and, on a CPU, often the first sample)
        warm_ms = max(0.0, min(settings.warmup_ms - t_ms, 5 * t_ms))
    needed = max(6, math.ceil((1.96 * 1.2533 * NOISE[machine.device] / settings.precision) ** 2))
    count = min(settings.max_samples, max(settings.min_samples, needed))
    sample_ms = min(count * t_ms, max(settings.budget_ms + t_ms, settings.min_samples * t_ms))
    if not case.needs_grad and machine.device == "cpu" and t_ms >= settings.warmup_ms:
        sample_ms -= CHECK_JOINS * t_ms
    return overheads.per_measurement_s + compile_s + check + (warm_ms + sample_ms) / 1e3, compile_s


def forecast(tasks: list[tuple[Case, Backend]], settings: TimingSettings, machine: Machine, *,
             isolate: bool = False, workers: int = 1, compiled: set[str] | None = None,
             report: bool = True) -> Forecast:
    """The forecast of measuring `tasks` (in order) on `machine`, report included.

    `compiled` holds the flex graphs inductor's cache already has (compile_key), which cost a cache load, not
    a compile. A measurement whose backend cannot run the case here is a skip, priced as such.
    """
    overheads = GPU_OVERHEADS if machine.device == "cuda" else CPU_OVERHEADS
    compiled = set(compiled or ())
    on_disk = set(compiled)
    result = Forecast(machine)
    seen_cases: set[Case] = set()
    groups: set[tuple] = set()
    dynamic_lengths: dict[str, set[tuple[int, int]]] = {}
    for case, backend in tasks:
        groups.add(_group_key(case))
        if skipped_at_once(case, backend, machine):
            result.tasks.append(TaskForecast(backend.name, overheads.per_skip_s, False))
            continue
        key = compile_key(case, backend.name)
        shared, cached = False, key in compiled
        if backend.name == "flex-dynamic":  # its compiles before sharing are real ones unless inductor has them
            lengths = dynamic_lengths.setdefault(key, set())
            lengths.add((case.seq_len, case.kv_seq_len))
            shared, cached = len(lengths) > dynamic_compiles(case), key in on_disk
        seconds, compile_s = measurement_s(case, backend, machine, settings, overheads, cached, shared)
        if backend.name in COMPILED:
            compiled.add(key)
        if case not in seen_cases:
            seen_cases.add(case)
            ref = reference_s(case, machine)
            result.reference_s += ref
            seconds += ref + overheads.per_case_s
        result.compile_s += compile_s
        result.tasks.append(TaskForecast(backend.name, seconds / max(1, workers), True))
    result.startup_s = overheads.startup_s + (overheads.worker_start_s if isolate else 0.0)
    if report and tasks:
        result.report_s = overheads.report_s + overheads.per_chart_s * len(groups)
    return result


def skipped_at_once(case: Case, backend: Backend, machine: Machine) -> bool:
    """Whether the measurement is recorded `skipped` before any tensor exists (as Runner.skip_reason decides).
    For a GPU that is not here (a datasheet estimate) every backend made for CUDA is taken to be installed."""
    from attnbench.backends.base import refusal
    from attnbench.runner import MEMORY_SKIP_FACTOR

    if case.device not in backend.devices:
        return True
    if not machine.estimate and backend.availability(case.device):
        return True
    if machine.memory_bytes is not None and backend.estimate_memory(case) > MEMORY_SKIP_FACTOR * machine.memory_bytes:
        return True
    return refusal(backend, case) is not None


# Backends whose prepare compiles, and what their compile specialises on (compile_key).
COMPILED = ("flex", "flex-dynamic")


def dynamic_compiles(case: Case) -> int:
    """How many sequence lengths flex-dynamic compiles, at most, before one kernel serves every length: with a
    block mask two (Dynamo first specialises the mask's lengths, Python ints, then recompiles them as dynamic:
    automatic dynamic shapes; one when the process has already seen other lengths), without one a single
    compile (tests/test_backends_long.py shows both)."""
    return 2 if case.has_mask else 1


def compile_key(case: Case, backend: str = "flex") -> str:
    """What a flex compile specialises on: every shape, the mask and the grad mode; flex-dynamic's kernel, once
    compiled for dynamic lengths (dynamic_compiles), serves every sequence length of the same mask offset."""
    lengths = (case.seq_len, case.kv_seq_len) if backend != "flex-dynamic" else (case.offset,)
    key = "|".join(str(v) for v in (backend, case.device, case.dtype, case.batch, *lengths, case.heads,
                                    case.kv_heads, case.head_dim, case.causal, case.window, case.needs_grad))
    # A workload's mask_mod and score_mod are their own graph (the dense case's key stays as it was).
    workload = "|".join(f"{axis}={getattr(case, axis)}" for axis in ("doc_lens", "kv_lens", "softcap", "alibi",
                                                                     "head_dim_v") if getattr(case, axis))
    return f"{key}|{workload}" if workload else key


def _group_key(case: Case) -> tuple:
    fields = case.fields()
    for name in ("seq_len", "kv_seq_len"):
        fields.pop(name)
    return tuple(sorted(fields.items()))


def fmt_duration(seconds: float) -> str:
    """Seconds as '42 s', '3.5 min' or '2.1 h'."""
    if seconds < 90:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
