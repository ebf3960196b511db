"""Which kernels ran: one call of the timed function under torch.profiler, outside the timed samples.

The profiled call is made after the samples (it never changes them; its cost is setup). On CUDA each kernel's device
time is read (Kineto's kernel events); on CPU each op's self time. Every name is kept, sorted by time, with its share
of the call, so a record says what ran, not only what was asked for. Where the profiler cannot run, `kernels` is
None and `reason` says why: never an empty list that would read as "nothing ran".
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from attnbench.core import policy

# The declared kernels' share of the call under which a record is flagged `overhead` (docs/results.md, "Which kernel
# ran"): a fused kernel's own call spends well over 90% in it (the CPU flash kernel: 91-95%), so 80% leaves room for
# the op's dispatch and output allocation and is crossed only when a fifth of the call is other work.
OVERHEAD_SHARE = 0.80
# The share of a call's device time that another backend's declared kernels must take, together, for the record to
# be `wrong_kernel`, per device (docs/results.md, "Which kernel ran"): the precision a record's median is measured to
# on that device (attnbench.core.policy: ±10% on a CPU, ±1% on a GPU). Under it, the record's time is the backend's
# kernel's to within what the record claims anyway, so a crumb (a 0.2% GEMM inside a fused GPU call) is listed in
# `kernels` and decides nothing; at or over it, the time is measurably another kernel's. What the committed CPU
# profiles show (reports/cpu-Intel-Xeon-2core-quick, -long, -frameworks, -fp8: 198 profiled calls): no other
# backend's kernel ran in any fused call, while a fallback of either pass of a fwd+bwd takes at least its share of
# the FLOPs, 29% for the forward: far over either share.
FOREIGN_SHARE = {name: device.precision for name, device in policy.DEVICES.items()}
# Names of the work a user of the kernel would not count as attention: what the overhead's reason calls it.
OTHER_WORK = (("copy", ("copy_", "contiguous", "clone", "Memcpy", "memcpy", "to_copy")),
              ("transpose", ("transpose", "permute")),
              ("mask construction", ("where", "isneginf", "tril", "triu", "logical", "arange", "fill_", "ge", "le")),
              ("allocation", ("empty", "zeros", "Memset", "memset")))
# How a trace names each profiled call (a torch.profiler range around it); never counted as a kernel.
LABEL_PREFIX = "attnbench: "
PROFILED_CALL = LABEL_PREFIX + "profiled call"
TORCH_PROFILER = "torch.profiler"


@dataclass(frozen=True)
class Kernel:
    """One kernel (CUDA) or op (CPU) of the profiled call: its calls, its time and its share of the call's time."""

    name: str
    calls: int
    time_ms: float
    share: float

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "calls": self.calls, "time_ms": self.time_ms, "share": round(self.share, 4)}


@dataclass(frozen=True)
class Profile:
    """What the profiler saw in one call: the kernels sorted by time (None with `reason` where it could not see),
    what profiling cost (`profile_ms`, counted as setup), which profiler saw them (`source`: torch.profiler, or a
    runtime's own), and what else that profiler's call measured for the record's extra (`extra`)."""

    kernels: tuple[Kernel, ...] | None
    reason: str | None = None
    profile_ms: float = 0.0
    source: str = TORCH_PROFILER
    extra: dict[str, Any] = field(default_factory=dict)
    foreign: str | None = None  # CUDA kernels of the call that ran off the timed stream (foreign_streams)

    def names(self) -> list[str]:
        return [k.name for k in self.kernels or ()]


def profile_call(fn: Callable[[], object], device: str, trace_path: str | None = None,
                 sync: Callable[[], None] | None = None, label: str = PROFILED_CALL) -> Profile:
    """`fn` called once under torch.profiler (CPU, and CUDA where `device` is CUDA), inside a range named `label`;
    the trace written to `trace_path` (Chrome's format) when given."""
    start = time.perf_counter()
    try:
        from torch.profiler import ProfilerActivity, profile, record_function

        activities = [ProfilerActivity.CPU]
        if device == "cuda":
            activities.append(ProfilerActivity.CUDA)
        with kineto_banner_dropped(), profile(activities=activities) as prof:
            with record_function(label):
                if device == "cuda":
                    _mark_stream()
                fn()
                if sync is not None:
                    sync()
        kernels = kernels_of(prof.key_averages(), device)
        foreign = foreign_streams(prof.profiler.kineto_results.events()) if device == "cuda" else None
        if trace_path is not None:
            prof.export_chrome_trace(trace_path)
    except Exception as exc:  # noqa: BLE001 - a profiler that cannot run is a reason, never a failed measurement
        return Profile(None, f"the profiler could not run: {type(exc).__name__}: {exc}".splitlines()[0],
                       (time.perf_counter() - start) * 1e3)
    ms = (time.perf_counter() - start) * 1e3
    if not kernels:
        return Profile(None, f"the profiler saw no {'CUDA kernel' if device == 'cuda' else 'op'} in the call", ms)
    return Profile(kernels, None, ms, foreign=foreign)


