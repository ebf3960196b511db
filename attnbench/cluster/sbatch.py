"""A SLURM submission's files: where they live, the scheduler options, and the two batch scripts (plain bash a
user can read, edit and `sbatch` again: a job array with a task per shard, and a merge job after it)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from attnbench.core.errors import AttnbenchError

# The merge job reads JSON and draws a few charts; a short limit schedules sooner.
MERGE_TIME_S = 30 * 60
# sbatch options that ask for GPUs or other generic resources: the shard array's only.
GPU_OPTIONS = ("--gres", "-G", "--mem-per-gpu", "--cpus-per-gpu", "--tres-per-task")
# sbatch options submit sets itself, and the `attnbench submit` option to use instead (None: not settable).
OWNED = {"--array": None, "-a": None, "--output": None, "-o": None, "--error": None, "-e": None,
         "--dependency": None, "-d": None, "--open-mode": None, "--parsable": None, "--job-name": None,
         "-J": None, "--partition": "--partition", "-p": "--partition", "--time": "--time", "-t": "--time",
         "--account": "--account", "-A": "--account", "--gpus-per-task": "--gpus-per-task"}


@dataclass(frozen=True)
class SlurmOptions:
    """What the user asks of the scheduler; None or empty leaves it to the cluster's defaults."""

    partition: str | None = None
    time: str | None = None
    gpus_per_task: int | None = None
    account: str | None = None
    extra: tuple[str, ...] = ()  # further sbatch options, each one word: --qos=high

    def requests_gpus(self) -> bool:
        return bool(self.gpus_per_task) or any(is_gpu_request(arg) for arg in self.extra)


@dataclass(frozen=True)
class Layout:

    root: Path

    @property
    def slurm(self) -> Path:
        return self.root / "slurm"

    @property
    def suite(self) -> Path:
        """A copy of the suite as submitted: the tasks split this one."""
        return self.slurm / "suite.yaml"

    @property
    def array_script(self) -> Path:
        return self.slurm / "shards.sbatch"

    @property
    def merge_script(self) -> Path:
        return self.slurm / "merge.sbatch"

    @property
    def manifest(self) -> Path:
        return self.slurm / "submission.json"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def shard(self, index: int) -> Path:
        return self.root / f"shard{index}"


@dataclass(frozen=True)
class Batch:
    """What the two scripts say: the run every shard makes, and how the scheduler should place it."""

    layout: Layout
    python: str  # the interpreter that ran `attnbench submit`
    shards: int
    run_options: tuple[str, ...]  # `attnbench run` options after the suite
    name: str
    slurm: SlurmOptions
    command: str  # the `attnbench submit` line that wrote the scripts


def option_name(arg: str) -> str:
    """'--qos=high' -> '--qos'; '-p gpu' -> '-p'; '-pgpu' -> '-p'."""
    word = arg.split("=", 1)[0].split()[0] if arg.strip() else arg
    return word if word.startswith("--") else word[:2]


def is_gpu_request(arg: str) -> bool:
    name = option_name(arg)
    return name in GPU_OPTIONS or name.startswith("--gpu")


def parse_time(text: str) -> int | None:
    """A SLURM time limit in seconds (None for UNLIMITED) in a form sbatch accepts, else a user error."""
    if text.strip().upper() in ("UNLIMITED", "INFINITE"):
        return None
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text.strip())
    if not match:
        raise AttnbenchError(f"--time {text!r}: expected a SLURM time limit: MINUTES, HH:MM:SS or D-HH:MM:SS")
    days, first, second, third = match.groups()
    if days is not None:  # days-hours[:minutes[:seconds]]
        seconds = int(days) * 86400 + int(first) * 3600 + int(second or 0) * 60 + int(third or 0)
    elif third is not None:  # hours:minutes:seconds
        seconds = int(first) * 3600 + int(second) * 60 + int(third)
    else:  # minutes[:seconds]
        seconds = int(first) * 60 + int(second or 0)
    if seconds <= 0:
        raise AttnbenchError(f"--time {text!r}: a time limit must be longer than zero")
    return seconds


def hms(seconds: int) -> str:
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def merge_time(shard_time: str | None) -> str | None:
    """The merge job's limit: the shards' own when shorter than MERGE_TIME_S; None if unset."""
    if shard_time is None:
        return None
    seconds = parse_time(shard_time)
    return shard_time if seconds is not None and seconds <= MERGE_TIME_S else hms(MERGE_TIME_S)


def check_root(root: Path) -> None:
    """The directory goes into #SBATCH --output, which takes no quotes and reads % as a pattern."""
    if re.search(r"[\s%'\"\\]", str(root)):
        raise AttnbenchError(f"--out {root}: SLURM's log paths cannot hold spaces, "
                             "quotes or %; choose another")


