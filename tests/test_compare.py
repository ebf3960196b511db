"""compare_runs on the planted fixtures: exactly the planted regression and new OOM, and nothing from noise."""

from __future__ import annotations

import json
import math
import re
import shutil
from dataclasses import fields
from pathlib import Path

import pytest
from rich.console import Console

from attnbench.core.errors import ResultsError
from attnbench.records.parts import Timing
from attnbench.records.results import stored_lines
from attnbench.report.compare_table import (
    comparison_markdown,
    comparison_table,
    machine_warning,
    pace_note,
    version_note,
)
from attnbench.run.pace_probe import WORKLOAD
from attnbench.stats.change_rule import machine_pace
from attnbench.stats.compare import Cause, Reason, Verdict, compare_runs
from attnbench.stats.match import Match

DATA = Path(__file__).parent / "data"
BASE, NEW = DATA / "compare-base", DATA / "compare-new"
REGRESSED = "bf16 · causal · 16 heads · d=128 · fwd · seq 2048"
OOMED = "bf16 · causal · 16 heads · d=128 · fwd · seq 4096"
NOISY = "bf16 · causal · 16 heads · d=128 · fwd · seq 1024"


TIMING = {f.name for f in fields(Timing)}


def rewrite(source: Path, target: Path, **changes: object) -> Path:
    """A copy of a run with some fields of every record changed (or of the first record, for `first_`)."""
    shutil.copytree(source, target)
    lines = (target / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    for i, record in enumerate(records):
        for name, value in changes.items():
            if name.startswith("first_"):
                if i == 0:
                    record[name[len("first_"):]] = value
            elif name not in TIMING or record.get("time_ms") is not None:  # an untimed record stays untimed
                record[name] = value
    (target / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return target


def test_planted_regression_and_new_oom_are_found_and_nothing_else() -> None:
    result = compare_runs(BASE, NEW)
    assert [(m.backend, m.case) for m in result.regressions] == [("sdpa-flash", REGRESSED)]
    assert result.regressions[0].ratio == pytest.approx(1.20, abs=0.01)
    assert [(m.backend, m.case, m.new_status) for m in result.new_failures] == [("naive", OOMED, "oom")]
    assert result.fixed == [] and result.improvements == []
    assert result.verdict == Verdict.BROKE and result.exit_code == 1
    assert result.reasons == (Reason(Cause.NEW_FAILURE, 1), Reason(Cause.REGRESSION, 1))
    assert len(result.matches) == 9 and result.only_in_base == 0 and result.only_in_new == 0


def test_a_slowdown_whose_intervals_overlap_is_noise() -> None:
    result = compare_runs(BASE, NEW)
    noisy = next(m for m in result.matches if m.backend == "sdpa" and m.case == NOISY)
    assert noisy.ratio is not None and noisy.ratio > 1.05  # slower than the threshold ...
    assert noisy.new_ci[0] <= noisy.base_ci[1]  # ... but the new interval reaches down to the base one
    assert not noisy.beyond_noise()
    assert noisy not in result.regressions


def test_a_regression_needs_intervals_apart_not_only_the_threshold(tmp_path: Path) -> None:
    """The planted 20% regression, with the new interval widened until it touches the base one: not judged a
    regression; widened but still apart (and wider than the precision asked, so flagged noisy): still one."""
    base = {(m.backend, m.case): m for m in compare_runs(BASE, NEW).matches}
    planted = base[("sdpa-flash", REGRESSED)]
    assert planted.new_ci[0] > planted.base_ci[1]  # the fixture's intervals are apart
    pace = compare_runs(BASE, NEW).judged_pace
    touching = rewrite(NEW, tmp_path / "touching", ci_low_ms=planted.base_ci[1] * pace)
    assert compare_runs(BASE, touching).regressions == []
    wide_apart = rewrite(NEW, tmp_path / "wide", ci_low_ms=planted.base_ci[1] * 1.001, noisy=True)
    result = compare_runs(BASE, wide_apart)
    assert [(m.backend, m.case) for m in result.regressions] == [("sdpa-flash", REGRESSED)]
    assert ("sdpa-flash", REGRESSED) not in [(m.backend, m.case) for m in result.noisy]


def test_records_without_intervals_fall_back_to_the_iqrs(tmp_path: Path) -> None:
    old_base = rewrite(BASE, tmp_path / "old-base", ci_low_ms=None, ci_high_ms=None, schema_version=0)
    old_new = rewrite(NEW, tmp_path / "old-new", ci_low_ms=None, ci_high_ms=None, schema_version=0)
    result = compare_runs(old_base, old_new)
    assert [(m.backend, m.case) for m in result.regressions] == [("sdpa-flash", REGRESSED)]
    noisy = next(m for m in result.matches if m.backend == "sdpa" and m.case == NOISY)
    assert abs(noisy.new_ms - noisy.base_ms) < noisy.base_iqr + noisy.new_iqr and not noisy.beyond_noise()


def test_geometric_mean_per_backend() -> None:
    geomeans = compare_runs(BASE, NEW).geomean_by_backend
    assert sorted(geomeans) == ["naive", "sdpa", "sdpa-flash"]
    assert geomeans["sdpa-flash"] == pytest.approx(1.2 ** (1 / 3), abs=0.01)  # one of three cases 20% slower
    assert geomeans["naive"] == pytest.approx(1.0, abs=0.02)  # its OOM case has no ratio


def test_identical_runs_report_nothing() -> None:
    result = compare_runs(BASE, BASE)
    assert result.regressions == [] and result.new_failures == [] and result.fixed == [] and result.improvements == []
    assert result.verdict == Verdict.PASSED and result.reasons == ()
    assert all(value == pytest.approx(1.0) for value in result.geomean_by_backend.values())


def test_swapped_runs_turn_the_oom_into_a_fix() -> None:
    result = compare_runs(NEW, BASE)
    assert [(m.backend, m.case) for m in result.fixed] == [("naive", OOMED)]
    assert [(m.backend, m.case) for m in result.improvements] == [("sdpa-flash", REGRESSED)]
    assert result.verdict == Verdict.PASSED and result.exit_code == 0


def test_threshold_above_the_regression_leaves_only_the_oom() -> None:
    result = compare_runs(BASE, NEW, threshold=0.25)
    assert result.regressions == [] and result.reasons == (Reason(Cause.NEW_FAILURE, 1),)


def test_markdown_lists_the_regression_and_the_failure() -> None:
    text = comparison_markdown(compare_runs(BASE, NEW))
    assert "**FAIL**: 1 regression(s), 1 new failure(s)" in text
    regressions = text.split("### Regressions")[1].split("###")[0]
    assert f"| sdpa-flash | {REGRESSED} |" in regressions
    assert re.search(r"\| 1\.(19|20)\d× \(1\.\d+× of the pace\) \|", regressions)
    failures = text.split("### New failures")[1]
    assert f"| naive | {OOMED} | ok | oom | CUDA out of memory" in failures


def test_terminal_table_shows_the_changes() -> None:
    console = Console(record=True, width=240)
    console.print(comparison_table(compare_runs(BASE, NEW)))
    text = console.export_text()
    assert "regression" in text and "new failure" in text and "sdpa-flash" in text and "oom" in text
    assert text.count("geomean") == 3


def test_a_run_mixing_schema_versions_is_refused_and_two_versions_compare_with_a_note(tmp_path: Path) -> None:
    mixed = rewrite(NEW, tmp_path / "mixed", first_schema_version=0)
    with pytest.raises(ResultsError, match=r"mix schema versions \[0, 1\]"):
        compare_runs(BASE, mixed)
    older = rewrite(NEW, tmp_path / "older", schema_version=0)
    compared = compare_runs(BASE, older)
    assert compared.versions == (1, 0) and compared.regressions  # times compare across versions
    assert "BASE's records are schema 1, NEW's 0" in version_note(compared)
    assert version_note(compare_runs(BASE, NEW)) is None


def test_runs_with_nothing_in_common_are_refused(tmp_path: Path) -> None:
    elsewhere = rewrite(NEW, tmp_path / "cpu", device="cpu")
    with pytest.raises(ResultsError, match="no overlapping cases"):
        compare_runs(BASE, elsewhere)


def test_missing_run_is_a_results_error(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="no attnbench results"):
        compare_runs(BASE, tmp_path / "nowhere")


def test_a_wide_spread_is_judged_by_the_interval_it_widened(tmp_path: Path) -> None:
    """Samples spread wide (IQR 1 ms, over 10% of every median here) with an interval still apart from BASE's: the
    distribution-free interval already holds the spread, so the regression stands, and nothing is listed noisy."""
    spread = compare_runs(BASE, rewrite(NEW, tmp_path / "spread-new", time_ms_iqr=1.0))
    assert [(m.backend, m.case) for m in spread.regressions] == [("sdpa-flash", REGRESSED)] and spread.noisy == []


def test_a_noisy_measurement_without_an_interval_is_listed_as_noisy_never_as_a_regression(tmp_path: Path) -> None:
    """A record written before intervals (no ci_low_ms) whose samples spread wide (IQR 0.15 ms, over 10% of the
    planted case's medians of 0.88 and 1.06 ms, under their difference): unsteady, so never judged."""
    noisy_new = rewrite(NEW, tmp_path / "noisy-new", time_ms_iqr=0.15, ci_low_ms=None, ci_high_ms=None, noisy=True,
                        schema_version=0)
    result = compare_runs(BASE, noisy_new)
    assert result.regressions == [] and result.improvements == []
    assert [(m.backend, m.case, m.noise_words()) for m in result.noisy] == [("sdpa-flash", REGRESSED, "new")]
    assert [m.new_status for m in result.new_failures] == ["oom"]  # failures are still judged
    text = comparison_markdown(result)
    assert "### Noisy" in text and re.search(r"1\.201× \(1\.\d+× of the pace\) \(noisy: new\)", text)
    assert "1 change(s) not judged: noisy" in text
    noisy_base = compare_runs(rewrite(BASE, tmp_path / "noisy-base", time_ms_iqr=0.15, ci_low_ms=None, noisy=True,
                                      ci_high_ms=None, schema_version=0), NEW)
    assert noisy_base.regressions == [] and [m.noise_words() for m in noisy_base.noisy] == ["base"]
    console = Console(record=True, width=200)
    console.print(comparison_table(result))
    assert re.search(r"noisy\W+sdpa-flash", console.export_text())


def test_a_measurement_on_a_throttled_gpu_is_never_a_regression(tmp_path: Path) -> None:
    throttled_new = rewrite(NEW, tmp_path / "throttled-new", throttled=True)
    result = compare_runs(BASE, throttled_new)
    assert result.regressions == [] and result.improvements == [] and result.noisy == []
    assert [(m.backend, m.case, m.throttle_words()) for m in result.throttled] == [("sdpa-flash", REGRESSED, "new")]
    assert [m.new_status for m in result.new_failures] == ["oom"]  # failures are still judged
    text = comparison_markdown(result)
    assert "### Throttled GPU" in text and re.search(r"1\.201× \(1\.\d+× of the pace\) \(throttled GPU: new\)", text)
    assert "1 change(s) not judged: throttled GPU" in text and "never judged a regression" in text
    console = Console(record=True, width=200)
    console.print(comparison_table(result))
    shown = console.export_text()
    assert re.search(r"throttled\W+sdpa-flash", shown) and "never judged a regression" in shown
    throttled_base = compare_runs(rewrite(BASE, tmp_path / "throttled-base", throttled=True), NEW)
    assert throttled_base.regressions == [] and [m.throttle_words() for m in throttled_base.throttled] == ["base"]
    # A GPU sampled and found steady (throttled: false) is judged as before.
    steady = compare_runs(rewrite(BASE, tmp_path / "steady-base", throttled=False),
                          rewrite(NEW, tmp_path / "steady-new", throttled=False))
    assert [(m.backend, m.case) for m in steady.regressions] == [("sdpa-flash", REGRESSED)]
    assert "never judged" not in comparison_markdown(steady)


def test_the_threshold_takes_what_its_message_allows() -> None:
    """--threshold's range is 0% to 1000%, both ends included, as the refusal says."""
    from attnbench.cli.main import parse_fraction
    from attnbench.core.errors import AttnbenchError

    assert parse_fraction("1000%") == 10.0 and parse_fraction("0") == 0.0 and parse_fraction("5%") == 0.05
    with pytest.raises(AttnbenchError, match=r"--threshold '1001%': out of range; allowed: 0% to 1000%"):
        parse_fraction("1001%")


def test_a_change_under_the_default_threshold_is_not_judged_however_tight_its_intervals(tmp_path: Path) -> None:
    """A planted slowdown under the default threshold, its interval apart from the baseline's, is not a regression;
    one over it is."""
    from attnbench.stats.compare import DEFAULT_THRESHOLD

    records = [json.loads(line) for line in (BASE / "results.jsonl").read_text().splitlines()]
    ok = next(r for r in records if r["status"] == "ok")
    for factor, regressed in ((1 + 0.8 * DEFAULT_THRESHOLD, False), (1 + 1.5 * DEFAULT_THRESHOLD, True)):
        slow = dict(ok, time_ms=ok["time_ms"] * factor, ci_low_ms=ok["time_ms"] * factor * 0.995,
                    ci_high_ms=ok["time_ms"] * factor * 1.005, noisy=False)
        base = dict(ok, ci_low_ms=ok["time_ms"] * 0.995, ci_high_ms=ok["time_ms"] * 1.005, noisy=False)
        a, b = tmp_path / f"a{factor}", tmp_path / f"b{factor}"
        for folder, rec in ((a, base), (b, slow)):
            folder.mkdir()
            (folder / "results.jsonl").write_text(json.dumps(rec) + "\n")
        result = compare_runs(a, b)
        assert bool(result.regressions) is regressed and (result.verdict == Verdict.REGRESSED) is regressed


def test_a_run_from_another_machine_is_said_first(tmp_path: Path) -> None:
    """Against a run of another machine every case reads as a 2x change: compare says so before any ratio."""
    base, new = tmp_path / "base", tmp_path / "new"
    shutil.copytree(BASE, base)
    shutil.copytree(BASE, new)
    env = {"device": "cpu", "device_name": "AMD EPYC", "cpu": "AMD EPYC", "cpu_count": 2, "torch": "2.13.0+cpu",
           "libraries": {"xformers": "0.0.35"}}
    (base / "env.json").write_text(json.dumps(env))
    (new / "env.json").write_text(json.dumps(dict(env, device_name="Intel Xeon", cpu="Intel Xeon",
                                                  libraries={"xformers": None})))
    result = compare_runs(base, new)
    assert result.machine_notes == ["device_name: AMD EPYC vs Intel Xeon", "cpu: AMD EPYC vs Intel Xeon"]
    assert result.software_notes == ["xformers: 0.0.35 vs None"]
    assert result.verdict == Verdict.NOT_JUDGED and result.reasons == (Reason(Cause.OTHER_MACHINE, 2),)
    assert result.exit_code == 3 and result.raw  # said first, judged raw, and not a verdict on a kernel
    assert machine_warning(result).startswith("NOT THE SAME MACHINE: device_name: AMD EPYC vs Intel Xeon")
    assert comparison_markdown(result).splitlines()[2].startswith("**NOT THE SAME MACHINE")
    (new / "env.json").write_text(json.dumps(env))
    assert machine_warning(compare_runs(base, new)) is None
    (new / "env.json").write_text(json.dumps({"": None}))  # damaged: it states no machine, so none differs
    unknown = compare_runs(base, new)
    assert unknown.machine_notes == [] and unknown.exit_code in (0, 1)


def ratio_match(i: int, ratio: float, backend: str | None = None) -> Match:
    """A matched measurement of ratio NEW/BASE, both intervals ±1% (apart from 1 once the ratio is off by 2%)."""
    return Match(key=(i,), backend=backend or f"b{i}", case=f"c{i}", base_status="ok", new_status="ok", base_ms=1.0,
                 new_ms=ratio, base_iqr=0.0, new_iqr=0.0, base_ci=(0.99, 1.01), new_ci=(ratio * 0.99, ratio * 1.01))


def test_a_ratio_within_the_runs_own_spread_of_the_pace_is_no_regression_and_one_beyond_it_is() -> None:
    """Two runs whose 20 measurements' ratios wander ±6% around a pace of 1.05 (a robust spread of 4.5%): one at
    1.16× (10.5% off the pace: intervals apart, past the 10% threshold, but within the 2.8 spreads that 21 ratios
    judged at once ask) is not judged a regression; one at 1.40× is."""
    from attnbench.stats.compare import Comparison

    wander = [1.05 * (1 + 0.06 * ((i % 5) - 2) / 2) for i in range(20)]
    for odd, judged in ((1.16, False), (1.40, True)):
        ratios = wander + [odd]
        comparison = Comparison("base", "new", 0.10, [ratio_match(i, r) for i, r in enumerate(ratios)],
                                device="cpu")
        assert comparison.case_bar * comparison.spread > math.log(1.16 / 1.05)
        assert [m.backend for m in comparison.regressions] == (["b20"] if judged else []), (odd, comparison.spread)


def test_a_backend_slower_on_every_case_within_each_cases_noise_is_a_regression_across_the_board() -> None:
    """Five backends of 16 cases whose ratios wander ±8% around 1: one made 15% slower on every case (each case
    within the per-case bar) fails the comparison as one regression across the board; without it nothing does."""
    from attnbench.stats.compare import Comparison

    def comparison(slower: float) -> Comparison:
        matches = [ratio_match(16 * b + i, (1 + 0.08 * ((i * 7 + b * 3) % 9 - 4) / 4) * (slower if b == 0 else 1.0),
                               f"k{b}") for b in range(5) for i in range(16)]
        return Comparison("base", "new", 0.10, matches, device="cpu")

    quiet, slow = comparison(1.0), comparison(1.15)
    assert not quiet.backend_regressions and not quiet.regressions and quiet.verdict == Verdict.PASSED
    assert slow.regressions == [], "no single case is beyond the per-case bar"
    assert [(b.backend, b.cases) for b in slow.backend_regressions] == [("k0", 16)]
    assert slow.reasons == (Reason(Cause.BACKEND_REGRESSION, 1),) and slow.verdict == Verdict.REGRESSED
    assert "across the board" in comparison_markdown(slow)


def test_a_measurement_is_judged_against_its_own_backends_spread_when_that_wanders_more_than_the_run() -> None:
    """Two backends of 16 cases: one whose ratios wander ±4% (a fused kernel), one ±16% (a math path). A case 1.25×
    off the pace is a regression in the quiet backend and within the noise of the wandering one."""
    from attnbench.stats.compare import Comparison

    def comparison(odd_backend: int) -> Comparison:
        matches = [ratio_match(16 * b + i, 1.25 if (b, i) == (odd_backend, 0) else
                               1 + (0.04 if b == 0 else 0.16) * ((i * 5) % 9 - 4) / 4, f"k{b}")
                   for b in range(2) for i in range(16)]
        return Comparison("base", "new", 0.10, matches, device="cpu")

    assert [m.backend for m in comparison(0).regressions] == ["k0"]
    assert comparison(1).regressions == []


# Known truths: edits of a real run of suites/quick.yaml (64 ok measurements of naive, sdpa, sdpa-math and sdpa-flash),
# whose true change is what the edit made it.
QUICK = Path(__file__).parents[1] / "reports" / "cpu-Intel-Xeon-2core-quick"


def edited(target: Path, factor: object = 1.0, env: dict | None = None, keep: int | None = None) -> Path:
    """A copy of the quick run whose ok records' times (median, interval, samples) are multiplied by `factor`: a
    number, or a function of (backend, index among ok records); only the first `keep` ok records when given, and
    env.json updated with `env`."""
    target.mkdir()
    records = stored_lines(QUICK)
    ok = [r for r in records if r["status"] == "ok"][:keep]
    for i, record in enumerate(ok):
        f = factor(record["backend"], i) if callable(factor) else factor
        for name in ("time_ms", "ci_low_ms", "ci_high_ms", "time_ms_min", "time_ms_iqr"):
            if record.get(name) is not None:
                record[name] *= f
        record["times_ms"] = [t * f for t in record["times_ms"]]
    (target / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ok))
    base_env = json.loads((QUICK / "env.json").read_text())
    (target / "env.json").write_text(json.dumps({**base_env, **(env or {})}))
    return target


def jitter(spread: float) -> object:
    """A factor within ±`spread`, fixed per measurement (no two alike), as identical runs wander."""
    return lambda backend, i: 1 + spread * math.sin(7.3 * i + len(backend))


@pytest.mark.parametrize("how", ["same machine", "absolute", "another torch"])
def test_every_time_thirty_percent_slower_fails_the_gate(tmp_path: Path, how: str) -> None:
    base = edited(tmp_path / "base")
    env = {"torch": "2.14.0+cpu", "libraries": {"torch": "2.14.0+cpu"}} if how == "another torch" else None
    result = compare_runs(base, edited(tmp_path / "new", 1.30, env), relative=how != "absolute")
    assert result.pace == pytest.approx(1.30)
    assert result.exit_code == 1 and result.raw
    assert sorted(b.backend for b in result.backend_regressions) == ["naive", "sdpa", "sdpa-flash", "sdpa-math"]
    if how == "same machine":
        assert result.pace_slower and "a finding that fails the gate" in pace_note(result)


def test_three_of_four_backends_slower_are_named_and_the_fourth_is_not(tmp_path: Path) -> None:
    base = edited(tmp_path / "base")
    new = edited(tmp_path / "new", lambda backend, i: 1.0 if backend == "naive" else 1.25)
    result = compare_runs(base, new)
    assert sorted(b.backend for b in result.backend_regressions) == ["sdpa", "sdpa-flash", "sdpa-math"]
    assert {m.backend for m in result.regressions} <= {"sdpa", "sdpa-flash", "sdpa-math"}
    assert result.improvements == [] and result.exit_code == 1
    # The pace (1.25: three quarters of the ratios) is beyond the noise, but naive did not move with it: no shared
    # slowdown is claimed (a real batch of planted runs counted that claim as blaming naive too).
    assert not result.pace_slower and result.unshared == ["naive"] and "not shared: naive did not" in pace_note(result)
    assert "every kernel together slower" not in comparison_markdown(result)


@pytest.mark.parametrize("keep", [None, 3, 7, 8])
def test_a_three_percent_jitter_passes_at_any_count_of_matches(tmp_path: Path, keep: int | None) -> None:
    result = compare_runs(edited(tmp_path / "base", keep=keep), edited(tmp_path / "new", jitter(0.03), keep=keep))
    assert result.exit_code == 0 and not result.regressions and not result.backend_regressions, \
        comparison_markdown(result)


@pytest.mark.parametrize("keep", [3, 7, 8, None])
def test_one_measurement_half_again_slower_fails_at_any_count_of_matches(tmp_path: Path, keep: int | None) -> None:
    slower = jitter(0.03)
    new = edited(tmp_path / "new", lambda backend, i: 1.5 if i == 1 else slower(backend, i), keep=keep)  # type: ignore[operator]
    result = compare_runs(edited(tmp_path / "base", keep=keep), new)
    assert [m.key for m in result.regressions] == [result.matches[1].key] and result.exit_code == 1


def probe(median: float, windows: int = 20) -> dict:
    """An env.json pace_probe whose windows wander ±2% around `median` (attnbench.run.pace_probe)."""
    return {"workload": WORKLOAD, "windows_ms": [median * (1 + 0.02 * math.sin(i)) for i in range(windows)],
            "median_ms": median}


@pytest.mark.slow
def test_a_machine_that_drifted_with_every_kernel_passes_and_says_how_far(tmp_path: Path) -> None:
    base = edited(tmp_path / "base", env={"pace_probe": probe(1.0)})
    new = edited(tmp_path / "new", 1.18, env={"pace_probe": probe(1.18)})
    result = compare_runs(base, new)
    assert result.exit_code == 0 and not result.backend_regressions and not result.regressions
    assert "the machine's own pace, a reference workload timed through both runs, was 1.180×" in pace_note(result)
    # The same drift with the machine steady is every kernel's: it fails.
    steady = compare_runs(base, edited(tmp_path / "steady", 1.30, env={"pace_probe": probe(1.0)}))
    assert steady.pace_slower and steady.exit_code == 1


def test_three_of_four_backends_slower_on_a_machine_gone_faster_are_named(tmp_path: Path) -> None:
    base = edited(tmp_path / "base", env={"pace_probe": probe(1.0)})
    new = edited(tmp_path / "new", lambda backend, i: 0.92 * (1.0 if backend == "naive" else 1.25),
                 env={"pace_probe": probe(0.92)})
    result = compare_runs(base, new)
    assert sorted(b.backend for b in result.backend_regressions) == ["sdpa", "sdpa-flash", "sdpa-math"]
    assert result.improvements == [] and result.unshared == ["naive"] and result.exit_code == 1


def test_the_machine_pace_is_not_divided_out_across_software(tmp_path: Path) -> None:
    base = edited(tmp_path / "base", env={"pace_probe": probe(1.0)})
    env = {"torch": "2.14.0+cpu", "libraries": {"torch": "2.14.0+cpu"}, "pace_probe": probe(1.30)}
    result = compare_runs(base, edited(tmp_path / "new", 1.30, env))
    assert result.machine is None and result.exit_code == 1 and len(result.backend_regressions) == 4


def test_the_machine_pace_needs_the_same_workload_on_both_sides() -> None:
    assert machine_pace(probe(1.0), dict(probe(1.2), workload="another")) is None
    assert machine_pace(probe(1.0), None) is None
    assert machine_pace(probe(1.0), probe(1.2)).value == pytest.approx(1.2)  # type: ignore[union-attr]
