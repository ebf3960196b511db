"""`attnbench ab`: the rounds' order (A B B A ...), the pairing of A's and B's rounds, the paired verdict on a
slowdown planted in B only and measured for real (a backend that spins), the rule's values, and bad input."""

from __future__ import annotations

import json
import math
import sys
import venv
from collections import defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.records.results import load_records
from attnbench.report.ab_text import paired_words, result_dict
from attnbench.run.ab import order
from attnbench.stats.ab import AbVerdict, Paired, min_pairs, pair_up

ROOT = Path(__file__).resolve().parents[1]
SUITE = """\
name: ab-tiny
device: cpu
backends: [sdpa-flash]
timing: {warmup_ms: 2, budget_ms: 12, min_samples: 3}
sweep: {batch: [1], seq_len: [128, 256], heads: [4], head_dim: [32], dtype: [float32], causal: [true], mode: [fwd]}
"""
ROUNDS = 6
HERE = f"PYTHONPATH={ROOT}"  # a side's Python imports this checkout's attnbench, installed or not


def test_rounds_alternate_which_side_goes_first() -> None:
    assert [side for pair in order(6) for side in pair] == list("ABBAABBAABBA")


def test_the_rule_needs_every_pair_of_six_to_agree_and_the_change_to_pass_the_threshold() -> None:
    assert min_pairs() == 6  # the fewest pairs whose sign-test interval reaches 95% (96.9%)
    slowed = Paired.of([math.log(1.15)] * 6)
    assert slowed.verdict(0.05) == AbVerdict.SLOWER and slowed.ratio == pytest.approx(1.15)
    assert Paired.of([math.log(1.15)] * 5 + [-0.01]).verdict(0.05) == AbVerdict.UNCHANGED  # one pair the other way
    assert Paired.of([math.log(1.03)] * 6).verdict(0.05) == AbVerdict.WITHIN
    assert Paired.of([math.log(0.8)] * 6).verdict(0.05) == AbVerdict.FASTER
    too_few = Paired.of([math.log(1.5)] * 5)
    assert too_few.verdict(0.05) == AbVerdict.UNCHANGED and "not judged" in paired_words(too_few, 0.05)


@pytest.mark.slow
def test_a_slowdown_planted_in_b_only_is_caught_paired_and_interleaved(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))  # the planted backend: benchmarks/verdict_batch.py
    (tmp_path / "s.yaml").write_text(SUITE)
    out = tmp_path / "ab"
    result = CliRunner().invoke(app, [
        "ab", str(tmp_path / "s.yaml"), "--a", sys.executable, "--b", sys.executable, "--a-env", HERE,
        "--b-env", HERE, "--b-env", "PLANTED_SLOWDOWN=0.5", "--plugin", "benchmarks.verdict_batch:Planted",
        "--backend", "sdpa-flash", "--backend", "planted", "--rounds", str(ROUNDS), "--out", str(out)])
    assert result.exit_code == 1, result.output
    summary = json.loads((out / "ab.json").read_text())
    verdicts = {g["name"]: g for g in summary["result"]["backends"]}
    assert verdicts["planted"]["verdict"] == "slower"
    assert 1.3 < verdicts["planted"]["ratio"] < 1.8  # spinning half of each call's time again
    assert verdicts["sdpa-flash"]["ratio"] < 1.2 and verdicts["sdpa-flash"]["verdict"] != "slower"
    assert summary["result"]["regressions"][0] == "planted" and summary["exit_code"] == 1

    # The order: each measurement's sides A B B A ..., and a pair's two rounds back to back.
    sequence = [line.split(" ", 3) for line in summary["sequence"]]
    sides = defaultdict(list)
    for number, side, backend, case_id in sequence:
        sides[(backend, case_id)].append((int(number), side))
    assert len(sides) == 4
    for made in sides.values():
        assert [side for _, side in made] == list("ABBAABBAABBA")
        assert [number for number, _ in made] == [r for r in range(1, ROUNDS + 1) for _ in "AB"]
    for i in range(0, len(sequence), 2):
        assert sequence[i][0] == sequence[i + 1][0] and sequence[i][2:] == sequence[i + 1][2:]
        assert {sequence[i][1], sequence[i + 1][1]} == {"A", "B"}

    # The pairing: both sides' records in their own run folders, each round numbered; a measurement's pairs are its
    # rounds' ln(B/A), and judging the folders again gives ab.json's verdicts.
    a = load_records(out / "a")
    b = load_records(out / "b")
    assert {r.extra["ab"] for r in a} == {"A"} and {r.extra["ab"] for r in b} == {"B"}
    assert all([x["round"] for x in r.extra["rounds"]] == list(range(1, ROUNDS + 1)) for r in a + b)
    again = pair_up(a, b)
    assert result_dict(again)["backends"] == summary["result"]["backends"]
    first = again.measurements[0]
    a0 = next(r for r in a if (r.case_id, r.backend) == (first.case_id, first.backend))
    b0 = next(r for r in b if (r.case_id, r.backend) == (first.case_id, first.backend))
    assert first.log_ratios == pytest.approx([math.log(y["median_ms"] / x["median_ms"])
                                              for x, y in zip(a0.extra["rounds"], b0.extra["rounds"], strict=False)])
    env = {side: json.loads((out / side / "env.json").read_text()) for side in "ab"}
    assert env["b"]["ab"]["env"]["PLANTED_SLOWDOWN"] == "0.5" and "PLANTED_SLOWDOWN" not in env["a"]["ab"]["env"]
    assert env["a"]["torch"] == env["b"]["torch"]  # each side's own facts, read in its own worker
    assert "B slower by" in (out / "ab.md").read_text() and (out / "ab.html").exists()


