"""`attnbench submit`: a suite fanned out as a SLURM job array, one task per shard, and a merge job after it.
Everything is checked before the scripts are written; the same command again resubmits the unfinished shards.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnbench.cluster.sbatch import (
    Batch,
    Layout,
    SlurmOptions,
    array_script,
    check_options,
    check_root,
    merge_script,
)
from attnbench.cluster.status import (
    Runner,
    job_ids,
    live_jobs,
    read_manifest,
    run_command,
    scheduler_states,
    shard_progress,
)
from attnbench.core.errors import AttnbenchError
from attnbench.records.results import RESULTS_FILE, stored_results, write_json_atomic
from attnbench.run.options import RunOptions

if TYPE_CHECKING:
    from attnbench.sweep.suite import Suite


@dataclass(frozen=True)
class Request:
    """What `attnbench submit` was asked."""

    suite: Path
    shards: int
    out: Path | None
    slurm: SlurmOptions
    run: RunOptions = field(default_factory=RunOptions)


@dataclass(frozen=True)
class Submission:
    """A checked submission, ready to write and hand to sbatch."""

    batch: Batch
    suite_text: str
    device: str
    device_reason: str
    planned: tuple[int, ...]  # measurements in each shard
    pending: tuple[int, ...]  # the shards to submit now
    earlier: dict[str, Any] | None  # an earlier submission record in the directory

    @property
    def layout(self) -> Layout:
        return self.batch.layout


def shard_device(suite_device: str, requested: str | None, slurm: SlurmOptions) -> tuple[str, str]:
    """The device every shard runs on, and why; decided here, where the node that submits may have no GPU."""
    if requested not in (None, "auto"):
        if requested not in ("cpu", "cuda"):
            raise AttnbenchError(f"--device {requested}: unknown device; allowed: auto, cpu, cuda")
        return requested, "--device"
    if suite_device != "auto":
        return suite_device, "the suite's device"
    if slurm.requests_gpus():
        return "cuda", "the suite says auto and the tasks ask for GPUs"
    return "cpu", "the suite says auto and the tasks ask for no GPU"


def planned_per_shard(suite: Suite, request: Request, device: str) -> tuple[int, ...]:
    """How many measurements each shard holds, split as `run --shard I/N` splits them."""
    from attnbench.backends.registry import default_registry
    from attnbench.run.shard import assign

    registry = default_registry(list(request.run.plugins))
    backends = registry.resolve(registry.chosen(list(request.run.backends) or None, suite))
    tasks = [(case, backend) for case in suite.cases(device) for backend in backends]
    if len(tasks) < request.shards:
        raise AttnbenchError(f"--shards {request.shards}: {suite.path} has only {len(tasks)} measurements on "
                             f"{device}; use at most {len(tasks)} shards")
    owner = assign(tasks, request.shards)
    return tuple(owner.count(index) for index in range(request.shards))


def submit_command(request: Request, root: Path) -> str:
    """The `attnbench submit` line that repeats this submission into `root`."""
    # else a packaged name
    suite = str(request.suite.absolute()) if request.suite.is_file() else str(request.suite)
    words = ["attnbench", "submit", suite, "--shards", str(request.shards), "--out", str(root)]
    slurm = request.slurm
    for flag, value in (("--partition", slurm.partition), ("--time", slurm.time),
                        ("--gpus-per-task", slurm.gpus_per_task), ("--account", slurm.account)):
        if value is not None:
            words += [flag, str(value)]
    words += [f"--sbatch-arg={arg}" for arg in slurm.extra]
    return shlex.join(words + request.run.to_argv())


def default_root(suite_name: str) -> Path:
    return Path("reports") / f"{suite_name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def prepare(request: Request, run: Runner = run_command) -> Submission:
    """Check everything a submission depends on and decide what to submit; nothing is written."""
    from attnbench.sweep.suite import load_suite

    if request.shards < 1:
        raise AttnbenchError(f"--shards {request.shards}: must be at least 1")
    check_options(request.slurm)
    suite = load_suite(request.suite)
    device, reason = shard_device(suite.model.device, request.run.device, request.slurm)
    planned = planned_per_shard(suite, request, device)
    root = (request.out or default_root(suite.name)).absolute()
    check_root(root)
    layout = Layout(root)
    run_options = tuple(replace(request.run, device=device).for_shards().to_argv())
    batch = Batch(layout, sys.executable, request.shards, run_options, suite.name, request.slurm,
                  submit_command(request, root))
    earlier = earlier_submission(layout, suite.text, batch, planned)
    pending = tuple(range(request.shards))
    if earlier is not None:
        states = scheduler_states(job_ids(earlier), run)
        live = live_jobs(earlier, states)
        if live:
            raise AttnbenchError(f"--out {root}: its jobs {', '.join(live)} are still queued or running "
                                 f"(squeue -j {','.join(live)}); wait for them or "
                                 "scancel them, then submit again")
        pending = tuple(p.index for p in shard_progress(root, earlier, states) if not p.complete)
    return Submission(batch, suite.text, device, reason, planned, pending, earlier)


def earlier_submission(layout: Layout, suite_text: str, batch: Batch,
                       planned: tuple[int, ...]) -> dict[str, Any] | None:
    """The record of an earlier submission this one repeats; else a user error."""
    root = layout.root
    merged = stored_results(root)
    if merged is not None:
        raise AttnbenchError(f"--out {root}: already holds merged results "
                             f"({merged.name}); choose another --out")
    if not layout.manifest.is_file():
        if root.exists() and (not root.is_dir() or any(root.iterdir())):
            raise AttnbenchError(f"--out {root}: exists and was not written by "
                                 "attnbench submit; choose another")
        return None
    earlier = read_manifest(root)
    was = (earlier.get("shards"), earlier.get("run_options"), earlier.get("planned"))
    now = (batch.shards, list(batch.run_options), list(planned))
    if was != now:
        raise AttnbenchError(f"--out {root}: it was submitted with {was[0]} shards and run options "
                             f"{shlex.join(was[1] or [])}; repeat those to resubmit into "
                             "it, or choose another --out")
    if layout.suite.is_file() and layout.suite.read_text(encoding="utf-8") != suite_text:
        raise AttnbenchError(f"--out {root}: the suite changed since it was submitted ({layout.suite} holds "
                             "the submitted one); choose another --out for the new suite")
    return earlier


def write(submission: Submission) -> None:
    layout, batch = submission.layout, submission.batch
    try:
        layout.slurm.mkdir(parents=True, exist_ok=True)
        layout.logs.mkdir(exist_ok=True)
        if not layout.suite.is_file():
            layout.suite.write_text(submission.suite_text, encoding="utf-8")
        layout.array_script.write_text(array_script(batch), encoding="utf-8")
        layout.merge_script.write_text(merge_script(batch), encoding="utf-8")
        write_json_atomic(layout.manifest, manifest(submission))
    except OSError as exc:
        raise AttnbenchError(f"--out {layout.root}: cannot write the submission ({exc.strerror})") from None


def manifest(submission: Submission, jobs: dict[str, Any] | None = None) -> dict[str, Any]:
    """The submission record (slurm/submission.json) that `status`, the merge job and a resubmission read."""
    batch = submission.batch
    record = dict(submission.earlier or {})
    record.update(suite_name=batch.name, device=submission.device, shards=batch.shards,
                  run_options=list(batch.run_options), planned=list(submission.planned), python=batch.python,
                  command=batch.command, slurm={"partition": batch.slurm.partition, "time": batch.slurm.time,
                                                "gpus_per_task": batch.slurm.gpus_per_task,
                                                "account": batch.slurm.account,
                                                "extra": list(batch.slurm.extra)})
    record.setdefault("submissions", [])
    if jobs is not None:
        record["submissions"] = [*record["submissions"], jobs]
    return record


def array_call(submission: Submission) -> list[str]:
    """sbatch of the job array, limited to the pending shards when not all of them are."""
    pending = submission.pending
    limit: list[str] = []
    if pending != tuple(range(submission.batch.shards)):
        limit = [f"--array={','.join(map(str, pending))}"]
    return ["sbatch", "--parsable", *limit, str(submission.layout.array_script)]


def merge_call(submission: Submission, array_job: str | None) -> list[str]:
    """sbatch of the merge job, after every task of `array_job` has ended (at once when there is none)."""
    after = [f"--dependency=afterany:{array_job}"] if array_job else []
    return ["sbatch", "--parsable", *after, str(submission.layout.merge_script)]


def job_id(words: list[str], run: Runner) -> str:
    """Run one sbatch call and read the job id it prints with --parsable ('12' or '12;cluster')."""
    result = run(words)
    if result.returncode != 0:
        detail = (result.stderr.strip().splitlines() or [f"exit code {result.returncode}"])[-1]
        raise AttnbenchError(f"{shlex.join(words)}: {detail}")
    job = result.stdout.strip().split(";")[0]
    if not job.isdigit():
        raise AttnbenchError(f"{shlex.join(words)}: expected a job id, got {result.stdout.strip()!r}")
    return job


def require_sbatch() -> None:
    if shutil.which("sbatch") is None:
        raise AttnbenchError("sbatch: not found on PATH; run attnbench submit on a SLURM login node "
                             "(or --dry-run to only print the scripts)")


def submit(submission: Submission, run: Runner = run_command) -> dict[str, Any]:
    """Write the files, sbatch the array and then the merge job; each job id is recorded at once."""
    write(submission)
    jobs: dict[str, Any] = {"timestamp": datetime.now().isoformat(timespec="seconds"),
                            "shards": list(submission.pending), "array_job": None, "merge_job": None}
    if submission.pending:
        jobs["array_job"] = job_id(array_call(submission), run)
        write_json_atomic(submission.layout.manifest, manifest(submission, jobs))
    call = merge_call(submission, jobs["array_job"])
    try:
        jobs["merge_job"] = job_id(call, run)
    except AttnbenchError as exc:
        raise AttnbenchError(f"{exc} (the shards are submitted as job {jobs['array_job']}; submit the merge "
                             f"by hand: {shlex.join(call)})") from None
    write_json_atomic(submission.layout.manifest, manifest(submission, jobs))
    return jobs


def submitted_lines(submission: Submission, jobs: dict[str, Any]) -> list[str]:
    """What submit prints once the jobs are in."""
    layout, n = submission.layout, submission.batch.shards
    ids = ",".join(str(j) for j in (jobs["array_job"], jobs["merge_job"]) if j)
    total = sum(submission.planned)
    lines = []
    if jobs["array_job"]:
        shards = ",".join(map(str, submission.pending))
        lines.append(f"submitted job {jobs['array_job']}: array {shards} of {n} shards "
                     f"({sum(submission.planned[i] for i in submission.pending)} of {total} measurements on "
                     f"{submission.device}: {submission.device_reason}) -> {layout.root}/shardI")
    else:
        lines.append(f"every shard of {layout.root} is complete: only the merge is submitted")
    lines += [f"submitted job {jobs['merge_job']}: merge after "
              f"{'they end' if jobs['array_job'] else 'nothing'} -> {layout.root / RESULTS_FILE} and "
              f"{layout.root / 'report.html'}",
              f"scripts: {layout.array_script}, {layout.merge_script}; logs: {layout.logs}/",
              f"watch: squeue -j {ids}   afterwards: sacct -X -j {ids} "
              "--format=JobID,JobName,State,Elapsed,NodeList",
              f"progress: attnbench status {layout.root}",
              f"if a shard is cancelled, preempted or fails, this resubmits just the unfinished ones: "
              f"{submission.batch.command}"]
    return lines


def dry_run_text(submission: Submission) -> str:
    """The scripts and the sbatch calls a submission would make; nothing is written or submitted."""
    layout, batch = submission.layout, submission.batch
    parts = [f"# {layout.array_script}", array_script(batch), f"# {layout.merge_script}", merge_script(batch),
             f"# {len(submission.pending)} of {batch.shards} shards, {sum(submission.planned)} measurements "
             f"on {submission.device} ({submission.device_reason}); per shard: "
             f"{', '.join(map(str, submission.planned))}",
             "# would run:", *([shlex.join(array_call(submission))] if submission.pending else []),
             shlex.join(merge_call(submission, "ARRAY_JOB" if submission.pending else None)), ""]
    return "\n".join(parts)