def check_options(options: SlurmOptions) -> None:
    """Refuse what sbatch would refuse, or what would break the scripts."""
    for flag, value in (("--partition", options.partition), ("--account", options.account)):
        if value is not None and not re.fullmatch(r"[A-Za-z0-9_.,+@-]+", value):
            raise AttnbenchError(f"{flag} {value!r}: expected a SLURM name (letters, digits, . _ - , + @)")
    if options.time is not None:
        parse_time(options.time)
    if options.gpus_per_task is not None and options.gpus_per_task < 1:
        raise AttnbenchError(f"--gpus-per-task {options.gpus_per_task}: must be at least "
                             "1 (leave it out for none)")
    for arg in options.extra:
        if not arg.startswith("-") or any(c in arg for c in "\n\r\0"):
            raise AttnbenchError(f"--sbatch-arg {arg!r}: expected one sbatch option on "
                                 "one line, e.g. --qos=high")
        name = option_name(arg)
        if name in OWNED:
            instead = f"use submit's own {OWNED[name]}" if OWNED[name] else "submit sets it itself"
            raise AttnbenchError(f"--sbatch-arg {arg!r}: {name} is not an extra option here; {instead}")


def directives(slurm: SlurmOptions, for_shards: bool) -> list[str]:
    """The #SBATCH lines for the user's options; the merge job asks for no GPU."""
    lines = []
    if slurm.partition:
        lines.append(f"--partition={slurm.partition}")
    if slurm.account:
        lines.append(f"--account={slurm.account}")
    time = slurm.time if for_shards else merge_time(slurm.time)
    if time:
        lines.append(f"--time={time}")
    if for_shards and slurm.gpus_per_task:
        lines.append(f"--gpus-per-task={slurm.gpus_per_task}")
    lines += [arg for arg in slurm.extra if for_shards or not is_gpu_request(arg)]
    return [f"#SBATCH {line}" for line in lines]


def array_script(batch: Batch) -> str:
    """The job array: task I runs shard I/N into shardI/, resuming it."""
    layout, n = batch.layout, batch.shards
    q = shlex.quote
    run = " ".join(q(word) for word in batch.run_options)
    lines = [
        "#!/bin/bash",
        f"# attnbench: suite {batch.name}, one array task per shard; task I runs shard I/{n} into shardI/.",
        "# A task whose directory already holds a run resumes it (--resume): a requeued, preempted or",
        "# resubmitted task finishes its shard instead of starting over. Written by",
        f"#   {batch.command}",
        f"# Progress: attnbench status {q(str(layout.root))}",
        f"# Rerun shards by hand with: sbatch --array=1,3 {q(str(layout.array_script))}",
        f"#SBATCH --job-name=attnbench-{batch.name}",
        f"#SBATCH --array=0-{n - 1}",
        "#SBATCH --ntasks=1",
        *directives(batch.slurm, for_shards=True),
        f"#SBATCH --output={layout.logs}/shard%a.out",
        "#SBATCH --open-mode=append",
        "#SBATCH --requeue",
        "set -euo pipefail",
        "",
        f"root={q(str(layout.root))}",
        'shard="${SLURM_ARRAY_TASK_ID:?submit this script with sbatch: it is a job array}"',
        'out="$root/shard$shard"',
        'if [ -f "$out/env.json" ]; then where=(--resume "$out"); else where=(--out "$out"); fi',
        'echo "== $(date -Is) job ${SLURM_ARRAY_JOB_ID}_$shard on $(hostname): shard '
        f'$shard/{n} ${{where[*]}}"',
        f"exec {q(batch.python)} -m attnbench run {q(str(layout.suite))} \\",
        f"    --shard \"$shard/{n}\" {run + ' ' if run else ''}\"${{where[@]}}\"",
        "",
    ]
    return "\n".join(lines)


def merge_script(batch: Batch) -> str:
    """The merge job: one results.jsonl and report in the root once every shard is complete."""
    layout, n = batch.layout, batch.shards
    q = shlex.quote
    lines = [
        "#!/bin/bash",
        f"# attnbench: suite {batch.name}, merge the {n} shard directories into this "
        "one and render report.html,",
        "# after every array task has ended (afterany). It merges only when every shard holds all its",
        "# measurements; otherwise it names the shards that do not and the command that reruns just them.",
        "# Written by",
        f"#   {batch.command}",
        f"#SBATCH --job-name=attnbench-{batch.name}-merge",
        "#SBATCH --ntasks=1",
        *directives(batch.slurm, for_shards=False),
        f"#SBATCH --output={layout.logs}/merge.out",
        "#SBATCH --open-mode=append",
        "set -euo pipefail",
        "",
        f"root={q(str(layout.root))}",
        'echo "== $(date -Is) job $SLURM_JOB_ID on $(hostname): merge"',
        f'{q(batch.python)} -m attnbench status "$root" --require-complete',
        f'exec {q(batch.python)} -m attnbench merge "$root"/shard{{0..{n - 1}}} --out "$root"',
        "",
    ]
    return "\n".join(lines)
