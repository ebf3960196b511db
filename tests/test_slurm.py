"""`attnbench submit` on a real one-node SLURM: a 3-shard job array and its merge give exactly the
measurements of a one-machine run; a task cancelled midway is finished by resubmitting the printed command.

Needs Debian's slurm-wlm and munge and root (.ci/run installs them); skips with the reason elsewhere.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import slurm_cluster
from rich.console import Console

from attnbench.records.results import load_records
from attnbench.run import session
from attnbench.run.options import RunOptions

# One worker runs the whole module (make test's --dist loadgroup): its one cluster (the module's fixture) is a node
# named after this host and offered every CPU, so a second worker starting a second one would contend for both.
pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group("slurm")]
ROOT = Path(__file__).parent.parent
TIME_LIMIT_S = 120
# The budget, not the precision, ends each measurement: a shard lasts long enough to be cancelled midway.
SUITE = """\
name: fanout
device: cpu
backends: [naive, sdpa-math, sdpa]
timing: {warmup_ms: 0, budget_ms: 300, min_samples: 2, precision: 0.0001}
sweep:
  seq_len: [64, 128, 256]
  heads: [2]
  kv_heads: [heads, 1]
  head_dim: [16]
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurm_cluster.Cluster]:
    missing = slurm_cluster.missing_programs()
    if missing:
        pytest.skip(f"no SLURM here: {', '.join(missing)} not found (apt-get install {slurm_cluster.PACKAGES}; "
                    f".ci/run does when it can)")
    if os.geteuid() != 0:
        pytest.skip("the one-node SLURM runs slurmd and munged as root; this is not root")
    cluster = slurm_cluster.start(tmp_path_factory.mktemp("slurm"), os.cpu_count() or 1)
    # Each task is allotted one CPU, but task/none pins no task to it, so torch would start a thread per
    # core in every task and two tasks would spin on each other's cores (the test then takes ~1.4x as long).
    cluster.env["OMP_NUM_THREADS"] = "1"
    try:
        yield cluster
    finally:
        cluster.stop()


def attnbench(cluster: slurm_cluster.Cluster, *args: object) -> subprocess.CompletedProcess[str]:
    """The installed attnbench, as a user on the login node would run it (this interpreter)."""
    return cluster.run(sys.executable, "-m", "attnbench", *map(str, args), timeout=60)


def submitted(output: str) -> tuple[str | None, str, str]:
    """The array job, the merge job and the rerun command that `attnbench submit` printed."""
    array = re.search(r"^submitted job (\d+): array", output, re.M)
    merge = re.search(r"^submitted job (\d+): merge", output, re.M)
    rerun = re.search(r"resubmits just the unfinished ones: (.+)$", output, re.M)
    assert merge and rerun, output
    return (array[1] if array else None), merge[1], rerun[1]


def one_machine_keys(suite: Path, out: Path) -> Counter:
    """The measurements a plain `attnbench run` of the suite on this machine records (its report left out)."""
    quiet = Console(file=io.StringIO())
    session.execute(session.plan(suite, RunOptions()), out, quiet, lambda: False)
    return Counter(r.key for r in load_records(out))


def merged_keys(out: Path) -> Counter:
    return Counter(r.key for r in load_records(out))


@pytest.mark.slow
def test_submit_fans_out_merges_and_finishes_a_cancelled_shard(cluster: slurm_cluster.Cluster,
                                                               tmp_path: Path) -> None:
    deadline = time.monotonic() + TIME_LIMIT_S
    suite = tmp_path / "fanout.yaml"
    suite.write_text(SUITE)

    # 1. Three shards and the merge, sbatch taking every kind of option submit writes; the busiest shard is cancelled
    #    after its first measurement, so the merge finds it incomplete and prints the command that finishes it.
    out = tmp_path / "run"
    output = attnbench(cluster, "submit", suite, "--shards", 3, "--out", out, "--partition", "debug",
                       "--time", "10:00", "--account", "ci", "--sbatch-arg=--comment=attnbench-test").stdout
    array, merge, printed = submitted(output)
    assert "#SBATCH --comment=attnbench-test" in (out / "slurm" / "shards.sbatch").read_text()
    planned = json.loads((out / "slurm" / "submission.json").read_text())["planned"]
    busiest = planned.index(max(planned))
    results = out / f"shard{busiest}" / "results.jsonl"
    while not (results.is_file() and results.read_text().count("\n") >= 1):
        assert time.monotonic() < deadline, f"shard {busiest} never recorded a measurement"
        time.sleep(0.05)
    cluster.run("scancel", f"{array}_{busiest}")
    expected = one_machine_keys(suite, tmp_path / "one-machine")  # measured while the other shards work
    assert len(expected) == 18 and set(expected.values()) == {1}
    cluster.wait_gone(merge, deadline)
    done = len(load_records(out / f"shard{busiest}"))
    assert 1 <= done < planned[busiest], f"the cancel came too late to leave shard {busiest} unfinished"
    assert not (out / "results.jsonl").exists(), "an incomplete run is not merged"
    log = (out / "logs" / "merge.out").read_text()
    assert f"shard(s) {busiest} ({done} of {planned[busiest]}) lack measurements" in log, log
    assert f"Rerun just those shards with: {printed}" in log, log
    for shard in range(3):
        env = json.loads((out / f"shard{shard}" / "env.json").read_text())
        assert env["shard"] == f"{shard}/3"
        assert env["slurm"] == {"job_id": env["slurm"]["job_id"], "array_job_id": array,
                                "array_task_id": str(shard), "node": cluster.node}
        assert env["slurm"]["job_id"].isdigit()

    # 2. The printed command resubmits just that shard, which resumes; the merge is exact again.
    words = shlex.split(printed)
    assert words[0] == "attnbench"
    output = attnbench(cluster, *words[1:]).stdout
    array, merge, _ = submitted(output)
    assert f"submitted job {array}: array {busiest} of 3 shards" in output, output
    cluster.wait_gone(merge, deadline)
    assert merged_keys(out) == expected, (out / "logs" / "merge.out").read_text()
    assert (out / "report.html").is_file()
    env = json.loads((out / f"shard{busiest}" / "env.json").read_text())
    assert env["resumed"][-1]["env"]["slurm"]["array_job_id"] == array
    assert env["resumed"][-1]["already_done"] == done
    status = attnbench(cluster, "status", out).stdout
    assert "18 of 18 measurements done" in status and "merged: 18 records" in status, status
