"""A timing beyond physics (docs/verdicts.md "A timing beyond physics"): over the policy's margin above its GPU's
datasheet roof, a record is `implausible`, never ranked. Held on the committed H200 check of 2026-12-04, whose
jax-cudnn forwards were recorded `ok` at 1.3-2.0 us (24-54x the H200's dense bf16 rate), and on edits of it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from attnbench.core import peaks, policy
from attnbench.records.record import Status
from attnbench.records.results import load_records, stored_lines
from attnbench.report.render import render_report
from attnbench.stats.compare import compare_runs
from attnbench.stats.recommend import recommend_runs
from tests.helpers import committed_runs

ROOT = Path(__file__).parents[1]
H200 = ROOT / "reports" / "NVIDIA-H200-20261204-c671d98"
CHECK = H200 / "check"
JAX_FORWARDS = {"cuda-bf16-b1-s4096-h16-kv16-d128-causal-fwd", "cuda-bf16-b1-s4096-h16-kv16-d128-causal-w1024-fwd",
                "cuda-bf16-b1-s4096-h16-kv4-d128-causal-fwd", "cuda-bf16-b1-s4096-h16-kv4-d128-causal-w1024-fwd"}
# cudnn's record on the first fwd group: 0.154 ms, 447 TFLOP/s, 64 MiB moved (0.44 of the H200's bandwidth roof)
CUDNN = ("cudnn", "cuda-bf16-b1-s4096-h16-kv16-d128-causal-fwd")
GROUP = "bf16 · causal · 16 heads · d=128 · fwd"


def stored(run: Path) -> list[dict[str, Any]]:
    return stored_lines(run)


def summary(run: Path, out: Path) -> str:
    render_report(run, out, formats=["md"])
    return (out / "summary.md").read_text(encoding="utf-8")


def findings_of(md: str) -> list[str]:
    return [line for line in md.split("### Findings", 1)[1].split("\n### ", 1)[0].splitlines() if line]


def edited(tmp_path: Path, name: str, edit: Any) -> Path:
    """A copy of the check run with `edit(line)` applied to each stored line."""
    run = tmp_path / name
    run.mkdir()
    shutil.copy(CHECK / "env.json", run / "env.json")
    lines = [edit(line) for line in stored(CHECK)]
    (run / "results.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return run


def at_times_roof(times: float) -> Any:
    """An edit: cudnn's first fwd record timed at `times` the H200's dense bf16 rate (every derived field with it)."""
    def edit(line: dict[str, Any]) -> dict[str, Any]:
        if (line["backend"], line["case_id"]) != CUDNN:
            return line
        scale = line["tflops"] / (times * 989.0)
        return {**line, "time_ms": line["time_ms"] * scale, "ci_low_ms": line["ci_low_ms"] * scale,
                "ci_high_ms": line["ci_high_ms"] * scale, "time_ms_min": line["time_ms_min"] * scale,
                "times_ms": [t * scale for t in line["times_ms"]], "tflops": times * 989.0,
                "bandwidth_gbs": line["bandwidth_gbs"] / scale, "percent_of_peak": times * 100}
    return edit


def test_the_h200_checks_jax_cudnn_forwards_read_implausible_with_the_reason() -> None:
    """Stored `ok`, read back `implausible` by the loader: the file is not rewritten."""
    assert {line["status"] for line in stored(CHECK) if line["case_id"] in JAX_FORWARDS
            and line["backend"] == "jax-cudnn"} == {"ok"}
    jax = {r.case_id: r for r in load_records(CHECK) if r.backend == "jax-cudnn" and r.mode == "fwd"}
    assert set(jax) == JAX_FORWARDS and {str(r.status) for r in jax.values()} == {"implausible"}
    first = jax["cuda-bf16-b1-s4096-h16-kv16-d128-causal-fwd"]
    assert first.reason == ("faster than the GPU can run: 34× the dense bfloat16 rate of the H200 SXM (989 TFLOP/s) "
                            "and 6.8× its bandwidth (4800 GB/s) by its datasheet; no kernel beats a datasheet roof "
                            "by over 4×, so the timing is broken")
    assert sorted(r.extra["implausible"]["compute"] for r in jax.values()) == [23.77, 23.77, 33.94, 54.3]
    assert all("was" not in r.extra["implausible"] for r in jax.values())


def test_nothing_else_in_the_committed_gpu_runs_is_implausible() -> None:
    """Every other measured CUDA record of reports/NVIDIA-H200-* stays as recorded (the next highest reads 0.64x)."""
    caught, measured = set(), 0
    for run in committed_runs("NVIDIA-H200-*/**"):
        was = {(line["backend"], line["case_id"]): line["status"] for line in stored(run)}
        for r in load_records(run):
            measured += r.status in ("ok", "mismatch", "wrong_kernel", "implausible")
            if r.status == "implausible":
                caught.add((run.name, r.backend, r.case_id))
            else:
                assert str(r.status) == was[(r.backend, r.case_id)]
    assert caught == {("check", "jax-cudnn", case) for case in JAX_FORWARDS}
    assert measured == 515  # docs/verdicts.md states it


@pytest.mark.slow
def test_the_rerendered_check_ranks_no_jax_cudnn_and_blames_no_roof(tmp_path: Path) -> None:
    md = summary(CHECK, tmp_path)
    findings = findings_of(md)
    assert "196 records: 9 error, 4 implausible, 78 ok, 105 skipped." in md
    ranked = [line for line in findings if "fastest" in line or "speed-up" in line or "Not faster" in line]
    assert ranked and not any("jax-cudnn" in line for line in ranked)
    # cudnn leads, but sdpa's interval overlaps its own: no single fastest is named
    assert any(line.startswith(f"- {GROUP}: 4K: no single fastest, the intervals overlap: cudnn ") for line in findings)
    assert any(line.startswith("- Largest speed-up over sdpa-math: cudnn is 81.10× faster") for line in findings)
    assert "roof is wrong" not in md and "Above its roof" not in md
    implausible = [line for line in findings if "implausible" in line and "never ranked: " not in line]
    assert implausible == [
        "- **implausible** jax-cudnn: faster than the GPU can run: 24×–54× the dense bfloat16 rate of the H200 SXM "
        "(989 TFLOP/s) and 6.8×–11× its bandwidth (4800 GB/s) by its datasheet; no kernel beats a datasheet roof by "
        "over 4×, so these timings are broken, never ranked (4 cases: bf16 · causal · 16 heads · d=128 · fwd · seq "
        "4096; bf16 · causal · window 1024 · 16 heads · d=128 · fwd · seq 4096; bf16 · causal · 16 heads / 4 KV "
        "heads · d=128 · fwd · seq 4096; … 1 more in the table)"]
    rows = [line for line in md.splitlines() if line.startswith("| jax-cudnn | 4096 |")]
    assert len(rows) == 4
    for row in rows:  # the status and the reason; no speed-up
        cells = [c.strip() for c in row.split("|")[1:-1]]
        assert cells[2] == "**implausible**" and cells[6] == "" and "so the timing is broken" in cells[7]


def test_recommend_leaves_jax_cudnn_out_and_says_why() -> None:
    decisions = recommend_runs([CHECK]).decisions
    for d in decisions:
        assert "jax-cudnn" not in d.numbers and "jax-cudnn" not in (d.backend, d.leader, d.runner_up)
        assert not any(c.backend == "jax-cudnn" for c in d.contested)
    excluded = [x for d in decisions for x in d.excluded if x.backend == "jax-cudnn" and set(d.cases) & JAX_FORWARDS]
    assert len(excluded) == 4 and all(x.cause == Status.IMPLAUSIBLE for x in excluded)
    assert all(x.reason.startswith("implausible: faster than the GPU can run") for x in excluded)
    assert [d.backend for d in decisions if set(d.cases) & JAX_FORWARDS] == ["sdpa", "cudnn", "cudnn", "cudnn"]


def test_compare_never_compares_an_implausible_time(tmp_path: Path) -> None:
    """The check against itself: jax-cudnn has no ratio. Against an edit whose jax-cudnn times are 100x longer
    (plausible, 0.13-0.2 ms): ok -> implausible is a new failure, and back a fixed one."""
    same = compare_runs(CHECK, CHECK)
    assert "jax-cudnn" not in same.geomean_by_backend and not same.new_failures
    assert all(m.ratio is None for m in same.matches if m.backend == "jax-cudnn")

    def slower(line: dict[str, Any]) -> dict[str, Any]:
        if line["backend"] != "jax-cudnn" or line["status"] != "ok":
            return line
        return {**line, **{k: line[k] * 100 for k in ("time_ms", "ci_low_ms", "ci_high_ms")},
                **{k: line[k] / 100 for k in ("tflops", "bandwidth_gbs")}}

    plausible = edited(tmp_path, "plausible", slower)
    broke = compare_runs(plausible, CHECK)
    assert sorted(m.key[0] for m in broke.new_failures) == ["jax-cudnn"] * 4 and broke.exit_code == 1
    assert "jax-cudnn" not in broke.geomean_by_backend
    assert sorted(m.key[0] for m in compare_runs(CHECK, plausible).fixed) == ["jax-cudnn"] * 4


@pytest.mark.slow
@pytest.mark.parametrize(("times", "ranked"), [(3.99, True), (4.01, False)])
def test_a_record_just_under_the_margin_stays_ranked(tmp_path: Path, times: float, ranked: bool) -> None:
    """cudnn's real record timed at 3.99x and 4.01x the dense bf16 rate (its bandwidth stays under the roof)."""
    run = edited(tmp_path, "edit", at_times_roof(times))
    record = next(r for r in load_records(run) if (r.backend, r.case_id) == CUDNN)
    assert str(record.status) == ("ok" if ranked else "implausible")
    findings = findings_of(summary(run, tmp_path / "out"))
    assert any(line.startswith(f"- {GROUP}: 4K: fastest cudnn, ") for line in findings) is ranked
    implausible = [line for line in findings if line.startswith("- **implausible** cudnn: ")]
    assert implausible == ([] if ranked else [
        "- **implausible** cudnn: faster than the GPU can run: 4× the dense bfloat16 rate of the H200 SXM (989 "
        f"TFLOP/s) by its datasheet; no kernel beats a datasheet roof by over 4×, so the timing is broken, never "
        f"ranked (1 case: {GROUP} · seq 4096)"])


