"""The choices of a run, shared by `run` and `submit`, and the one place they become a command line again.

`run` makes a RunOptions from its flags; `submit` makes one for its shards; a stopped run prints the command that
finishes it, and the SLURM scripts run each shard, both from `to_argv()`: no command line is rebuilt by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from attnbench.core.errors import AttnbenchError

if TYPE_CHECKING:
    from attnbench.run.shard import Shard


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How a suite is run: which backends on which device, in or out of process, with which limits and roofs."""

    backends: tuple[str, ...] = ()  # empty: the suite's (or every registered) backend
    device: str | None = None  # None: the suite's device
    plugins: tuple[str, ...] = ()
    isolate: bool | None = None  # None: on for CUDA runs and whenever there is a time limit
    timeout_s: float | None = None  # None: the suite's timing.timeout_s
    oom_pruning: bool = True
    devices: tuple[int, ...] | None = None  # one worker per GPU index, sharing one queue of cases
    peak_tflops: float | None = None  # roofs for percent_of_peak, in place of the datasheet table
    peak_bandwidth_gbs: float | None = None
    timer: str = "auto"  # "cuda-graph": CudaGraphTimer in place of CUDA events
    cache_dir: Path | None = None  # torch.compile's caches and attnbench's calibration; None: the default
    shard: Shard | None = None
    resume: bool = False  # finish the run already in the output directory
    force: bool = False  # with resume: continue even where env.json differs from this machine
    deterministic: bool = False  # deterministic kernels only, whatever the suite says (attnbench.verify.determinism)
    compile_workers: int | None = None  # processes compiling ahead (attnbench.run.precompile); None: its default
    trace: bool = False  # one Chrome trace per measurement under traces/ (attnbench.run.profiled)

    def __post_init__(self) -> None:
        """The rules between the options themselves; those that need the suite are the session's."""
        if self.force and not self.resume:
            raise AttnbenchError("--force only applies with --resume (it relaxes the environment check); "
                                 "attnbench never overwrites results: choose a new --out")
        if self.devices is not None and self.isolate is False:
            raise AttnbenchError("--devices: each GPU gets its own worker process; drop --no-isolate")

    def to_argv(self) -> list[str]:
        """The `attnbench run` options that repeat these choices, defaults left out (no suite, no --out/--resume)."""
        words: list[str] = []
        for name in self.backends:
            words += ["--backend", name]
        for spec in self.plugins:
            words += ["--plugin", spec]
        if self.device:
            words += ["--device", self.device]
        if self.isolate is not None:
            words.append("--isolate" if self.isolate else "--no-isolate")
        if self.timeout_s is not None:
            words += ["--timeout", f"{self.timeout_s:g}"]
        if not self.oom_pruning:
            words.append("--no-oom-pruning")
        if self.devices is not None:
            words += ["--devices", ",".join(map(str, self.devices))]
        if self.peak_tflops is not None:
            words += ["--peak-tflops", f"{self.peak_tflops:g}"]
        if self.peak_bandwidth_gbs is not None:
            words += ["--peak-bandwidth", f"{self.peak_bandwidth_gbs:g}"]
        if self.timer != "auto":
            words += ["--timer", self.timer]
        if self.deterministic:
            words.append("--deterministic")
        if self.shard is not None:
            words += ["--shard", str(self.shard)]
        if self.force:
            words.append("--force")
        if self.compile_workers is not None:
            words += ["--compile-workers", str(self.compile_workers)]
        if self.trace:
            words.append("--trace")
        if self.cache_dir is not None:  # this machine's compile cache: a resumed run loads what was compiled
            words += ["--cache-dir", str(self.cache_dir)]
        return words

    def for_shards(self) -> RunOptions:
        """These choices as each SLURM shard takes them: the shard, resumption and cache are the script's own."""
        return replace(self, shard=None, resume=False, force=False, cache_dir=None, devices=None)


def resume_command(suite: Path | str, directory: Path, options: RunOptions) -> str:
    """The exact `attnbench run` line that finishes an interrupted run with the same choices."""
    import shlex

    return shlex.join(["attnbench", "run", str(suite), "--resume", str(directory),
                       *replace(options, resume=False, force=False).to_argv()])
