"""attnbench submit and status without a cluster: the scripts' text and behaviour, the sbatch calls of a
submission and of a resubmission, the progress per shard, and bad input as one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.cluster import submit
from attnbench.cluster.sbatch import (
    Batch,
    Layout,
    SlurmOptions,
    array_script,
    merge_script,
    parse_time,
)
from attnbench.cluster.status import parse_states, scheduler_states
from attnbench.core.errors import AttnbenchError
from attnbench.run.options import RunOptions

SUITE = """\
name: fan
device: cpu
backends: [naive, sdpa-math]
timing: {warmup_ms: 0, budget_ms: 1, min_samples: 1, max_samples: 1}
sweep:
  seq_len: [32, 64, 128, 256, 512]
  heads: [2]
  head_dim: [16]
"""
OPTIONS = SlurmOptions(partition="gpu", time="2-00:00:00", gpus_per_task=1, account="proj-42",
                       extra=("--qos=high", "--gres=gpu:a100:1", "--constraint=h100"))


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    path = tmp_path / "fan.yaml"
    path.write_text(SUITE)
    return path


def batch(root: Path, python: str = "/opt/env/bin/python", slurm: SlurmOptions = OPTIONS) -> Batch:
    return Batch(Layout(root), python, 4, ("--device", "cuda", "--timeout", "60"), "fan", slurm,
                 "attnbench submit fan.yaml --shards 4")


def directives(script: str) -> list[str]:
    return [line.removeprefix("#SBATCH ") for line in script.splitlines() if line.startswith("#SBATCH ")]


def test_the_array_script_asks_for_every_option_given_and_the_merge_job_for_no_gpu(tmp_path: Path) -> None:
    root = tmp_path / "run"
    assert directives(array_script(batch(root))) == [
        "--job-name=attnbench-fan", "--array=0-3", "--ntasks=1", "--partition=gpu", "--account=proj-42",
        "--time=2-00:00:00", "--gpus-per-task=1", "--qos=high", "--gres=gpu:a100:1", "--constraint=h100",
        f"--output={root}/logs/shard%a.out", "--open-mode=append", "--requeue"]
    assert directives(merge_script(batch(root))) == [
        "--job-name=attnbench-fan-merge", "--ntasks=1", "--partition=gpu", "--account=proj-42",
        "--time=0:30:00", "--qos=high", "--constraint=h100", f"--output={root}/logs/merge.out",
        "--open-mode=append"]
    short = SlurmOptions(time="20")
    assert "--time=20" in directives(merge_script(batch(root, slurm=short))), "a shorter limit than 30 min is kept"
    assert directives(array_script(batch(root, slurm=SlurmOptions())))[3:] == [
        f"--output={root}/logs/shard%a.out", "--open-mode=append", "--requeue"], "nothing the user did not ask"
    for script in (array_script(batch(root)), merge_script(batch(root))):
        assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0, script


def run_script(script: str, tmp_path: Path, **env: str) -> list[str]:
    """Run a batch script with an `echo` standing in for Python: the command line it would run."""
    path = tmp_path / "job.sh"
    path.write_text(script)
    result = subprocess.run(["bash", str(path)], capture_output=True, text=True,
                            env={"PATH": os.environ["PATH"], **env}, check=True)
    return result.stdout.strip().splitlines()[-1].split()


def test_a_task_starts_its_shard_or_resumes_the_run_its_directory_holds(tmp_path: Path) -> None:
    root = tmp_path / "run"
    script = array_script(batch(root, python="echo"))
    suite = str(root / "slurm" / "suite.yaml")
    words = run_script(script, tmp_path, SLURM_ARRAY_TASK_ID="2", SLURM_ARRAY_JOB_ID="7")
    assert words == ["-m", "attnbench", "run", suite, "--shard", "2/4", "--device", "cuda", "--timeout", "60",
                     "--out", f"{root}/shard2"]
    (root / "shard2").mkdir(parents=True)
    (root / "shard2" / "env.json").write_text("{}")
    words = run_script(script, tmp_path, SLURM_ARRAY_TASK_ID="2", SLURM_ARRAY_JOB_ID="7")
    assert words[-2:] == ["--resume", f"{root}/shard2"], "a requeued or resubmitted task resumes its shard"
    outside = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert outside.returncode != 0 and "submit this script with sbatch" in outside.stderr

    merge = run_script(merge_script(batch(root, python="echo")), tmp_path, SLURM_JOB_ID="8")
    assert merge == ["-m", "attnbench", "merge", *[f"{root}/shard{i}" for i in range(4)], "--out", str(root)]


@pytest.mark.parametrize("text, seconds", [("90", 5400), ("30:15", 1815), ("1:00:00", 3600), ("2-12", 216000),
                                           ("1-0:30", 88200), ("1-00:00:10", 86410), ("UNLIMITED", None)])
def test_slurm_time_limits(text: str, seconds: int | None) -> None:
    assert parse_time(text) == seconds


class FakeScheduler:
    """sbatch hands out job ids 101, 102, ...; squeue says what `queue` says; sacct has no accounting."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.queue = ""
        self.next_job = 100

    def __call__(self, words: list[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(words)
        if words[0] == "sbatch":
            self.next_job += 1
            return subprocess.CompletedProcess(words, 0, f"{self.next_job}\n", "")
        if words[0] == "squeue":
            return subprocess.CompletedProcess(words, 0, self.queue, "")
        return subprocess.CompletedProcess(words, 1, "", "Slurm accounting storage is disabled")

    def sbatch_calls(self) -> list[list[str]]:
        return [call[1:] for call in self.calls if call[0] == "sbatch"]


def fill(shard: Path, measurements: int) -> None:
    """A shard directory holding `measurements` distinct records."""
    shard.mkdir(parents=True, exist_ok=True)
    (shard / "env.json").write_text("{}")
    model = json.loads((Path(__file__).parent / "data" / "cpu-run" / "results.jsonl").read_text().splitlines()[0])
    lines = [json.dumps({**model, "seq_len": n + 1, "kv_seq_len": n + 1, "case_id": f"c{n}"})
             for n in range(measurements)]
    (shard / "results.jsonl").write_text("".join(line + "\n" for line in lines))


def request(suite: Path, out: Path, shards: int = 3, **slurm: object) -> submit.Request:
    return submit.Request(suite, shards, out, SlurmOptions(**slurm), RunOptions(timeout_s=30))  # type: ignore


def test_a_resubmission_sends_only_the_unfinished_shards_and_the_merge_after_them(suite: Path,
                                                                                   tmp_path: Path) -> None:
    out, scheduler = tmp_path / "run", FakeScheduler()
    first = submit.prepare(request(suite, out), scheduler)
    assert first.device == "cpu" and sum(first.planned) == 10 and first.pending == (0, 1, 2)
    jobs = submit.submit(first, scheduler)
    assert (jobs["shards"], jobs["array_job"], jobs["merge_job"]) == ([0, 1, 2], "101", "102")
    layout = Layout(out)
    assert scheduler.sbatch_calls() == [["--parsable", str(layout.array_script)],
                                        ["--parsable", "--dependency=afterany:101", str(layout.merge_script)]]
    assert layout.suite.read_text() == SUITE and (layout.logs).is_dir()
    assert "--timeout 30" in layout.array_script.read_text()

    fill(layout.shard(0), first.planned[0])
    fill(layout.shard(1), first.planned[1] - 1)
    again = submit.prepare(request(suite, out), scheduler)
    assert again.pending == (1, 2)
    submit.submit(again, scheduler)
    assert scheduler.sbatch_calls()[2:] == [["--parsable", "--array=1,2", str(layout.array_script)],
                                            ["--parsable", "--dependency=afterany:103", str(layout.merge_script)]]
    record = json.loads(layout.manifest.read_text())
    assert [(s["shards"], s["array_job"], s["merge_job"]) for s in record["submissions"]] == [
        ([0, 1, 2], "101", "102"), ([1, 2], "103", "104")]

    for index in (1, 2):
        fill(layout.shard(index), first.planned[index])
    last = submit.prepare(request(suite, out), scheduler)
    assert last.pending == ()
    jobs = submit.submit(last, scheduler)
    assert jobs["array_job"] is None and scheduler.sbatch_calls()[-1] == ["--parsable", str(layout.merge_script)]
    assert submit.submitted_lines(last, jobs)[0] == f"every shard of {out} is complete: only the merge is submitted"

    (out / "results.jsonl").write_text("")
    with pytest.raises(AttnbenchError, match="already holds merged results"):
        submit.prepare(request(suite, out), scheduler)


def test_a_resubmission_waits_for_live_jobs_and_repeats_the_same_run(suite: Path, tmp_path: Path) -> None:
    out, scheduler = tmp_path / "run", FakeScheduler()
    submit.submit(submit.prepare(request(suite, out), scheduler), scheduler)
    scheduler.queue = "101_2|RUNNING\n999|RUNNING\n"
    with pytest.raises(AttnbenchError, match=r"its jobs 101 are still queued or running \(squeue -j 101\)"):
        submit.prepare(request(suite, out), scheduler)
    scheduler.queue = "999|RUNNING\n"  # someone else's job
    assert submit.prepare(request(suite, out), scheduler).pending == (0, 1, 2)
    with pytest.raises(AttnbenchError, match="submitted with 3 shards and run options --device cpu --timeout 30"):
        submit.prepare(request(suite, out, shards=2), scheduler)
    suite.write_text(SUITE.replace("512", "1024"))
    with pytest.raises(AttnbenchError, match="the suite changed since it was submitted"):
        submit.prepare(request(suite, out), scheduler)


def test_the_device_every_shard_runs_on() -> None:
    gpus = SlurmOptions(gpus_per_task=1)
    assert submit.shard_device("auto", None, gpus)[0] == "cuda"
    assert submit.shard_device("auto", None, SlurmOptions(extra=("--gres=gpu:2",)))[0] == "cuda"
    assert submit.shard_device("auto", None, SlurmOptions(extra=("--qos=high",)))[0] == "cpu"
    assert submit.shard_device("cpu", None, gpus)[0] == "cpu", "the suite's own device wins over 'auto'"
    assert submit.shard_device("auto", "cuda", SlurmOptions())[0] == "cuda"


def test_dry_run_prints_both_scripts_and_the_sbatch_calls_and_writes_nothing(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch: a dry run needs none
    out = tmp_path / "long"
    result = CliRunner().invoke(app, ["submit", "--dry-run", "quick", "--shards", "2", "--gpus-per-task", "1",
                                      "--partition", "gpu", "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = result.output
    assert f"# {out}/slurm/shards.sbatch" in text and f"# {out}/slurm/merge.sbatch" in text
    assert "#SBATCH --gpus-per-task=1" in text and "#SBATCH --partition=gpu" in text
    assert f"exec {sys.executable} -m attnbench run {out}/slurm/suite.yaml" in text
    assert '--shard "$shard/2" --device cuda "${where[@]}"' in text
    assert f"sbatch --parsable --dependency=afterany:ARRAY_JOB {out}/slurm/merge.sbatch" in text
    assert not out.exists()


def fake_sbatch(directory: Path) -> Path:
    """An sbatch on PATH that logs its arguments and prints job ids 101, 102, ..."""
    log = directory / "sbatch.log"
    script = directory / "sbatch"
    script.write_text(f'#!/bin/sh\necho "$@" >> {log}\necho $((100 + $(wc -l < {log})))\n')
    script.chmod(0o755)
    return log


def test_submit_prints_the_jobs_how_to_watch_them_and_the_command_that_reruns_them(
        suite: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = fake_sbatch(bin_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["submit", str(suite), "--shards", "3", "--out", str(out), "--time", "10:00",
                                      "--sbatch-arg", "--qos=low", "--backend", "naive"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("submitted job 101: array 0,1,2 of 3 shards (5 of 5 measurements on cpu")
    assert lines[1] == f"submitted job 102: merge after they end -> {out}/results.jsonl and {out}/report.html"
    assert "watch: squeue -j 101,102" in result.output and f"progress: attnbench status {out}" in result.output
    assert lines[-1].endswith(f"attnbench submit {suite} --shards 3 --out {out} --time 10:00 "
                              f"--sbatch-arg=--qos=low --backend naive")
    assert log.read_text().splitlines() == [f"--parsable {out}/slurm/shards.sbatch",
                                            f"--parsable --dependency=afterany:101 {out}/slurm/merge.sbatch"]


def test_status_counts_each_shard_and_the_merge_check_names_what_is_missing(
        suite: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, scheduler = tmp_path / "run", FakeScheduler()
    prepared = submit.prepare(request(suite, out), scheduler)
    submit.submit(prepared, scheduler)
    assert prepared.planned == (1, 1, 8), "the two 512-token measurements cost the most: a shard each"
    fill(out / "shard0", 1)
    fill(out / "shard2", 3)
    with open(out / "shard2" / "results.jsonl", "a") as results:
        results.write('{"schema_version": 1, "backend": "naive", "seq')  # the line a running shard is writing
    monkeypatch.setenv("PATH", str(tmp_path))  # no squeue, no sacct: the directories alone
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        result = CliRunner().invoke(app, ["status", str(out)])
    assert result.exit_code == 0, result.output
    assert not warned, "a line being written is not counted, and not warned about"
    lines = result.output.splitlines()
    assert lines[0] == f"{out}: suite fan, 3 shards on cpu: 4 of 10 measurements done"
    assert lines[1].split() == ["shard", "0:", "1", "of", "1", "complete", "job", "101_0", str(out / "shard0")]
    assert lines[2].split() == ["shard", "1:", "0", "of", "1", "job", "101_1", str(out / "shard1")]
    assert lines[3].split() == ["shard", "2:", "3", "of", "8", "job", "101_2", str(out / "shard2")]
    assert lines[4] == "  merge: job 102; not merged yet"

    check = CliRunner().invoke(app, ["status", str(out), "--require-complete"])
    assert check.exit_code == 1
    assert (f"not merged: shard(s) 1 (0 of 1), 2 (3 of 8) lack measurements. Rerun just those shards with: "
            f"{prepared.batch.command}") in check.output
    fill(out / "shard1", 1)
    fill(out / "shard2", 8)
    assert CliRunner().invoke(app, ["status", str(out), "--require-complete"]).exit_code == 0


def test_scheduler_states_come_from_sacct_and_squeue_for_the_jobs_of_the_run() -> None:
    assert parse_states("12_0|COMPLETED\n12_[1-3,5]%2|PENDING\n13|CANCELLED by 0\n") == {
        "12_0": "COMPLETED", "12_1": "PENDING", "12_2": "PENDING", "12_3": "PENDING", "12_5": "PENDING",
        "13": "CANCELLED"}

    def scheduler(words: list[str]) -> subprocess.CompletedProcess[str]:
        answer = {"sacct": "12_0|COMPLETED\n12_1|RUNNING\n13|PENDING\n", "squeue": "12_1|COMPLETING\n99|RUNNING\n"}
        return subprocess.CompletedProcess(words, 0, answer[words[0]], "")

    assert scheduler_states(["12", "13"], scheduler) == {"12_0": "COMPLETED", "12_1": "COMPLETING",
                                                          "13": "PENDING"}


def no_sbatch(tmp: Path, suite: Path) -> list[str]:
    os.environ["PATH"] = str(tmp)
    return ["submit", str(suite), "--shards", "2", "--out", str(tmp / "out")]


def existing_out(tmp: Path, suite: Path) -> list[str]:
    (tmp / "out").mkdir()
    (tmp / "out" / "notes.txt").write_text("mine")
    return ["submit", str(suite), "--shards", "2", "--out", str(tmp / "out"), "--dry-run"]


BAD: dict[str, tuple[object, str]] = {
    "no sbatch on PATH": (no_sbatch, "sbatch: not found on PATH"),
    "no shards": (["--shards", "0"], "--shards 0: must be at least 1"),
    "more shards than measurements": (["--shards", "11"], "has only 10 measurements on cpu; use at most 10 shards"),
    "unknown option": (["--shards", "2", "--partitoin", "gpu"],
                       "submit: unknown option '--partitoin' (did you mean '--partition'?)"),
    "time limit": (["--shards", "2", "--time", "2h"], "--time '2h': expected a SLURM time limit"),
    "an option submit sets": (["--shards", "2", "--sbatch-arg=--array=0-9"], "--array is not an extra option here"),
    "partition with a space": (["--shards", "2", "--partition", "gpu a100"], "--partition 'gpu a100': expected"),
    "zero GPUs": (["--shards", "2", "--gpus-per-task", "0"], "--gpus-per-task 0: must be at least 1"),
    "unknown device": (["--shards", "2", "--device", "tpu"], "--device tpu: unknown device"),
    "unknown backend": (["--shards", "2", "--backend", "naiv"], "unknown backend 'naiv' (did you mean 'naive'?)"),
    "an --out that is not a submission": (existing_out, "exists and was not written by attnbench submit"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_is_one_line_and_nothing_is_submitted(name: str, suite: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", os.environ["PATH"])  # restored after no_sbatch empties it
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = fake_sbatch(bin_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    make, message = BAD[name]
    args = make(tmp_path, suite) if callable(make) else ["submit", str(suite), *make, "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output, result.output
    assert not log.exists(), "nothing submitted"
    assert not (tmp_path / "out" / "slurm").exists(), "nothing written"