@pytest.mark.slow
def test_a_python_that_cannot_import_torch_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)  # a real interpreter, without torch or attnbench
    (tmp_path / "s.yaml").write_text(SUITE)
    out = tmp_path / "ab"
    result = CliRunner().invoke(app, ["ab", str(tmp_path / "s.yaml"), "--a", sys.executable, "--a-env", HERE,
                                      "--b", str(bare / "bin" / "python"), "--out", str(out)])
    assert result.exit_code == 2
    assert "--b " in result.output and "No module named" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("args, words", [
    (["--b", "/no/such/python"], "no such Python executable"),
    (["--b", sys.executable, "--rounds", "5"], "at least 6 rounds"),
    (["--b", sys.executable, "--b-env", "NOEQUALS"], "expected NAME=VALUE"),
])
def test_bad_options_are_one_line_and_exit_2(tmp_path: Path, args: list[str], words: str) -> None:
    (tmp_path / "s.yaml").write_text(SUITE)
    result = CliRunner().invoke(app, ["ab", str(tmp_path / "s.yaml"), "--a", sys.executable, "--a-env", HERE,
                                      *args, "--out", str(tmp_path / "ab")])
    assert result.exit_code == 2 and words in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "ab").exists()


@pytest.mark.slow
def test_a_measurement_b_breaks_fails_the_gate_and_b_s_worker_is_replaced(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))  # tests/ab_faults.py
    (tmp_path / "s.yaml").write_text(SUITE)
    out = tmp_path / "ab"
    result = CliRunner().invoke(app, [
        "ab", str(tmp_path / "s.yaml"), "--a", sys.executable, "--b", sys.executable, "--a-env", HERE,
        "--b-env", HERE, "--b-env", "AB_FAULT_EXIT=1", "--plugin", "tests.ab_faults:ExitsWhereTold",
        "--backend", "sdpa", "--backend", "exits-where-told", "--out", str(out)])
    assert result.exit_code == 1, result.output
    summary = json.loads((out / "ab.json").read_text())
    broken = [u for u in summary["result"]["unpaired"] if u["broken_in_b"]]
    assert [(u["backend"], u["a_status"], u["b_status"]) for u in broken] == [("exits-where-told", "ok", "error")] * 2
    assert summary["result"]["regressions"] == [f"exits-where-told {u['case_id']}: error" for u in broken]
    assert all("exited with code 3" in u["reason"] for u in broken)  # how B's worker ended, in B's record
    # B's worker died twice in round 1 and was replaced each time: sdpa still has all its pairs on both cases.
    assert [m["pairs"] for m in summary["result"]["measurements"]] == [ROUNDS, ROUNDS]
    assert len(json.loads((out / "b" / "env.json").read_text())["ab"]["worker_deaths"]) == 2


@pytest.mark.slow
def test_ctrl_c_stops_and_writes_and_judges_the_rounds_made(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess

    (tmp_path / "s.yaml").write_text(SUITE)
    out = tmp_path / "ab"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "attnbench", "ab", str(tmp_path / "s.yaml"), "--a", sys.executable, "--b",
         sys.executable, "--rounds", "60", "--out", str(out)],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env, cwd=tmp_path)
    assert process.stderr is not None
    for line in process.stderr:
        if line.startswith("round 3 of 60"):
            process.send_signal(signal.SIGINT)
            break
    rest = process.stderr.read()
    assert process.wait(120) == 130
    assert "stopping after the current measurement" in rest and "stopped: writing and judging" in rest
    summary = json.loads((out / "ab.json").read_text())
    pairs = [m["pairs"] for m in summary["result"]["measurements"]]
    assert len(pairs) == 2 and all(2 <= n < 60 for n in pairs)  # the rounds made before the stop, paired
    assert all(m["verdict"] == "unchanged" for m in summary["result"]["measurements"])
    assert len(load_records(out / "a")) == len(load_records(out / "b")) == 2
