"""The profiled call of a measurement: which kernels ran, judged against what the backend declares, and whether a
CUDA graph's replay ran the eager call's kernels. Made after the samples, so they never see the profiler; its time
is setup ("profile", and with --trace "trace": the traced sample and the trace written)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnbench.records.folder import RunFolder
from attnbench.records.parts import Kernels
from attnbench.timing.profile import (
    LABEL_PREFIX,
    Profile,
    join_traces,
    judge_kernels,
    profile_call,
    replay_lost,
    runtime_profile,
)
from attnbench.timing.timers import Timer

if TYPE_CHECKING:
    from attnbench.backends.base import Backend
    from attnbench.core.case import Case


# The record's Kernels part but the backend's kernel, which `prepare` names: the fields the profiled call fills.
KernelFields = dataclasses.make_dataclass(
    "KernelFields", [(f.name, f.type, field(default=None)) for f in dataclasses.fields(Kernels) if f.name != "kernel"],
    frozen=True)


@dataclass(frozen=True)
class Profiled:
    fields: KernelFields
    wrong_kernel: str | None
    profile_ms: float
    extra: dict[str, Any] = field(default_factory=dict)
    foreign: str | None = None  # kernels off the timed stream
    trace_ms: float = 0.0


def trace_file(directory: Path, case: Case, backend: Backend) -> Path:
    return RunFolder(directory).traces / f"{case.case_id}-{backend.name}.json"


def profiled(fn: Callable[[], object], case: Case, backend: Backend, timer: Timer,
             others: dict[str, tuple[str, ...]], trace_dir: Path | None = None,
             runtime: Callable[[], Profile] | None = None) -> Profiled:
    """`runtime`: the backend's own profiler, for work outside PyTorch that torch.profiler cannot see."""
    if runtime is not None:
        profile = runtime_profile(runtime)
        fields, wrong = kernel_fields(profile, case, backend, others)
        return Profiled(fields, wrong, profile.profile_ms, dict(profile.extra))
    sync = _sync(case.device)
    trace = trace_file(trace_dir, case, backend) if trace_dir is not None else None
    parts = [] if trace is None else [trace.with_name(f"{trace.name}.{part}.part") for part in ("call", "sample")]
    if trace is not None:
        trace.parent.mkdir(parents=True, exist_ok=True)
    profile = profile_call(fn, case.device, str(parts[0]) if parts else None, sync)
    fields, wrong = kernel_fields(profile, case, backend, others)
    spent, traced = profile.profile_ms - profile.export_ms, profile.export_ms
    if profile.kernels is None:
        for part in parts:
            part.unlink(missing_ok=True)
        return Profiled(fields, None, spent, foreign=profile.foreign, trace_ms=traced)
    replay = timer.replay
    if replay is not None:
        run_graph, calls = replay
        graph = profile_call(run_graph, case.device, str(parts[1]) if parts else None, sync,
                             f"{LABEL_PREFIX}timed sample ({timer.name}: one replay of "
                             f"{calls} calls)")
        spent, traced = spent + graph.profile_ms - graph.export_ms, traced + graph.export_ms
        timer.replay = None  # frees the graph's memory
        if graph.kernels is None:
            wrong = wrong or f"the graph replay could not be profiled ({graph.reason}): its time is not the call's"
        else:
            lost = replay_lost(_device_only(profile), graph.kernels, calls)
            wrong = wrong or lost
    elif trace is not None:  # one sample made as the timer made them
        sample = profile_call(timer.one_sample(fn), case.device, str(parts[1]), sync,
                              f"{LABEL_PREFIX}timed sample ({timer.name})")
        traced += sample.profile_ms
    if trace is not None:
        joined = time.perf_counter()
        written = [part for part in parts if part.exists()]
        if written:
            join_traces(trace, written)
            fields = dataclasses.replace(fields, trace=f"traces/{trace.name}")
        traced += (time.perf_counter() - joined) * 1e3
    return Profiled(fields, wrong, spent, foreign=profile.foreign, trace_ms=traced)


def kernel_fields(profile: Profile, case: Case, backend: Backend, others: dict[str, tuple[str, ...]]
                  ) -> tuple[KernelFields, str | None]:
    """Judged against the backend's declared kernels."""
    if profile.kernels is None:
        return KernelFields(kernels_reason=profile.reason), None
    declared = backend.capabilities.attention_kernels(case.device, case.mode)
    verdict = judge_kernels(profile.kernels, declared, others, backend.name, case.device)
    share = None if verdict.attention_share is None else round(verdict.attention_share, 4)
    return KernelFields([k.to_dict() for k in profile.kernels], None, profile.source, share,
                        verdict.overhead or None), verdict.wrong_kernel


def _device_only(profile: Profile) -> tuple:
    return profile.kernels or ()


def _sync(device: str) -> Callable[[], None] | None:
    if device != "cuda":
        return None
    import torch

    return torch.cuda.synchronize
