"""Which kernels ran: one call under torch.profiler after the samples; where it cannot run, `kernels` is None with
a reason, never an empty list."""

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
from attnbench.records.files import write_text_atomic

OVERHEAD_SHARE = policy.OVERHEAD_SHARE
OTHER_WORK = (("copy", ("copy_", "contiguous", "clone", "Memcpy", "memcpy", "to_copy")),
              ("transpose", ("transpose", "permute")),
              ("mask construction", ("where", "isneginf", "tril", "triu", "logical", "arange", "fill_", "ge", "le")),
              ("allocation", ("empty", "zeros", "Memset", "memset")))
LABEL_PREFIX = "attnbench: "
PROFILED_CALL = LABEL_PREFIX + "profiled call"
TORCH_PROFILER = "torch.profiler"


@dataclass(frozen=True)
class Kernel:
    name: str
    calls: int
    time_ms: float
    share: float

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "calls": self.calls, "time_ms": self.time_ms, "share": round(self.share, 4)}


@dataclass(frozen=True)
class Profile:
    """Kernels sorted by time (None with `reason`), profiling's cost (setup), and the profiler (`source`)."""

    kernels: tuple[Kernel, ...] | None
    reason: str | None = None
    profile_ms: float = 0.0  # the trace's export included
    source: str = TORCH_PROFILER
    extra: dict[str, Any] = field(default_factory=dict)
    foreign: str | None = None
    export_ms: float = 0.0  # the Chrome trace written

    def names(self) -> list[str]:
        return [k.name for k in self.kernels or ()]


def profile_call(fn: Callable[[], object], device: str, trace_path: str | None = None,
                 sync: Callable[[], None] | None = None, label: str = PROFILED_CALL) -> Profile:
    """The Chrome trace to `trace_path` when given. The session is the Kineto profile that torch.profiler.profile
    opens, made directly: the wrapper first asks `hasattr(torch, "_inductor")`, which imports Inductor and Dynamo
    (1.4 s on a CPU) in a process that compiles nothing."""
    start = time.perf_counter()
    try:
        from torch.autograd.profiler import profile, record_function

        with kineto_banner_dropped(), profile(use_cpu=True, use_device="cuda" if device == "cuda" else None,
                                              use_kineto=True) as prof:
            with record_function(label):
                if device == "cuda":
                    _mark_stream()
                fn()
                if sync is not None:
                    sync()
        kernels = kernels_of(prof.key_averages(), device)
        foreign = foreign_streams(prof.kineto_results.events()) if device == "cuda" else None
        export_ms = 0.0
        if trace_path is not None:
            exported = time.perf_counter()
            prof.export_chrome_trace(trace_path)
            export_ms = (time.perf_counter() - exported) * 1e3
    except Exception as exc:  # noqa: BLE001 - a profiler that cannot run is a reason, never a failure
        return Profile(None, f"the profiler could not run: {type(exc).__name__}: {exc}".splitlines()[0],
                       (time.perf_counter() - start) * 1e3)
    ms = (time.perf_counter() - start) * 1e3
    if not kernels:
        return Profile(None, f"the profiler saw no {'CUDA kernel' if device == 'cuda' else 'op'} in the call", ms,
                       export_ms=export_ms)
    return Profile(kernels, None, ms, foreign=foreign, export_ms=export_ms)


# torch.cuda._sleep, launched on the timed stream right before the call
MARKER = "spin_kernel"


def _mark_stream() -> None:
    import torch

    torch.cuda._sleep(1)


def foreign_streams(events: Any) -> str | None:
    """CUDA kernels off the marker's stream, which the timer's events do not bracket."""
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
    """The profiler's first session (Kineto's start; CUPTI's on a GPU): at a worker's start, not inside a
    --timeout."""
    profile_call(lambda: None, "cpu")


def runtime_profile(profiler: Callable[[], Profile]) -> Profile:
    """A runtime's own profiler (Prepared.profile), timed as setup."""
    start = time.perf_counter()
    try:
        profile = profiler()
    except Exception as exc:  # noqa: BLE001 - a profiler that cannot run is a reason, never a failure
        profile = Profile(None, f"the runtime's profiler could not run: {type(exc).__name__}: {exc}".splitlines()[0])
    ms = (time.perf_counter() - start) * 1e3
    if not profile.kernels:
        return replace(profile, kernels=None, reason=profile.reason or f"{profile.source} saw no kernel in the call",
                       profile_ms=ms)
    return replace(profile, profile_ms=ms)


