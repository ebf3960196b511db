"""recommend: per bucket of shapes, the backend to call, from the committed H200 runs and from planted runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

import attnbench.report.dispatch_table as dispatch_table
from attnbench.cli.main import app
from attnbench.core.errors import AttnbenchError
from attnbench.core.interval import RUN_TO_RUN_NOISE
from attnbench.core.policy import percent
from attnbench.records.record import Status
from attnbench.records.results import results_path, stored_lines
from attnbench.stats.dispatch import DispatchTable, Shape, length_band
from attnbench.stats.metric import TIME
from attnbench.stats.pooling import Trouble
from attnbench.stats.recommend import Contest, Decision, Exclusion, Unranked, recommend_runs
from tests.helpers import committed_runs

ROOT = Path(__file__).resolve().parent.parent
H200 = committed_runs("NVIDIA-H200-*/run")
CPU = ROOT / "reports" / "cpu-AMD-EPYC-2core-long"


def record(backend: str, ms: float, low: float | None = None, high: float | None = None, **overrides: Any) -> dict:
    """An ok CUDA record of a 4K causal bf16 forward; its interval is [low, high] (default ±0.5%)."""
    base: dict[str, Any] = dict(
        schema_version=1, run_id="r1", suite="t", timestamp="2026-01-01T00:00:00+00:00", backend=backend,
        kernel=f"{backend} kernel", device="cuda", device_name="NVIDIA H200", dtype="bfloat16", batch=1,
        seq_len=4096, kv_seq_len=4096, heads=16, kv_heads=16, head_dim=128, causal=True, window=None, mode="fwd",
        status="ok", reason=None, time_ms=ms, time_ms_iqr=ms * 0.002, samples=20, times_ms=[ms] * 20,
        ci_low_ms=ms * 0.995 if low is None else low, ci_high_ms=ms * 1.005 if high is None else high,
        ci_level=0.95, noisy=False, throttled=False, rows_checked=4096,
    )
    base.update(overrides)
    base["case_id"] = f"cuda-bf16-b1-s{base['seq_len']}-h{base['heads']}-kv{base['kv_heads']}-d128-causal-fwd"
    return base


# A failure's fields of `record`: it carries no timing.
UNTIMED = dict(time_ms=None, time_ms_iqr=None, samples=0, times_ms=[], ci_low_ms=None, ci_high_ms=None, ci_level=None)


def write_run(directory: Path, records: list[dict], run_id: str = "r1", timestamp: str = "2026-01-01T00:00:00",
              device: str = "cuda", name: str = "NVIDIA H200") -> Path:
    directory.mkdir(parents=True)
    for r in records:
        r["run_id"] = run_id
    (directory / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    env = {"run_id": run_id, "timestamp": timestamp, "device": device, "device_name": name, "torch": "2.11.0",
           "libraries": {"torch": "2.11.0", "xformers": None}, "git_commit": "abc"}
    (directory / "env.json").write_text(json.dumps(env))
    return directory


def only(tmp_path: Path, *records: dict) -> Decision:
    """The one decision of a run holding these records (one case)."""
    decisions = recommend_runs([write_run(tmp_path / "run", list(records))]).decisions
    assert len(decisions) == 1
    return decisions[0]


@pytest.fixture(scope="module")
def h200() -> Any:
    return recommend_runs(H200)


def row_for(result: Any, **shape: Any) -> Decision:
    bucket = Shape(**{"heads": 16, "head_dim": 128, "dtype": "bfloat16", **shape}).bucket()
    return next(d for d in result.decisions if d.bucket == bucket)


def test_the_committed_h200_runs_name_a_winner_or_a_tie_with_the_gates_applied(h200: Any) -> None:
    assert len(H200) == 4 and len(h200.decisions) == 16
    assert {d.decision for d in h200.decisions} <= {"winner", "tie", "unsettled"}
    # With a 1024-token window at 16K, flex skips the masked blocks: it wins alone, far ahead of sdpa (cuDNN).
    window = row_for(h200, seq_len=16384, kv_heads=16, window=1024)
    assert (window.decision, window.backend, window.runner_up) == ("winner", "flex", "sliding-window")
    assert window.default_ratio == pytest.approx(6.867 / 0.436, rel=0.01)
    assert window.margin is not None and window.margin > 1  # the runner-up's interval is apart, above
    # At 16K without a window, sdpa's timings are noisy (intervals wider than ±1%), not throttled: they count with
    # their wider interval, which still lies apart from flex's, 1.39x below it. sdpa (auto -> cuDNN) and
    # sdpa-cudnn ran one kernel: one candidate, under the default's name, never a split or a tie with itself.
    dense = row_for(h200, seq_len=16384, kv_heads=16)
    assert (dense.decision, dense.backend, dense.leader, dense.contested) == ("winner", "sdpa", "sdpa", ())
    assert dense.margin == pytest.approx(1.3855, rel=1e-3)
    assert Exclusion("sdpa-cudnn", Unranked.FOLDED,
                     "same kernel as sdpa, one candidate: torch 2.11.0 sdpa CUDNN_ATTENTION") in dense.excluded
    assert dense.folded == {"sdpa-cudnn": "sdpa"}  # the report names it "sdpa = sdpa-cudnn" from this
    # At 16K fwd+bwd the same kernel under two names was a tie before; it is the default, alone, now.
    one = row_for(h200, seq_len=16384, kv_heads=16, mode="fwd_bwd")
    assert (one.decision, one.backend, one.tie) == ("winner", "sdpa", ("sdpa",))
    assert one.default_ratio == 1.0


def test_no_troubled_or_failed_record_ever_decides(h200: Any) -> None:
    runs = {run.run_id: run for run in h200.runs}
    for d in h200.decisions:
        for backend, numbers in d.numbers.items():
            for n in numbers:
                rec = next(r for r in reversed(runs[n.run_id].records)
                           if r.backend == backend and r.case_id == n.case_id)
                assert rec.status == "ok" and not rec.throttled and rec.repeatable is not False, \
                    (backend, n)
        if d.decision == "winner":
            assert d.tie == (d.backend,) and d.margin is not None and d.margin > 1


def test_the_json_follows_its_schema_and_the_dispatch_helper_answers_the_same(h200: Any, tmp_path: Path) -> None:
    data = dispatch_table.to_json(h200.decisions, h200.runs, h200.metric)
    jsonschema.validate(data, dispatch_table.schema())
    assert data["gpu"] == "NVIDIA H200" and [r["run_id"] for r in data["runs"]] == [
        "a9d1b0bac54f", "093d64bb0106", "6275c2881691", "72df0c1bdf00"]  # oldest first
    assert data["rows"][0]["versions"]["torch"] == "2.11.0+cu130" and data["rows"][0]["versions"]["cudnn"] == 91900
    path = tmp_path / "dispatch.json"
    path.write_text(json.dumps(data))
    table = DispatchTable.load(path)
    for d in h200.decisions:
        first = d.numbers[d.leader][0] if d.leader else None
        assert first is not None
        b = d.bucket
        shape = Shape(seq_len=b.seq_len[0], heads=b.heads, kv_heads=b.kv_heads, head_dim=b.head_dim,
                      dtype="bf16", causal=b.causal, window=b.window, mode=b.mode)
        choice = table.choose(shape)
        assert (choice.backend if choice else None) == d.backend
    # 6000 tokens fall in the 4K-8K band; a head size never measured gets no answer, not the nearest bucket's.
    assert table.choose(seq_len=6000, heads=16, kv_heads=16, head_dim=128, dtype="bf16", window=1024).backend == "flex"
    assert table.choose(6000, 16, 16, 128, "torch.bfloat16", True, 1024, "fwd").backend == "flex"  # positional
    assert table.choose(seq_len=6000, heads=16, kv_heads=16, head_dim=64, dtype="bf16", window=1024) is None
    assert table.lookup(seq_len=16384, heads=16, kv_heads=16, head_dim=128, dtype="bf16")["decision"] == "winner"
    # a table written before the stress_inputs feature existed (its buckets lack it) answers the same for randn
    # shapes, and nothing for stress inputs, which it never measured
    for row in data["rows"]:
        del row["bucket"]["stress_inputs"]
    older = DispatchTable(data)
    assert older.choose(seq_len=6000, heads=16, kv_heads=16, head_dim=128, dtype="bf16", window=1024).backend == "flex"
    assert older.choose(seq_len=6000, heads=16, kv_heads=16, head_dim=128, dtype="bf16", window=1024,
                        stress_inputs=True) is None


def test_a_planted_tie_is_named_and_sdpa_is_kept_when_it_is_in_it(tmp_path: Path) -> None:
    tie = only(tmp_path / "a", record("flex", 1.00, 0.98, 1.03), record("sdpa", 1.02, 1.01, 1.05),
               record("naive", 3.0))
    assert (tie.decision, tie.leader, tie.backend, tie.tie) == ("tie", "flex", "sdpa", ("flex", "sdpa"))
    assert tie.runner_up == "sdpa" and tie.runner_up_ratio == pytest.approx(1.02)
    no_sdpa = only(tmp_path / "b", record("flex", 1.00, 0.98, 1.03), record("sdpa-cudnn", 1.02, 1.01, 1.05))
    assert (no_sdpa.decision, no_sdpa.backend, no_sdpa.default_why) == ("tie", "flex", "not measured")


def test_a_mismatch_never_wins(tmp_path: Path) -> None:
    d = only(tmp_path, record("flex", 0.5, status="mismatch", reason="max error 0.3 > bound 0.05"),
             record("sdpa", 1.0), record("sdpa-flash", 2.0))
    assert (d.decision, d.backend, d.runner_up) == ("winner", "sdpa", "sdpa-flash")
    assert Exclusion("flex", Status.MISMATCH, "mismatch: max error 0.3 > bound 0.05") in d.excluded
    assert d.default_ratio == 1.0


def test_a_faster_throttled_timing_unsettles_a_slower_one_does_not(tmp_path: Path) -> None:
    d = only(tmp_path / "a", record("flex", 0.5, throttled=True), record("sdpa", 1.0), record("sdpa-flash", 2.0))
    assert (d.decision, d.backend, d.leader) == ("unsettled", None, "sdpa")
    assert d.contested == (Contest("flex", "throttled", "cuda-bf16-b1-s4096-h16-kv16-d128-causal-fwd", 0.5),)
    slow = only(tmp_path / "b", record("flex", 3.0, throttled=True), record("sdpa", 1.0), record("sdpa-flash", 2.0))
    assert (slow.decision, slow.backend, slow.contested) == ("winner", "sdpa", ())
    assert Exclusion("flex", Trouble.THROTTLED, "throttled") in slow.excluded


def test_a_noisy_number_counts_with_its_interval_and_a_non_repeatable_one_never_decides(tmp_path: Path) -> None:
    """A noisy record is not vetoed: its interval decides (here apart, 2x slower). A record whose two calls gave
    different bits is out, whatever its time (issue: recommend could choose a non-repeatable kernel)."""
    noisy = only(tmp_path / "a", record("flex", 0.5, noisy=True), record("sdpa", 1.0))
    assert (noisy.decision, noisy.backend) == ("winner", "flex")
    flaky = only(tmp_path / "b", record("flex", 0.5, repeatable=False), record("sdpa", 1.0), record("naive", 3.0))
    assert (flaky.decision, flaky.backend) == ("winner", "sdpa")
    assert Exclusion("flex", Trouble.NOT_REPEATABLE, "not repeatable") in flaky.excluded


def test_one_kernel_under_two_names_is_one_candidate(tmp_path: Path) -> None:
    """sdpa dispatching to FLASH_ATTENTION and the pinned sdpa-flash ran one kernel: one candidate named sdpa,
    so the faster of two timings of the same kernel never wins over its twin."""
    d = only(tmp_path, record("sdpa", 1.0, kernel="torch 2.13.0+cpu sdpa auto→FLASH_ATTENTION (is_causal)"),
             record("sdpa-flash", 0.9, kernel="torch 2.13.0+cpu sdpa FLASH_ATTENTION (PyTorch's CPU flash kernel) "
                                                "(is_causal)"),
             record("sdpa-math", 2.0, kernel="torch 2.13.0+cpu sdpa MATH (is_causal)"))
    assert (d.decision, d.backend, sorted(d.numbers)) == ("winner", "sdpa", ["sdpa", "sdpa-math"])
    # the table's note says which candidate the twin was folded into (an 80-character cut once left it out)
    assert "sdpa-flash: same kernel as sdpa, one candidate: torch 2.13.0+cpu sdpa FLASH_ATTENTION" in \
        dispatch_table.note_text(d, TIME)


def test_a_lone_clean_backend_decides_nothing(tmp_path: Path) -> None:
    # The H200 run of 2026-11-29 22:55 timed only naive cleanly at 16K fwd+bwd (sdpa-cudnn's timing there was
    # throttled, the others were never reached): naive "winning" would be a wrong answer, so nothing is called.
    d = only(tmp_path, record("naive", 75.0),
             record("sdpa-math", 200.0, status="oom", reason="out of memory", **UNTIMED))
    assert (d.decision, d.backend, d.leader) == ("none", None, "naive")
    assert d.why == "only naive has a clean number: nothing to tell it apart from"


def test_a_bucket_of_several_cases_needs_its_winner_ahead_on_every_one(tmp_path: Path) -> None:
    # 4096 and 6144 tokens share the 4K-8K band: flex ahead on both is the winner, by the geometric mean;
    # flex ahead on one and sdpa on the other is a tie (each told faster somewhere), the default kept.
    both = only(tmp_path / "a", record("flex", 1.0), record("sdpa", 2.0),
                record("flex", 2.0, seq_len=6144, kv_seq_len=6144), record("sdpa", 8.0, seq_len=6144, kv_seq_len=6144))
    assert (both.decision, both.backend, len(both.cases)) == ("winner", "flex", 2)
    assert both.runner_up_ratio == pytest.approx((2.0 * 4.0) ** 0.5)
    split = only(tmp_path / "b", record("flex", 1.0), record("sdpa", 2.0),
                 record("flex", 4.0, seq_len=6144, kv_seq_len=6144), record("sdpa", 3.0, seq_len=6144, kv_seq_len=6144))
    assert (split.decision, split.backend, sorted(split.tie)) == ("tie", "sdpa", ["flex", "sdpa"])
    # A backend that ran only one of the bucket's cases cannot be dispatched for the bucket.
    partial = only(tmp_path / "c", record("flex", 0.5), record("sdpa", 2.0), record("sdpa-flash", 4.0),
                   record("sdpa", 3.0, seq_len=6144, kv_seq_len=6144),
                   record("sdpa-flash", 5.0, seq_len=6144, kv_seq_len=6144))
    assert partial.backend == "sdpa" and Exclusion(
        "flex", Unranked.NOT_MEASURED, "not measured on every case of the bucket") in partial.excluded


def test_a_quantized_format_is_a_bucket_of_its_own(tmp_path: Path) -> None:
    # A suite that runs a decode step over a bf16 cache and over an FP8 cache, with per-tensor and per-head scales
    # (suites/fp8.yaml): pooled in one bucket, no backend had a number on every case and nothing was decided; and a
    # bf16 user must never be sent to a kernel measured on an FP8 cache, nor a per-head user to a per-tensor one.
    def fp8(backend: str, ms: float, quant: str) -> dict:
        r = record(backend, ms, kv_dtype="float8_e4m3fn", quant=quant)
        r["case_id"] += f"-kvfp8e4m3-q{quant}"
        return r

    run = write_run(tmp_path / "run", [record("sdpa", 2.0), record("flex", 1.0), fp8("flashinfer", 0.5, "tensor"),
                                       fp8("cudnn-fp8", 0.8, "tensor"), fp8("flashinfer", 0.6, "head")])
    result = recommend_runs([run])
    assert [(d.bucket.kv_dtype, d.bucket.quant, d.decision, d.backend) for d in result.decisions] == [
        (None, None, "winner", "flex"), ("float8_e4m3fn", "head", "none", None),
        ("float8_e4m3fn", "tensor", "winner", "flashinfer")]
    out = tmp_path / "dispatch.json"
    assert CliRunner().invoke(app, ["recommend", str(run), "--out", str(out)]).exit_code == 0
    jsonschema.validate(json.loads(out.read_text()), dispatch_table.schema())
    table = DispatchTable.load(out)
    shape = dict(seq_len=4096, heads=16, kv_heads=16, head_dim=128, dtype="bf16")
    assert table.choose(**shape).backend == "flex"
    assert table.choose(**shape, kv_dtype="float8_e4m3fn").backend == "flashinfer"  # per-tensor: the default
    assert table.choose(**shape, kv_dtype="float8_e4m3fn", quant="head") is None  # a lone candidate decides nothing
    assert table.choose(**shape, kv_dtype="float8_e4m3fn", quant="block") is None  # never measured
    # Block scales: the block size is part of the bucket, 128 tokens unless said (as a suite's `quant: {granularity:
    # block}` has it), so a table timed with 128-token blocks never answers for 64-token ones.
    fp8_shape = dict(seq_len=4096, heads=16, kv_heads=4, head_dim=128, dtype="fp8e4m3")
    assert Shape(**fp8_shape, quant="block").bucket() == Shape(**fp8_shape, quant="block", quant_block=128).bucket()
    assert Shape(**fp8_shape, quant="block").bucket() != Shape(**fp8_shape, quant="block", quant_block=64).bucket()


def test_pooling_the_latest_status_decides_and_an_older_clean_timing_stands_in(tmp_path: Path) -> None:
    old = write_run(tmp_path / "old", [record("flex", 0.5), record("sdpa", 1.0), record("xformers", 0.8)],
                    run_id="old", timestamp="2026-01-01T00:00:00")
    new = write_run(tmp_path / "new", [record("flex", 0.6, throttled=True), record("sdpa", 1.0),
                                       record("xformers", 0.7, status="mismatch", reason="wrong")],
                    run_id="new", timestamp="2026-02-01T00:00:00")
    d = recommend_runs([new, old]).decisions[0]  # order on the command line does not matter
    assert (d.decision, d.backend) == ("winner", "flex")
    assert d.numbers["flex"][0].run_id == "old" and d.numbers["sdpa"][0].run_id == "new"
    assert Exclusion("xformers", Status.MISMATCH, "mismatch: wrong") in d.excluded


def test_by_energy_ranks_energy_per_call(tmp_path: Path) -> None:
    run = write_run(tmp_path / "e", [record("flex", 0.5, extra={"energy_mj": 90.0}),
                                     record("sdpa", 1.0, extra={"energy_mj": 40.0}),
                                     record("sdpa-flash", 2.0, extra={"joules_per_token": 0.06 / 4096})])
    d = recommend_runs([run], "energy").decisions[0]
    assert (d.decision, d.backend, d.runner_up) == ("winner", "sdpa", "sdpa-flash")
    assert d.numbers["sdpa-flash"][0].value == pytest.approx(60.0)  # J/token x tokens per call, in mJ
    with pytest.raises(AttnbenchError, match="--by energy: no ok record"):
        recommend_runs(H200[:1], "energy")


def invoke(*args: Any) -> Any:
    return CliRunner().invoke(app, ["recommend", *map(str, args)], terminal_width=220)


def test_cli_prints_the_table_writes_the_files_and_never_overwrites(tmp_path: Path) -> None:
    out, md = tmp_path / "d.json", tmp_path / "d.md"
    result = invoke(*H200, "--out", out, "--md", md)
    assert result.exit_code == 0, result.output
    assert "NVIDIA H200 · 4 runs · ranked by time" in result.output and "unsettled" in result.output
    jsonschema.validate(json.loads(out.read_text()), dispatch_table.schema())
    assert md.read_text().count("\n| bf16") == 16
    again = invoke(H200[0], "--out", out)
    assert again.exit_code == 2 and "already exists" in again.output
    assert json.loads(out.read_text())["runs"][0]["run_id"] == "a9d1b0bac54f"  # untouched


def test_mixing_an_h200_run_with_a_cpu_run_is_refused(tmp_path: Path) -> None:
    result = invoke(H200[0], CPU, "--out", tmp_path / "d.json")
    assert result.exit_code == 2 and "runs on different devices" in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert not (tmp_path / "d.json").exists()
    assert invoke(H200[0], "--by", "energy").exit_code == 2
    assert invoke(H200[0], "--by", "watts").exit_code == 2


def test_the_same_run_twice_is_refused() -> None:
    result = invoke(H200[0], results_path(H200[0]))
    assert result.exit_code == 2 and "are the same run" in result.output


def test_length_bands_are_powers_of_two() -> None:
    assert [length_band(n) for n in (1, 4095, 4096, 6000, 8191, 8192)] == [
        (1, 2), (2048, 4096), (4096, 8192), (4096, 8192), (4096, 8192), (8192, 16384)]


def test_the_dispatch_helper_imports_without_torch() -> None:
    code = ("import sys; sys.modules['torch'] = None; import attnbench.stats.dispatch as d; "
            "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]; print(d.SCHEMA_VERSION)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == "2", done.stderr


@pytest.mark.slow
def test_the_report_has_a_recommendation_section_when_two_backends_ran_ok(tmp_path: Path) -> None:
    from attnbench.report.render import render_report

    render_report(ROOT / "reports" / "NVIDIA-H200-20261129-225523" / "run", tmp_path / "h200", formats=("html",))
    page = (tmp_path / "h200" / "report.html").read_text(encoding="utf-8")
    section = page[page.index('<h2 id="recommendation">'):page.index("<h2>How to read this</h2>")]
    assert section.count('<tr class="dec-') == 10  # the ten buckets that run measured
    assert '<tr class="dec-winner"><td>bf16 · causal · window 1024 · 16 heads · d=128 · fwd · 4K–8K</td>' \
           '<td>winner</td><td>flex</td>' in section
    lone = write_run(tmp_path / "lone", [record("sdpa", 1.0),
                                         record("flex", 2.0, status="error", reason="boom", **UNTIMED)])
    render_report(lone, tmp_path / "lone-out", formats=("html",))
    assert 'id="recommendation"' not in (tmp_path / "lone-out" / "report.html").read_text(encoding="utf-8")


def test_a_lone_candidate_told_faster_than_every_overhead_flagged_rival_wins_and_a_close_one_decides_nothing(
        tmp_path: Path) -> None:
    """On a CPU the math path (naive, sdpa-math) spends a third of its call outside its matmuls and softmax: flagged
    `overhead`, never chosen. Its time is still what its user pays, so the one clean backend told faster than it on
    every case has been told apart from something (quick.yaml's forward buckets decided nothing before)."""
    math_path = {"overhead": "aten::where 20% (mask)"}
    won = only(tmp_path / "a", record("sdpa", 1.0), record("sdpa-math", 2.0, **math_path))
    assert (won.decision, won.backend) == ("winner", "sdpa") and "sdpa-math" in str(won.why)
    close = only(tmp_path / "b", record("sdpa", 1.0), record("sdpa-math", 1.002, **math_path))
    assert (close.decision, close.backend) == ("none", None) and "not told apart from sdpa-math" in str(close.why)
    faster = only(tmp_path / "c", record("sdpa", 1.0), record("sdpa-math", 0.5, **math_path))
    assert faster.backend is None  # a faster flagged rival is never chosen, nor lets the slower one win


# ---- honest footing: gradients checked, one software, the run-to-run noise across runs ---------------------------
FIRST_RUN = ROOT / "reports" / "NVIDIA-H200-first-run" / "run"
LONG_FWD_BWD = "cuda-bf16-b1-s16384-h16-kv16-d128-causal-fwd_bwd"


def edited_run(directory: Path, source: Path, edit: Any) -> Path:
    """A committed run copied with `edit(record)` applied to each of its records (env.json kept)."""
    directory.mkdir(parents=True)
    records = stored_lines(source)
    (directory / "results.jsonl").write_text("".join(json.dumps(edit(r) or r) + "\n" for r in records))
    (directory / "env.json").write_text((source / "env.json").read_text())
    return directory


def test_a_backward_whose_gradients_were_not_checked_decides_no_bucket(tmp_path: Path) -> None:
    """The H200's first run at 16K fwd+bwd: sdpa wins there, every gradient checked. The same records with
    `grad_checked: false` (what suites/gpu-long.yaml writes from 32K on, above the size the check covers) decide
    nothing; with only sdpa's unchecked, sdpa never wins: its faster time unsettles the bucket, named."""
    def bucket(run: Path) -> Decision:
        return next(d for d in recommend_runs([run]).decisions if LONG_FWD_BWD in d.cases)

    assert (bucket(FIRST_RUN).decision, bucket(FIRST_RUN).backend) == ("winner", "sdpa")

    def unchecked(only: str | None) -> Any:
        return lambda r: r.update(grad_checked=False) if r.get("case_id") == LONG_FWD_BWD and (
            only is None or r["backend"] == only) else None

    none = bucket(edited_run(tmp_path / "all", FIRST_RUN, unchecked(None)))
    assert (none.decision, none.backend, none.numbers) == ("none", None, {})
    assert all(Exclusion(b, Trouble.GRADIENTS_UNCHECKED, "gradients unchecked") in none.excluded
               for b in ("sdpa", "sdpa-flash"))
    alone = bucket(edited_run(tmp_path / "sdpa", FIRST_RUN, unchecked("sdpa")))
    assert (alone.decision, alone.backend) == ("unsettled", None) and "sdpa" not in alone.numbers
    assert (alone.contested[0].backend, alone.contested[0].words) == ("sdpa", f"gradients unchecked on {LONG_FWD_BWD}")
    assert alone.why.endswith("cannot decide (gradients unchecked)")


def test_runs_of_different_software_are_refused_in_one_line(tmp_path: Path) -> None:
    """The issue's case: an older clean flex record from a torch 2.10 run at 1.00 ms beat a newer sdpa record from
    a torch 2.11 run at 1.03 ms, 'apart by 1.020x', with no warning. The run-to-run noise is measured between runs of
    one software and bounds nothing across an upgrade: refused, naming what differs."""
    old = write_run(tmp_path / "old", [record("flex", 1.00), record("sdpa", 1.05)], run_id="old",
                    timestamp="2026-01-01T00:00:00")
    new = write_run(tmp_path / "new", [record("flex", 1.40, throttled=True), record("sdpa", 1.03)], run_id="new",
                    timestamp="2026-02-01T00:00:00")
    env = json.loads((old / "env.json").read_text())
    (old / "env.json").write_text(json.dumps({**env, "torch": "2.10.0", "libraries": {"torch": "2.10.0"}}))
    result = invoke(old, new)
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "runs with different software: torch 2.10.0 (old) vs 2.11.0 (new)" in " ".join(result.output.split())
    for fact, one, other in (("attnbench", "0.1.0", "0.2.0"), ("driver", "580.159.04", "590.10")):
        (old / "env.json").write_text(json.dumps({**env, fact: one}))
        (new / "env.json").write_text(json.dumps({**env, fact: other, "run_id": "new", "timestamp": "2026-02-01"}))
        with pytest.raises(AttnbenchError, match=f"different software: {fact} {one} \\(old\\) vs {other} \\(new\\)"):
            recommend_runs([old, new])
    # A library installed in one run only is no difference: nothing of it is pooled with the other run.
    (old / "env.json").write_text(json.dumps(env))
    (new / "env.json").write_text(json.dumps({**env, "run_id": "new", "timestamp": "2026-02-01",
                                              "libraries": {**env["libraries"], "sageattention": "1.0.6"}}))
    assert recommend_runs([old, new]).decisions[0].decision in ("winner", "tie")


def test_numbers_from_two_runs_carry_the_run_to_run_noise_and_one_runs_do_not(tmp_path: Path) -> None:
    """Two medians one GPU run-to-run noise apart (RUN_TO_RUN_NOISE, from the policy table), each known to a quarter
    of it within its run: measured in one run, flex is told faster; flex's from an older run (its newer timing
    throttled) and sdpa's from a newer one each carry the noise, they overlap, and the default is kept. Three noises
    apart, two runs still decide."""
    n = RUN_TO_RUN_NOISE["cuda"]

    def timed(backend: str, ms: float, **overrides: Any) -> dict:
        return record(backend, ms, ms * (1 - n / 4), ms * (1 + n / 4), **overrides)

    one = only(tmp_path / "one", timed("flex", 1.0), timed("sdpa", 1 + n))
    assert (one.decision, one.backend, one.noise) == ("winner", "flex", n)
    assert one.margin == pytest.approx((1 + n) * (1 - n / 4) / (1 + n / 4), rel=1e-9)
    old = write_run(tmp_path / "old", [timed("flex", 1.0), timed("sdpa", 1.05)], run_id="old",
                    timestamp="2026-01-01T00:00:00")
    new = write_run(tmp_path / "new", [timed("flex", 1.40, throttled=True), timed("sdpa", 1 + n)], run_id="new",
                    timestamp="2026-02-01T00:00:00")
    two = recommend_runs([old, new]).decisions[0]
    assert two.numbers["flex"][0].run_id == "old" and two.numbers["sdpa"][0].run_id == "new"
    assert (two.decision, two.backend, sorted(two.tie)) == ("tie", "sdpa", ["flex", "sdpa"])
    assert two.margin == pytest.approx(1 - n, rel=1e-9) and two.margin < 1
    far = write_run(tmp_path / "far", [timed("flex", 1.40, throttled=True), timed("sdpa", 1 + 3 * n)], run_id="far",
                    timestamp="2026-02-01T00:00:00")
    assert recommend_runs([old, far]).decisions[0].decision == "winner"


def test_a_lone_candidate_beats_overhead_flagged_rivals_only_beyond_the_run_to_run_noise(tmp_path: Path) -> None:
    """On a CPU (±31% run to run at 95%, core.policy) a lone sdpa 1.25x faster than the flagged math path, its interval
    apart within the run, decides nothing: the next run may move either by that much. One faster by more than both
    numbers' noise wins, and the committed quick run's forward buckets, where the math path is far slower, still name
    sdpa."""
    def cpu(backend: str, ms: float, **overrides: Any) -> dict:
        return record(backend, ms, device="cpu", device_name="Intel Xeon", dtype="float32", **overrides)

    math_path = {"overhead": "declared kernels 60% of the call (under 80%); the rest: aten::where 20% (mask)"}
    close = recommend_runs([write_run(tmp_path / "close", [cpu("sdpa", 1.0), cpu("sdpa-math", 1.25, **math_path)],
                                      device="cpu", name="Intel Xeon")]).decisions[0]
    assert (close.decision, close.backend) == ("none", None)
    assert f"not told apart from sdpa-math by more than the run-to-run noise (±{percent(RUN_TO_RUN_NOISE['cpu'])}" \
        in str(close.why)
    noise = RUN_TO_RUN_NOISE["cpu"]
    beyond = 1.1 * (1 + noise) / (1 - noise)  # both numbers may move by the noise (stats.bands.widened), and 10% more
    far = recommend_runs([write_run(tmp_path / "far", [cpu("sdpa", 1.0), cpu("sdpa-math", beyond, **math_path)],
                                    device="cpu", name="Intel Xeon")]).decisions[0]
    assert (far.decision, far.backend) == ("winner", "sdpa")
    quick = recommend_runs([ROOT / "reports" / "cpu-Intel-Xeon-2core-quick"]).decisions
    forward = [d for d in quick if d.bucket.mode == "fwd"]
    assert len(forward) == 8 and {(d.decision, d.backend) for d in forward} == {("winner", "sdpa")}
