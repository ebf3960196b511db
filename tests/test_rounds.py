"""Samples in rounds spread over the run, then the suite-level budget (attnbench.run.rounds): what a record holds after
its later rounds, the shuffled order, the calls not re-timed, the budget kept, and the results file rewritten whole."""

from __future__ import annotations

import dataclasses
import json
import signal
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from rich.console import Console

from attnbench.backends.base import Backend
from attnbench.backends.registry import default_registry
from attnbench.core.case import Case
from attnbench.records.record import case_of
from attnbench.records.results import Record, load_records, replace_records
from attnbench.run import pace_probe, rounds, session
from attnbench.run.options import RunOptions
from attnbench.run.recording import RunInfo
from attnbench.timing.timers import TimingSettings

ROOT = Path(__file__).resolve().parent.parent
SUITE = """name: rounds
device: cpu
backends: [naive, sdpa]
timing: {warmup_ms: 1, budget_ms: 300, min_samples: 3, precision: 0.05, rounds: 3, refine: 0}
sweep: {seq_len: [32, 64], heads: [2], kv_heads: [heads], head_dim: [16], causal: [true], mode: [fwd, fwd_bwd]}
"""


def run(tmp_path: Path, suite: str = SUITE) -> tuple[list[dict], dict]:
    path = tmp_path / "rounds.yaml"
    path.write_text(suite)
    out = tmp_path / "run"
    quiet = Console(file=open("/dev/null", "w"))
    options = RunOptions(cache_dir=tmp_path / "cache")
    session.execute(session.plan(path, options), out, quiet, lambda: False, options)
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return records, json.loads((out / "env.json").read_text())


@pytest.mark.slow
def test_every_ok_record_pools_its_three_rounds_and_every_field_comes_from_all_of_them(tmp_path: Path) -> None:
    records, env = run(tmp_path)
    ok = [r for r in records if r["status"] == "ok"]
    assert len(ok) == 8 and len(records) == 8  # one line per measurement: the later rounds replaced, not appended
    settings = TimingSettings(budget_ms=300, max_samples=1000, rounds=3)
    for r in ok:
        made = r["extra"]["rounds"]
        assert r["samples"] == sum(m["samples"] for m in made) == len(r["times_ms"])
        # Every round the rule allows was made (all three for these microsecond calls on an idle machine), and a
        # round was left out only when the samples before it had spent the shares up to it.
        taken = made[:1]
        for round_number in (2, 3):
            if rounds.due_again(r["times_ms"][: sum(m["samples"] for m in taken)], round_number, settings):
                taken = made[: len(taken) + 1]
        assert taken == made, (r["case_id"], made)
        assert r["time_ms"] == statistics.median(r["times_ms"])
        assert r["tflops"] == r["flops"] / (r["time_ms"] * 1e-3) / 1e12
        assert r["ci_low_ms"] <= r["time_ms"] <= r["ci_high_ms"]
    assert env["rounds"]["retimed"] == sum(len(r["extra"]["rounds"]) - 1 for r in ok) > 0
    # The machine's own pace was timed between the measurements, in windows at least pace_probe.EVERY_S apart.
    probe = env["pace_probe"]
    assert probe["workload"] == pace_probe.WORKLOAD and len(probe["windows_ms"]) >= 2
    assert probe["median_ms"] == pytest.approx(statistics.median(probe["windows_ms"]), rel=1e-6)


class Scripted:
    """A resampler that records who it re-timed, in order, and returns fixed samples."""

    def __init__(self, samples: list[float]) -> None:
        self.samples, self.order = samples, []

    def resample(self, case: Case, backend: Backend, timing: TimingSettings) -> list[float]:
        """As a timer does: samples until the budget is spent (the call that crosses it included) or max_samples."""
        self.order.append((backend.name, case.case_id))
        taken: list[float] = []
        for sample in self.samples[: timing.max_samples]:
            if sum(taken) >= timing.budget_ms:
                break
            taken.append(sample)
        return taken


def stored(tmp_path: Path) -> list[Record]:
    records, _ = run(tmp_path, SUITE.replace("rounds: 3", "rounds: 1"))
    return [Record(**r) for r in records]


def cases_of(records: list[Record]) -> list[Case]:
    return [case_of(r) for r in records]


def backends() -> dict:
    registry = default_registry()
    return {b.name: b for b in registry.resolve(["naive", "sdpa"])}