# The marker launched on the timed (current) stream right before the profiled call: PyTorch's spin kernel
# (torch.cuda._sleep), whose stream is the one the timer's events are recorded on.
MARKER = "spin_kernel"


def _mark_stream() -> None:
    import torch

    torch.cuda._sleep(1)


def foreign_streams(events: Any) -> str | None:
    """Which CUDA kernels of the profiled call ran on a stream other than the marker's (Kineto's device events:
    `device_resource_id()` is a kernel's stream): the timer's events bracket the timed stream only, so work elsewhere
    is not in the time. None when every kernel shares the marker's stream, or the marker was not seen."""
    kernels = [(e.name(), e.device_resource_id()) for e in events if str(e.device_type()).endswith("CUDA")]
    timed = next((stream for name, stream in kernels if MARKER in name), None)
    if timed is None:
        return None
    off = sorted({name for name, stream in kernels if stream != timed})
    if not off:
        return None
    return (f"{len(off)} kernel(s) ran off the timed stream ({', '.join(off[:3])}{'...' if len(off) > 3 else ''}): "
            "their work is not in the timed window")


def warm_profiler() -> None:
    """Profile nothing once, on the CPU: torch.profiler's first use in a process imports what it needs
    (torch._inductor's config and all it imports: about 2.5 s on a 2-core VM), and a worker makes that first use
    before its first measurement, so the cost is the worker's start, not inside a measurement's --timeout."""
    profile_call(lambda: None, "cpu")


def runtime_profile(profiler: Callable[[], Profile]) -> Profile:
    """A runtime's own profiler of one call (a backend's Prepared.profile: ONNX Runtime's session profiling,
    OpenVINO's performance counters, JAX's profiler), timed as setup; one that raises, or sees nothing, is a reason."""
    start = time.perf_counter()
    try:
        profile = profiler()
    except Exception as exc:  # noqa: BLE001 - a profiler that cannot run is a reason, never a failed measurement
        profile = Profile(None, f"the runtime's profiler could not run: {type(exc).__name__}: {exc}".splitlines()[0])
    ms = (time.perf_counter() - start) * 1e3
    if not profile.kernels:
        return replace(profile, kernels=None, reason=profile.reason or f"{profile.source} saw no kernel in the call",
                       profile_ms=ms)
    return replace(profile, profile_ms=ms)


def kernels_of(events: Any, device: str) -> tuple[Kernel, ...]:
    """Profiler averages (torch.profiler's key_averages()) as kernels sorted by time: device kernels' device time on
    CUDA, ops' self CPU time on CPU."""
    rows: list[tuple[str, int, float]] = []
    for event in events:
        if device == "cuda":
            if str(getattr(event, "device_type", "")).split(".")[-1] != "CUDA":
                continue
            us = float(getattr(event, "self_device_time_total", 0.0) or getattr(event, "device_time_total", 0.0))
        else:
            us = float(event.self_cpu_time_total)
        # Neither the call's own range nor the marker on the timed stream is a kernel of the call.
        if us > 0 and not str(event.key).startswith(LABEL_PREFIX) and MARKER not in str(event.key):
            rows.append((str(event.key), int(event.count), us / 1e3))
    return kernels_from(rows)


def join_traces(path: Path, parts: list[Path]) -> None:
    """One Chrome trace at `path` holding every event of `parts` (traces of one process's profiler sessions, which
    share its clock), written whole under a temporary name and renamed, so a kill never leaves half a trace; the
    parts are removed."""
    joined: dict[str, Any] | None = None
    for part in parts:
        trace = json.loads(part.read_text())
        if joined is None:
            joined = trace
        else:
            joined["traceEvents"] = [*joined.get("traceEvents", []), *trace.get("traceEvents", [])]
    if joined is not None:
        joined["traceName"] = path.name  # the profiler names the part it wrote, by its full path
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(joined))
    os.replace(tmp, path)
    for part in parts:
        part.unlink(missing_ok=True)


def kernels_from(rows: list[tuple[str, int, float]]) -> tuple[Kernel, ...]:
    """(name, calls, time_ms) rows as kernels sorted by time, each with its share of the total."""
    total = sum(ms for _, _, ms in rows)
    if total <= 0:
        return ()
    ordered = sorted(rows, key=lambda row: (-row[2], row[0]))
    return tuple(Kernel(name, calls, ms, ms / total) for name, calls, ms in ordered)


def matches(name: str, patterns: tuple[str, ...]) -> bool:
    """Whether a kernel's name matches any of a backend's declared patterns (regular expressions, searched)."""
    return any(re.search(pattern, name) for pattern in patterns)


