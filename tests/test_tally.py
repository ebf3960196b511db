"""Where a run's wall goes: each record's phases from its fields, the run's own phases, the line that says where each
second went, and a CPU run whose env.json accounts for its wall but a stated remainder."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from attnbench.records.results import load_records
from attnbench.run.tally import PHASES, Phases, Tally, actual, record_phases, wall_line, wall_phases

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "reports" / "NVIDIA-H200-20261204-c671d98"
# The share of a small CPU run's wall that no phase may leave unattributed (docs/run-time.md).
UNATTRIBUTED_CPU = 0.10


def test_a_recorded_h200_measurement_is_split_into_phases_by_its_own_fields() -> None:
    """The first flex record of the 2026-12-04 H200 run: its setup parts (compile, the rest of prepare, the profile
    with its trace, as that run recorded them), its samples and its warm-up; a record written before phases_ms
    holds no timer, check or guards phase."""
    records = load_records(H200 / "check")
    flex = next(r for r in records if r.backend == "flex")
    phases = record_phases(flex)
    parts = flex.extra["setup_parts"]
    assert phases["compile"] == pytest.approx(parts["compile"] / 1e3)
    assert phases["prepare"] == pytest.approx((parts["mask_build"] + parts["other"]) / 1e3)
    assert phases["profile"] == pytest.approx(parts["profile"] / 1e3)
    assert phases["samples"] == pytest.approx(sum(flex.times_ms) / 1e3)
    assert set(phases) <= {"samples", "warmup", "compile", "prepare", "profile", "check"}
    assert phases["check"] == pytest.approx(flex.extra["check_ms"] / 1e3)  # a forward's checked call, before phases_ms
    tally = Tally.of(records)
    assert tally.phases["samples"] == pytest.approx(1.27, abs=0.01)
    assert sum(tally.phases[p] for p in ("compile", "prepare", "profile")) == pytest.approx(66.27, abs=0.01)
    assert tally.phases["reference"] == pytest.approx(6.21, abs=0.01)
    assert tally.phases["check"] == pytest.approx(10.32, abs=0.01)


def test_the_timer_phase_is_its_stage_less_its_samples_and_a_sampled_check_counts_once() -> None:
    records = load_records(H200 / "check")
    naive = records[0]
    extra = {**naive.extra, "phases_ms": {"timer": 100.0, "check": 20.0, "guards": 3.0}, "check_sampled": True,
             "check_call_ms": 2.5}
    phases = record_phases(dataclasses.replace(naive, extra=extra))
    samples, warmup = sum(naive.times_ms) / 1e3, naive.extra["warmup_ms"] / 1e3
    assert phases["timer"] == pytest.approx(0.1 - samples - warmup)
    assert phases["check"] == pytest.approx(0.0175)  # the checked call joined the samples: counted there
    assert phases["guards"] == pytest.approx(0.003)


def test_the_wall_line_names_the_largest_phases_first_and_what_is_left() -> None:
    line = wall_line({"samples": 1.3, "worker_start": 52.0, "report": 4.04, "memory": 0.01}, 60.0)
    assert line == "wall 60.0 s: worker start 52.0 s, report 4.0 s, samples 1.3 s, unattributed 2.7 s (4%)"
    run = Phases()
    run.add("worker_start", 5.0, 1)
    run.add("worker_start", 4.0, 1)
    tally = Tally(phases={"samples": 4.0})
    assert wall_phases(tally, run.seconds, workers=2) == {"samples": 2.0, "worker_start": 9.0}
    made = actual(tally, run, 20.0, 3, workers=2)
    assert made["phase_counts"] == {"worker_start": 2} and made["unattributed_s"] == 9.0
    with pytest.raises(AssertionError):
        run.add("lunch", 1.0)


@pytest.mark.slow
def test_a_cpu_runs_phases_sum_to_its_wall_but_a_stated_remainder(tmp_path: Path) -> None:
    """Isolated and traced, so the worker's start and the trace are phases too: env.json's `actual.phases_s` and the
    line before the last hold every phase, and what they leave is under UNATTRIBUTED_CPU of the wall."""
    suite = tmp_path / "small.yaml"
    suite.write_text("name: small\ndevice: cpu\ntiming: {warmup_ms: 2, budget_ms: 10, min_samples: 3}\n"
                     "sweep:\n  seq_len: [64, 128]\n  heads: [2]\n  head_dim: [16]\n  causal: [true]\n"
                     "  mode: [fwd, fwd_bwd]\n")
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "attnbench", "run", str(suite), "--out", str(out), "--isolate",
                           "--trace", "--backend", "naive", "--backend", "sdpa", "--cache-dir",
                           str(tmp_path / "cache")], capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    done = json.loads((out / "env.json").read_text())["actual"]
    phases = done["phases_s"]
    assert set(phases) <= set(PHASES)
    for name in ("startup", "calibration", "worker_start", "reference", "check", "samples", "profile", "trace",
                 "guards", "report"):
        assert phases[name] > 0, name
    assert done["phase_counts"] == {"worker_start": 1}
    rest = done["wall_s"] - sum(phases.values())
    assert rest == pytest.approx(done["unattributed_s"], abs=0.02)
    assert 0 <= rest <= UNATTRIBUTED_CPU * done["wall_s"], done
    said = re.fullmatch(r"wall ([\d.]+) s: (.*), unattributed (-?[\d.]+) s \((-?\d+)%\)",
                        proc.stderr.strip().splitlines()[-2])
    assert said and float(said[1]) == pytest.approx(done["wall_s"], abs=0.051), proc.stderr[-500:]
    assert float(said[3]) == pytest.approx(rest, abs=0.06)
    assert f"worker start {phases['worker_start']:.1f} s" in said[2]


def test_the_manual_names_every_phase_as_the_code_does_and_the_bound_on_what_they_leave() -> None:
    text = (ROOT / "docs" / "run-time.md").read_text()
    section = text.split("## Where the time goes", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| (.+) \|$", section, flags=re.M))
    assert rows == PHASES
    assert f"held under {UNATTRIBUTED_CPU:.0%} of the\nwall" in section