@pytest.mark.slow
def test_each_later_round_walks_the_measurements_in_its_own_shuffled_order_repeatable_by_the_run_id(
        tmp_path: Path) -> None:
    records = [dataclasses.replace(r, times_ms=[0.5]) for r in stored(tmp_path)]  # every one due in every round
    order = [(r.backend, r.case_id) for r in records]
    settings = TimingSettings(warmup_ms=1, budget_ms=1000, min_samples=1, rounds=3)
    walks = []
    for _ in range(2):
        scripted = Scripted([0.5])
        rounds.later_rounds(list(records), cases_of(records), backends(), scripted, settings, RunInfo("r", "rounds"),
                            "seed-1", lambda: False, lambda _: None, lambda _: None)
        walks.append(scripted.order)
    second, third = walks[0][:8], walks[0][8:]
    assert sorted(second) == sorted(third) == sorted(order)
    assert second != order and third != second  # shuffled, and not the same shuffle twice
    assert walks[0] == walks[1]  # the run id seeds it


@pytest.mark.slow
def test_a_call_slower_than_its_share_is_not_re_timed_and_max_samples_holds(tmp_path: Path) -> None:
    records = stored(tmp_path)
    slow = dataclasses.replace(records[0], times_ms=[40.0])  # a 40 ms call: a 30 ms budget's first round spent it
    full = dataclasses.replace(records[1], times_ms=[0.1, 0.1])  # max_samples reached
    scripted = Scripted([0.1, 0.1, 0.1])
    settings = TimingSettings(budget_ms=30, min_samples=1, max_samples=2, rounds=3)
    rounds.later_rounds([slow, full], cases_of([slow, full]), backends(), scripted, settings, RunInfo("r", "rounds"),
                        "s", lambda: False, lambda _: None, lambda _: None)
    assert scripted.order == []
    assert not rounds.due_again([40.0], 2, settings) and rounds.due_again([5.0], 2, settings)


@pytest.mark.slow
def test_the_refining_spends_at_most_its_budget_and_only_on_intervals_still_too_wide(tmp_path: Path) -> None:
    records = stored(tmp_path)
    wide = [dataclasses.replace(r, noisy=True, times_ms=[1.0, 2.0, 3.0]) for r in records[:4]]
    narrow = [dataclasses.replace(r, noisy=False) for r in records[4:]]
    scripted = Scripted([1.0] * 50)
    settings = TimingSettings(budget_ms=10, min_samples=1, precision=0.05, rounds=1, refine=0.5)
    done = rounds.later_rounds(wide + narrow, cases_of(wide + narrow), backends(), scripted, settings,
                               RunInfo("r", "rounds"), "s", lambda: False, lambda _: None, lambda _: None)
    assert {key for key in scripted.order} <= {(r.backend, r.case_id) for r in wide}
    # The budget is what the samples cost; a last call may cross it, as a timer's does.
    assert done.refine_budget_s == 0.5 * 10 * 8 / 1e3 and 0 < done.refine_s <= done.refine_budget_s + 1e-3


class Steady(Scripted):
    """Each window's samples equal the record's first call: windows that agree, so only their number is lacking."""

    def __init__(self, records: list[Record]) -> None:
        super().__init__([])
        self.first = {(r.backend, r.case_id): r.times_ms[0] for r in records}

    def resample(self, case: Case, backend: Backend, timing: TimingSettings) -> list[float]:
        self.samples = [self.first[backend.name, case.case_id]] * timing.max_samples
        return super().resample(case, backend, timing)


@pytest.mark.slow
def test_the_refining_settles_the_records_its_budget_can_pay_for_rather_than_a_window_for_each(tmp_path: Path) -> None:
    """Four 1 ms calls and four 50 ms calls, one window each, all noisy at ±10% on a CPU (its prior wants 4 agreeing
    windows). The budget (80 ms) pays for the cheap ones' three lacking windows twice over, not for a window each
    of all eight: it settles two cheap records and spends nothing on the dear ones."""
    records = stored(tmp_path)
    cheap = [dataclasses.replace(r, noisy=True, times_ms=[1.0] * 10) for r in records[:4]]
    dear = [dataclasses.replace(r, noisy=True, times_ms=[50.0]) for r in records[4:]]
    steady = Steady(cheap + dear)
    settings = TimingSettings(budget_ms=10, min_samples=1, max_samples=100, precision=0.10, rounds=1, refine=1.0)
    pooled = cheap + dear
    done = rounds.later_rounds(pooled, cases_of(pooled), backends(), steady, settings, RunInfo("r", "rounds"), "s",
                               lambda: False, lambda _: None, lambda _: None)
    settled = [r for r in pooled if not r.noisy]
    assert len(settled) >= 2 and all(r.times_ms[0] == 1.0 for r in settled)
    assert {key for key in steady.order} <= {(r.backend, r.case_id) for r in cheap}
    assert done.refine_s <= done.refine_budget_s + 1e-3


