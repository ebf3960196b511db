"""Where a submitted run stands: measurements done per shard, and what the scheduler (sacct, squeue) says of
each task."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnbench.cluster.sbatch import Layout
from attnbench.core.errors import AttnbenchError
from attnbench.records.results import load_records, read_json_object, stored_results
from attnbench.records.resume import done_keys

# Runs a command and gives back its exit code and output; injectable for tests.
Runner = Callable[[list[str]], "subprocess.CompletedProcess[str]"]
ACTIVE = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED", "STAGE_OUT")


@dataclass(frozen=True)
class ShardProgress:
    index: int
    done: int
    planned: int
    state: str | None  # the scheduler's word for the shard's latest task

    @property
    def complete(self) -> bool:
        return self.done >= self.planned


def run_command(words: list[str]) -> subprocess.CompletedProcess[str]:
    """Run a scheduler command; a missing one reads as a failed call (exit 127)."""
    if shutil.which(words[0]) is None:
        return subprocess.CompletedProcess(words, 127, "", f"{words[0]}: not found")
    try:
        return subprocess.run(words, capture_output=True, text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(words, 124, "", f"{words[0]}: no answer within 60 s")


def read_manifest(root: Path) -> dict[str, Any]:
    """The submission.json in `root`; a user error when there is none."""
    path = Layout(root).manifest
    name = path.relative_to(root)
    manifest = read_json_object(path, str(root),
                                f"no {name} there; not a directory written by attnbench submit",
                                f"{name} is not an attnbench submission record")
    if not isinstance(manifest.get("planned"), list):
        raise AttnbenchError(f"{root}: {name} is not an attnbench submission record")
    return manifest


def measurements_done(directory: Path) -> int:
    """How many distinct measurements a shard directory holds (a line being written is not counted)."""
    return len(done_keys(directory, writing=True))


def expand_indices(text: str) -> list[int]:
    """SLURM's array index list '0-2,5' (or '[0-2,5]%4') -> [0, 1, 2, 5]."""
    indices: list[int] = []
    for part in text.strip("[]").split("%")[0].strip("[]").split(","):
        if re.fullmatch(r"\d+-\d+", part):
            first, last = map(int, part.split("-"))
            indices += range(first, last + 1)
        elif part.isdigit():
            indices.append(int(part))
    return indices


def parse_states(text: str) -> dict[str, str]:
    """'JOBID|STATE' lines (sacct -P, squeue -o '%i|%T') -> {'12_1': 'RUNNING', '13': 'PENDING'}."""
    states: dict[str, str] = {}
    for line in text.splitlines():
        if "|" not in line:
            continue
        job, state = (field.strip() for field in line.split("|", 1))
        state = state.split()[0] if state else "?"  # "CANCELLED by 0" -> "CANCELLED"
        if "_" in job:
            array, tasks = job.split("_", 1)
            for index in expand_indices(tasks):
                states[f"{array}_{index}"] = state
        elif job:
            states[job] = state
    return states


def scheduler_states(job_ids: list[str], run: Runner = run_command) -> dict[str, str]:
    """The state of each job and array task: sacct's, and squeue's for those still live."""
    if not job_ids:
        return {}
    states: dict[str, str] = {}
    sacct = run(["sacct", "-X", "-n", "-P", "--format=JobID,State", "-j", ",".join(job_ids)])
    if sacct.returncode == 0:
        states.update(parse_states(sacct.stdout))
    squeue = run(["squeue", "--me", "-r", "-h", "-o", "%i|%T"])
    if squeue.returncode == 0:
        live = parse_states(squeue.stdout)
        states.update({job: state for job, state in live.items() if job.split("_")[0] in job_ids})
    return states


def job_ids(manifest: dict[str, Any]) -> list[str]:
    return [str(job) for entry in manifest.get("submissions", []) for job in (entry.get("array_job"),
                                                                                 entry.get("merge_job"))
            if job]


def latest_task(manifest: dict[str, Any], shard: int) -> str | None:
    """The array task ('12_1') that last ran `shard`, or None if it was never submitted."""
    for entry in reversed(manifest.get("submissions", [])):
        if shard in entry.get("shards", []) and entry.get("array_job"):
            return f"{entry['array_job']}_{shard}"
    return None


def shard_progress(root: Path, manifest: dict[str, Any], states: dict[str, str]) -> list[ShardProgress]:
    layout = Layout(root)
    progress = []
    for index, planned in enumerate(manifest["planned"]):
        task = latest_task(manifest, index)
        progress.append(ShardProgress(index, measurements_done(layout.shard(index)), int(planned),
                                      states.get(task) if task else None))
    return progress


def live_jobs(manifest: dict[str, Any], states: dict[str, str]) -> list[str]:
    return sorted({job.split("_")[0] for job, state in states.items()
                   if state in ACTIVE and job.split("_")[0] in job_ids(manifest)})


def report_lines(root: Path, manifest: dict[str, Any], progress: list[ShardProgress],
                 states: dict[str, str]) -> list[str]:
    """What `attnbench status` prints: the totals, then one line per shard, then the merge."""
    done = sum(min(p.done, p.planned) for p in progress)
    planned = sum(p.planned for p in progress)
    lines = [f"{root}: suite {manifest.get('suite_name')}, {len(progress)} shards on "
             f"{manifest.get('device')}: {done} of {planned} measurements done"]
    for p in progress:
        task = latest_task(manifest, p.index)
        if p.state:
            where = f"{p.state} (job {task})"
        elif task:
            where = f"job {task}"
        else:
            where = "not submitted"
        lines.append(f"  shard {p.index}: {p.done:>5} of {p.planned:<5} {'complete' if p.complete else '':<9}"
                     f"{where}  {Layout(root).shard(p.index)}")
    merged = stored_results(root)
    merge_job = next((str(e["merge_job"]) for e in reversed(manifest.get("submissions", []))
                      if e.get("merge_job")), None)
    if merged is not None:
        lines.append(f"  merged: {len(load_records(root))} records in {merged}, "
                     f"report {root / 'report.html'}")
    elif merge_job:
        state = states.get(merge_job)
        job = f"{merge_job} {state}" if state else merge_job
        lines.append(f"  merge: job {job}; not merged yet")
    return lines
