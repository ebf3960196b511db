"""The choices of a run, shared by `run` and `submit`; `to_argv()` is the one place they become a command line again
(a stopped run's resume command, each SLURM shard's)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnbench.core.errors import AttnbenchError

if TYPE_CHECKING:
    from attnbench.run.shard import Shard


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    backends: tuple[str, ...] = ()  # empty: the suite's (or every registered) backend
    device: str | None = None  # None: the suite's device
    plugins: tuple[str, ...] = ()
    isolate: bool | None = None  # None: on for CUDA and with a time limit
    timeout_s: float | None = None  # None: the suite's
    oom_pruning: bool = True
    devices: tuple[int, ...] | None = None  # one worker per GPU index, one queue of cases
    peak_tflops: float | None = None  # in place of the datasheet table
    peak_bandwidth_gbs: float | None = None
    timer: str = "auto"
    cache_dir: Path | None = None  # compile caches and calibration; None: the default
    shard: Shard | None = None
    resume: bool = False
    force: bool = False  # with resume: continue where env.json differs from this machine
    deterministic: bool = False
    compile_workers: int | None = None  # None: attnbench.run.precompile's default
    compile_timeout_s: float | None = None  # None: precompile's default
    trace: bool = False

    def __post_init__(self) -> None:
        if self.force and not self.resume:
            raise AttnbenchError("--force only applies with --resume (it relaxes the environment check); "
                                 "attnbench never overwrites results: choose a new --out")
        if self.devices is not None and self.isolate is False:
            raise AttnbenchError("--devices: each GPU gets its own worker process; drop --no-isolate")

    def to_argv(self) -> list[str]:
        """The `attnbench run` options repeating these choices, defaults left out (no suite, --out or --resume)."""
        return [word for name, words in ARGV for word in words(getattr(self, name))]

    def for_shards(self) -> RunOptions:
        """As each SLURM shard takes them: shard, resumption and cache are the script's own."""
        return replace(self, shard=None, resume=False, force=False, cache_dir=None, devices=None)


def _each(flag: str) -> Callable[[tuple[str, ...]], list[str]]:
    return lambda values: [word for value in values for word in (flag, value)]


def _valued(flag: str, render: Callable[[Any], str] = str, default: object = None) -> Callable[[Any], list[str]]:
    return lambda value: [] if value == default else [flag, render(value)]


def _switch(flag: str, on: bool = True) -> Callable[[bool], list[str]]:
    return lambda value: [flag] if value == on else []


def _number(value: float) -> str:
    return f"{value:g}"


ARGV: tuple[tuple[str, Callable[[Any], list[str]]], ...] = (
    ("backends", _each("--backend")),
    ("plugins", _each("--plugin")),
    ("device", lambda device: ["--device", device] if device else []),
    ("isolate", lambda isolate: [] if isolate is None else ["--isolate" if isolate else "--no-isolate"]),
    ("timeout_s", _valued("--timeout", _number)),
    ("oom_pruning", _switch("--no-oom-pruning", on=False)),
    ("devices", _valued("--devices", lambda devices: ",".join(map(str, devices)))),
    ("peak_tflops", _valued("--peak-tflops", _number)),
    ("peak_bandwidth_gbs", _valued("--peak-bandwidth", _number)),
    ("timer", _valued("--timer", default="auto")),
    ("deterministic", _switch("--deterministic")),
    ("shard", _valued("--shard")),
    ("force", _switch("--force")),
    ("compile_workers", _valued("--compile-workers")),
    ("compile_timeout_s", _valued("--compile-timeout", _number)),
    ("trace", _switch("--trace")),
    ("cache_dir", _valued("--cache-dir")),  # a resumed run loads what was compiled
)


def resume_command(suite: Path | str, directory: Path, options: RunOptions) -> str:
    import shlex

    return shlex.join(["attnbench", "run", str(suite), "--resume", str(directory),
                       *replace(options, resume=False, force=False).to_argv()])