def attention_share(kernels: tuple[Kernel, ...], patterns: tuple[str, ...]) -> float:
    """The share of the call spent in kernels matching `patterns`."""
    return sum(k.share for k in kernels if matches(k.name, patterns))


def other_work(kernels: tuple[Kernel, ...], patterns: tuple[str, ...], most: int = 3) -> str:
    """What the call spent its time on besides the declared kernels: the largest others, each with what it is."""
    parts = []
    for kernel in [k for k in kernels if not matches(k.name, patterns)][:most]:
        kind = next((word for word, names in OTHER_WORK if any(n in kernel.name for n in names)), None)
        parts.append(f"{kernel.name} {kernel.share:.0%}" + (f" ({kind})" if kind else ""))
    return ", ".join(parts)


def replay_lost(eager: tuple[Kernel, ...], replay: tuple[Kernel, ...], calls_per_replay: int) -> str | None:
    """Why a graph replay is not the eager call (kernels of one eager call vs one replay of `calls_per_replay`
    captured calls); None when every eager kernel ran as often per call in the replay."""
    seen = {k.name: k.calls for k in replay}
    kept = sum(1 for k in eager if seen.get(k.name, 0) >= k.calls * calls_per_replay)
    if kept == len(eager):
        return None
    lost = [k.name for k in eager if seen.get(k.name, 0) < k.calls * calls_per_replay]
    return f"graph replay ran {kept} of {len(eager)} kernels of the eager call (lost: {', '.join(lost)})"


@dataclass(frozen=True)
class KernelVerdict:
    """What the profiled call says about the backend: `wrong_kernel` (a reason) when none of its declared kernels ran
    or another backend's took at least FOREIGN_SHARE of the call; `overhead` (what the rest was) when its kernels are
    under OVERHEAD_SHARE of the call."""

    attention_share: float | None
    wrong_kernel: str | None = None
    overhead: str | None = None


def foreign_share(kernels: tuple[Kernel, ...], own: tuple[str, ...], others: dict[str, tuple[str, ...]],
                  backend: str) -> tuple[str, float, list[Kernel]] | None:
    """The other backend whose declared kernels took the largest share of the call (kernels that are also the
    backend's own left out): its name, that share and its kernels; None when no other backend's kernel ran."""
    found: dict[str, list[Kernel]] = {}
    for name, patterns in others.items():
        if name != backend:
            ran = [k for k in kernels if not matches(k.name, own) and matches(k.name, patterns)]
            if ran:
                found[name] = ran
    if not found:
        return None
    name = max(sorted(found), key=lambda n: sum(k.share for k in found[n]))
    return name, sum(k.share for k in found[name]), found[name]


def judge_kernels(kernels: tuple[Kernel, ...], own: tuple[str, ...], others: dict[str, tuple[str, ...]],
                  backend: str, device: str) -> KernelVerdict:
    """The verdict on a profiled call of `backend` on `device`, whose declared kernel patterns are `own`; `others`
    holds every other backend's. A backend that declares none gets no verdict (attention_share None)."""
    if not own:
        return KernelVerdict(None)
    share = attention_share(kernels, own)
    ran = ", ".join(f"{k.name} {k.share:.0%}" for k in kernels[:3])
    if not any(matches(k.name, own) for k in kernels):
        return KernelVerdict(share, f"none of {backend}'s declared kernels ran; ran {ran}")
    foreign = foreign_share(kernels, own, others, backend)
    least = FOREIGN_SHARE.get(device, FOREIGN_SHARE["cuda"])  # an unknown device is held to a GPU's, as policy does
    if foreign is not None and foreign[1] >= least:
        name, taken, theirs = foreign
        return KernelVerdict(share, f"{theirs[0].name} ({name}'s kernel{'s' if len(theirs) > 1 else ''}: "
                                    f"{taken:.0%} of the call, at least {least:.0%}) ran under {backend}; ran {ran}")
    if share < OVERHEAD_SHARE:
        return KernelVerdict(share, overhead=f"declared kernels {share:.0%} of the call (under {OVERHEAD_SHARE:.0%}); "
                                             f"the rest: {other_work(kernels, own)}")
    return KernelVerdict(share)


@contextlib.contextmanager
def kineto_banner_dropped() -> Iterator[None]:
    """The profiler's start and stop lines dropped from stderr (torch 2.13's Kineto writes
    "USDT:<time> <pid> SyncActivityProfilerHandler.cpp:52] profiler_start" there, twice per profiled call, into every
    run's progress), anything else written meanwhile passed on. File descriptor 2 goes to a temporary file while
    the block runs."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real stderr (a test's capture): nothing to drop
        yield
        return
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            rest = [line for line in caught.read().splitlines(keepends=True)
                    if not (line.startswith(b"USDT:") and b"ActivityProfilerHandler" in line)]
            if rest:
                os.write(2, b"".join(rest))