def test_the_margin_is_declared_once_in_the_policy_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """At 60x the 54x record is a kernel again; the texts that state the margin say 60x."""
    from attnbench.report.html import how_to_read

    monkeypatch.setattr(policy, "PLAUSIBLE_MARGIN", 60.0)
    assert {str(r.status) for r in load_records(CHECK) if r.backend == "jax-cudnn" and r.mode == "fwd"} == {"ok"}
    assert "over 60× its datasheet's compute or bandwidth roof" in policy.policy_table()
    assert "over 60× its datasheet's compute or bandwidth roof" in " ".join(how_to_read())
    assert "by over 60×" in str(peaks.beyond_words("NVIDIA H200", "bfloat16", "70×", None))


def test_the_docs_state_the_margin_in_force() -> None:
    margin = f"{policy.PLAUSIBLE_MARGIN:g}×"
    for page, words in (("results.md", f"bandwidth is over {margin} (the"), ("verdicts.md", f"is over {margin} ("),
                        ("commands.md", "or a timing was `implausible`")):
        assert words in (ROOT / "docs" / page).read_text(encoding="utf-8"), page


def made(status: str = "ok", reason: str | None = None, device: str = "cuda", dtype: str = "bfloat16",
         tflops: float = 4000.0, bandwidth_gbs: float = 100.0, device_name: str = "NVIDIA H200") -> Any:
    """A record as the run makes it, at the given rates."""
    from attnbench.run.recording import RunInfo, make_record
    from tests.helpers import make_case

    case = make_case(device=device, dtype=dtype)
    fields = {"time_ms": 0.01, "tflops": tflops, "bandwidth_gbs": bandwidth_gbs, "extra": {"peak": 989.0}}
    return make_record(RunInfo("run", "suite", device_name), case, "x", status, reason, fields, "cuda-event")