def kernels_of(events: Any, device: str) -> tuple[Kernel, ...]:
    """Device time on CUDA, self CPU time on CPU."""
    rows: list[tuple[str, int, float]] = []
    for event in events:
        if device == "cuda":
            if str(getattr(event, "device_type", "")).split(".")[-1] != "CUDA":
                continue
            us = float(getattr(event, "self_device_time_total", 0.0) or getattr(event, "device_time_total", 0.0))
        else:
            us = float(event.self_cpu_time_total)
        if us > 0 and not str(event.key).startswith(LABEL_PREFIX) and MARKER not in str(event.key):
            rows.append((str(event.key), int(event.count), us / 1e3))
    return kernels_from(rows)


def join_traces(path: Path, parts: list[Path]) -> None:
    """One process's traces (one clock) joined and written atomically; the parts removed."""
    joined: dict[str, Any] | None = None
    for part in parts:
        trace = json.loads(part.read_text())
        if joined is None:
            joined = trace
        else:
            joined["traceEvents"] = [*joined.get("traceEvents", []), *trace.get("traceEvents", [])]
    if joined is not None:
        joined["traceName"] = path.name
    write_text_atomic(path, json.dumps(joined))
    for part in parts:
        part.unlink(missing_ok=True)


def kernels_from(rows: list[tuple[str, int, float]]) -> tuple[Kernel, ...]:
    total = sum(ms for _, _, ms in rows)
    if total <= 0:
        return ()
    ordered = sorted(rows, key=lambda row: (-row[2], row[0]))
    return tuple(Kernel(name, calls, ms, ms / total) for name, calls, ms in ordered)


def matches(name: str, patterns: tuple[str, ...]) -> bool:
    """Regular expressions, searched."""
    return any(re.search(pattern, name) for pattern in patterns)


def attention_share(kernels: tuple[Kernel, ...], patterns: tuple[str, ...]) -> float:
    return sum(k.share for k in kernels if matches(k.name, patterns))


def other_work(kernels: tuple[Kernel, ...], patterns: tuple[str, ...], most: int = 3) -> str:
    parts = []
    for kernel in [k for k in kernels if not matches(k.name, patterns)][:most]:
        kind = next((word for word, names in OTHER_WORK if any(n in kernel.name for n in names)), None)
        parts.append(f"{kernel.name} {kernel.share:.0%}" + (f" ({kind})" if kind else ""))
    return ", ".join(parts)


def replay_lost(eager: tuple[Kernel, ...], replay: tuple[Kernel, ...], calls_per_replay: int) -> str | None:
    """None when every eager kernel ran as often per captured call."""
    seen = {k.name: k.calls for k in replay}
    kept = sum(1 for k in eager if seen.get(k.name, 0) >= k.calls * calls_per_replay)
    if kept == len(eager):
        return None
    lost = [k.name for k in eager if seen.get(k.name, 0) < k.calls * calls_per_replay]
    return f"graph replay ran {kept} of {len(eager)} kernels of the eager call (lost: {', '.join(lost)})"


@dataclass(frozen=True)
class KernelVerdict:
    attention_share: float | None
    wrong_kernel: str | None = None
    overhead: str | None = None


def foreign_share(kernels: tuple[Kernel, ...], own: tuple[str, ...], others: dict[str, tuple[str, ...]],
                  backend: str) -> tuple[str, float, list[Kernel]] | None:
    """The other backend whose kernels (not also `own`) took the largest share, or None."""
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
    """No declared kernels: no verdict."""
    if not own:
        return KernelVerdict(None)
    share = attention_share(kernels, own)
    ran = ", ".join(f"{k.name} {k.share:.0%}" for k in kernels[:3])
    if not any(matches(k.name, own) for k in kernels):
        return KernelVerdict(share, f"none of {backend}'s declared kernels ran; ran {ran}")
    foreign = foreign_share(kernels, own, others, backend)
    least = policy.device(device).precision  # others' kernels at or over it: `wrong_kernel`
    if foreign is not None and foreign[1] >= least:
        name, taken, theirs = foreign
        return KernelVerdict(share, f"{theirs[0].name} ({name}'s kernel{'s' if len(theirs) > 1 else ''}: "
                                    f"{taken:.0%} of the call, at least {least:.0%}) ran under {backend}; ran {ran}")
    if share < OVERHEAD_SHARE:
        return KernelVerdict(share, overhead=f"declared kernels {share:.0%} of the call (under "
                                             f"{OVERHEAD_SHARE:.0%}); the rest: {other_work(kernels, own)}")
    return KernelVerdict(share)


@contextlib.contextmanager
def kineto_banner_dropped() -> Iterator[None]:
    """Kineto's "USDT:" start and stop lines dropped from fd 2; other output passed on."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real stderr
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

