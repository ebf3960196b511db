"""A run whose output folder fills up stops with one line and exit 2, every record already written intact, and
`--resume` finishes it once there is room: on a small tmpfs mounted for the test (root only; skipped otherwise)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from attnbench.records.results import load_records

ROOT = Path(__file__).resolve().parent.parent
SUITE = """name: tiny
device: cpu
backends: [naive, sdpa-math]
timing: {warmup_ms: 0, budget_ms: 5, min_samples: 3}
sweep:
  batch: [1]
  seq_len: [64, 96, 128, 160, 192, 224]
  heads: [2]
  kv_heads: [heads]
  head_dim: [16]
  dtype: [float32]
  causal: [true, false]
  mode: [fwd]
"""
CASES = 24  # 6 lengths x causal or not x 2 backends


def mount_reason() -> str | None:
    if os.geteuid() != 0:
        return "mounting a small tmpfs needs root"
    if shutil.which("mount") is None:
        return "no mount command"
    return None


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 24 KiB tmpfs: room for env.json and about ten records."""
    if (reason := mount_reason()) is not None:
        pytest.skip(reason)
    point = tmp_path / "disk"
    point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24k", "tmpfs", str(point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", str(point)], check=False)


def attnbench(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "attnbench", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)


@pytest.mark.slow
def test_a_full_disk_stops_the_run_with_one_line_and_keeps_every_record(small_disk: Path, tmp_path: Path) -> None:
    suite = tmp_path / "tiny.yaml"
    suite.write_text(SUITE)
    out = small_disk / "run"
    result = attnbench("run", suite, "--out", out)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    [line] = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert "No space left on device" in line and f"--resume {out}" in line
    data = (out / "results.jsonl").read_bytes()
    assert data.endswith(b"\n")  # never half a record
    kept = load_records(out)
    assert 0 < len(kept) < CASES and f"the {len(kept)} records before it are kept" in line
    assert all(r.status == "ok" for r in kept)
    subprocess.run(["mount", "-o", "remount,size=16m", str(small_disk)], check=True)  # room again
    resumed = attnbench("run", suite, "--resume", out)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert (out / "results.jsonl").read_bytes()[:len(data)] == data  # the records kept are as they were
    assert len(load_records(out)) == CASES