def test_the_run_judges_a_record_as_it_makes_it() -> None:
    """Over 4x a roof (compute or bandwidth) is implausible; 4x itself is not; a CPU record is never judged (its
    roofs are measured, and a measured roof can be wrong); an earlier verdict is kept."""
    assert str(made(tflops=3957.0).status) == "implausible"  # 4.001x 989
    assert str(made(tflops=3956.0).status) == "ok"  # 4x exactly
    memory = made(tflops=10.0, bandwidth_gbs=19201.0)
    assert str(memory.status) == "implausible" and memory.extra["implausible"] == {"memory": 4.0}
    assert memory.reason.startswith("faster than the GPU can run: 4× the H200 SXM's bandwidth (4800 GB/s)")
    assert str(made(device="cpu", device_name="AMD EPYC", tflops=1e6).status) == "ok"
    assert str(made(device_name="a GPU the table lacks", tflops=1e6).status) == "ok"
    wrong = made("mismatch", "out max |error| 0.5 exceeds bound 0.01")
    assert str(wrong.status) == "implausible" and wrong.extra["implausible"] == {"compute": 4.04, "was": "mismatch"}
    assert wrong.reason.endswith("so the timing is broken; and mismatch: out max |error| 0.5 exceeds bound 0.01")
    assert wrong.extra["peak"] == 989.0  # the rest of extra kept


def test_float32_is_held_to_the_tf32_rate() -> None:
    """fp32 matmuls may run on TF32 tensor cores: 7x the H100's CUDA-core fp32 rate is a kernel, 4x TF32's is not."""
    assert peaks.datasheet_ceiling("NVIDIA H100 80GB HBM3", "float32").tflops == 494.5
    assert str(made(dtype="float32", tflops=7 * 67.0, device_name="NVIDIA H100 80GB HBM3").status) == "ok"
    assert str(made(dtype="float32", tflops=4.1 * 494.5, device_name="NVIDIA H100 80GB HBM3").status) == \
        "implausible"
    assert str(made(dtype="float32", tflops=5 * 15.7, device_name="Tesla V100-SXM2-16GB").status) == "implausible"


def test_a_run_with_an_implausible_record_exits_1_and_the_table_prints_it(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from attnbench.cli.main import app
    from attnbench.run import session

    records = [made(), made("wrong_kernel", "none of x's declared kernels ran", tflops=1.0)]
    outcome = session.Outcome(2, 2, 0, False, records=records, implausible=1)
    monkeypatch.setattr(session, "execute", lambda *args: outcome)
    monkeypatch.setattr(session, "record_actual", lambda *args: None)
    result = CliRunner().invoke(app, ["run", str(ROOT / "suites" / "quick.yaml"), "--backend", "naive", "--out",
                                      str(tmp_path / "run"), "--no-report"])
    assert result.exit_code == 1, result.output
    assert "1 measurement(s) timed faster than the GPU can run" in result.output
    assert "implausible" in result.output and "wrong_kernel" in result.output