@pytest.mark.slow
def test_the_results_file_is_rewritten_with_the_pooled_records_and_every_other_line_kept(tmp_path: Path) -> None:
    records = stored(tmp_path)
    path = tmp_path / "results.jsonl"
    other = json.dumps({**records[0].to_dict(), "seq_len": 4096}) + "\n"  # an earlier part's record
    path.write_text(other + "".join(json.dumps(r.to_dict()) + "\n" for r in records) + "{cut off\n")
    changed = dataclasses.replace(records[2], time_ms=123.0)
    replace_records(path, [changed])
    lines = path.read_text().splitlines(keepends=True)
    assert lines[0] == other and lines[-1] == "{cut off\n" and len(lines) == len(records) + 2
    assert json.loads(lines[3])["time_ms"] == 123.0
    assert not path.with_name("results.jsonl.tmp").exists()


@pytest.mark.slow
def test_the_rewrite_replaces_the_last_line_of_a_measurement_and_keeps_an_older_one(tmp_path: Path) -> None:
    """A resumed run measures again what a damaged line held and appends it: the later rounds replace what they
    wrote, never the damaged line before it (which would hold the measurement twice)."""
    records = stored(tmp_path)
    path = tmp_path / "results.jsonl"
    damaged = json.dumps({**records[0].to_dict(), "statut": "ok"}) + "\n"
    path.write_text(damaged + json.dumps(records[0].to_dict()) + "\n")
    replace_records(path, [dataclasses.replace(records[0], time_ms=9.0)])
    lines = path.read_text().splitlines(keepends=True)
    assert lines[0] == damaged and json.loads(lines[1])["time_ms"] == 9.0


KILLED_SUITE = """name: killed-rounds
device: cpu
backends: [naive, sdpa-math]
timing: {warmup_ms: 2, budget_ms: 240, min_samples: 3, precision: 0.001, rounds: 3, refine: 2}
sweep: {seq_len: [256, 384, 512, 640, 768], heads: [4], head_dim: [32]}
"""


@pytest.mark.slow
@pytest.mark.parametrize("moment", [0.2, 0.7])
def test_a_kill_during_the_later_rounds_leaves_every_measurement_once_and_whole(tmp_path: Path, moment: float) -> None:
    """SIGKILL at a point of the later rounds and the refining (after the first round wrote all ten records): the
    results file still holds each measurement exactly once, every line a whole record whose samples are the rounds'
    it lists, and `--resume` finds nothing left to measure."""
    suite = tmp_path / "killed.yaml"
    suite.write_text(KILLED_SUITE)  # a precision no call meets, so the rounds and the refining spend every budget
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "attnbench", "run", str(suite), "--out", str(out)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:  # the first round is over when the second is announced
        if "round 2 of 3" in line:
            break
    else:
        pytest.fail(f"the run never reached its second round (exit {proc.wait()})")
    later_s = 0.240 * 10 * (2 / 3 + 2)  # the later rounds' shares and the refining budget, of calls alone
    time.sleep(moment * later_s)
    assert proc.poll() is None, "the run ended before the kill: the moment tests nothing"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a cut or damaged line would be skipped with a warning
        records = load_records(out)
    keys = [r.key for r in records]
    assert len(keys) == 10 and len(set(keys)) == 10, "each measurement once"
    for record in records:
        assert record.status == "ok", record.reason
        assert record.samples == len(record.times_ms) >= 3
        held = record.extra.get("rounds")
        if held is not None:  # a record rewritten after a round: its samples are exactly its rounds'
            assert sum(r["samples"] for r in held) == record.samples
    resumed = subprocess.run([sys.executable, "-m", "attnbench", "run", str(suite), "--resume", str(out)],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(r.key for r in load_records(out)) == sorted(keys), "nothing measured twice or lost"
