"""The options `run` and `submit` share, declared once (asv's common_args): each is a type a command annotates
a parameter with, and `run_options` turns their values into the one RunOptions both commands hand on."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from attnbench.run.options import RunOptions
    from attnbench.run.shard import Shard

Backends = Annotated[list[str], typer.Option("--backend", help="Run only these backends (repeatable).")]
Plugins = Annotated[list[str], typer.Option("--plugin", help="Extra backend, as module:attr.")]
Isolate = Annotated[bool | None, typer.Option(
    "--isolate/--no-isolate", help="Measure in a worker process that may crash (default: on for CUDA).")]
Timeout = Annotated[float | None, typer.Option(
    "--timeout", min=0.001, metavar="SECONDS",
    help="Kill a measurement after this long: `timeout` (turns --isolate on).")]
OomPruning = Annotated[bool, typer.Option(
    "--oom-pruning/--no-oom-pruning",
    help="After an oom, skip longer sequences of that backend and case group.")]
PeakTflops = Annotated[float | None, typer.Option(
    "--peak-tflops", min=1e-9, metavar="TFLOPS",
    help="Compute roof for percent_of_peak (default: datasheet table).")]
PeakBandwidth = Annotated[float | None, typer.Option(
    "--peak-bandwidth", min=1e-9, metavar="GBS",
    help="Memory roof in GB/s for decode-like cases' percent_of_peak.")]
HistoryDb = Annotated[Path | None, typer.Option(
    "--db", metavar="FILE", help="The history store (default $XDG_DATA_HOME/attnbench/history.sqlite, else "
                                 "~/.local/share/attnbench/history.sqlite).")]
# The filters `history show` and `history plot` share.
HistoryBackends = Annotated[list[str], typer.Option("--backend", help="Only this backend (repeatable).")]
HistoryCases = Annotated[list[str], typer.Option(
    "--case", help="Only cases whose id contains this, or matches it as a glob (*-causal-fwd) (repeatable).")]
HistoryGpus = Annotated[list[str], typer.Option(
    "--gpu", help="Only GPUs (or CPUs) whose name contains this, or matches it as a glob (repeatable).")]
# `list` and `doctor`: ask every backend again instead of reusing this installation's answers
# (attnbench.cli.probes).
FreshProbes = Annotated[bool, typer.Option(
    "--fresh",
    help="Ask every backend again (import its library) instead of reusing this installation's answers.")]
CompileWorkers = Annotated[int | None, typer.Option(
    "--compile-workers", min=0, metavar="N",
    help="Compile torch.compile graphs (flex) and FlashInfer's JIT modules ahead in N processes before the "
         "first measurement; 0: compile each in its measurement (default: one per core but one, "
         "at most 16; 0 on 2 cores).")]
CompileTimeout = Annotated[float | None, typer.Option(
    "--compile-timeout", min=1, metavar="SECONDS",
    help="Each compile ahead (a flex graph, FlashInfer's JIT modules) may take this long; past it its "
         "process is killed and its measurements are recorded skipped with the reason, "
         "never timed out (default 900).")]
Timer = Annotated[str, typer.Option(
    "--timer", metavar="auto|cuda-graph",
    help="cuda-graph: replay N forward calls in one CUDA graph (no launch overhead).")]
Deterministic = Annotated[bool, typer.Option(
    "--deterministic",
    help="Deterministic kernels only, as the suite's `deterministic: true` (others are skipped).")]
Trace = Annotated[bool, typer.Option(
    "--trace",
    help="Write one Chrome trace per measurement (its profiled call) to traces/<case_id>-<backend>.json.")]
Report = Annotated[bool, typer.Option(
    "--report/--no-report",
    help="Render report.html and summary.md after the run (`attnbench report` renders them "
         "later).")]


def run_options(*, backend: list[str] | None, device: str | None, plugin: list[str] | None,
                isolate: bool | None, timeout: float | None, oom_pruning: bool, peak_tflops: float | None,
                peak_bandwidth: float | None, timer: str, deterministic: bool,
                devices: tuple[int, ...] | None = None, cache_dir: Path | None = None,
                shard: Shard | None = None, resume: bool = False, force: bool = False,
                compile_workers: int | None = None, compile_timeout: float | None = None,
                trace: bool = False) -> RunOptions:
    """The shared options' values, by the names of the command's parameters, as the RunOptions a run (or each
    shard of a submission) is made with."""
    from attnbench.run.options import RunOptions

    return RunOptions(backends=tuple(backend or ()), device=device, plugins=tuple(plugin or ()),
                      isolate=isolate, timeout_s=timeout, oom_pruning=oom_pruning, devices=devices,
                      peak_tflops=peak_tflops, peak_bandwidth_gbs=peak_bandwidth, timer=timer,
                      cache_dir=cache_dir, shard=shard, resume=resume, force=force,
                      deterministic=deterministic, compile_workers=compile_workers,
                      compile_timeout_s=compile_timeout, trace=trace)
