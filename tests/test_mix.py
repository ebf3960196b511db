"""A suite's mix: traffic as weighted cases (attnbench.sweep.mix), and recommend --mix's numbers against a hand
computation from records (attnbench.stats.mix)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.core import workload
from attnbench.core.case import Case
from attnbench.core.errors import SuiteError
from attnbench.stats.mix import mix_of_runs
from attnbench.sweep.suite import load_suite

ROOT = Path(__file__).resolve().parent.parent
SUITE = """name: traffic
backends: [naive, sdpa]
mix:
  heads: 2
  kv_heads: 1
  head_dim: 16
  dtype: float32
  page_size: 4
  sources:
    - {vllm: q64_2q1s128, weight: 2}
    - {vllm: q32}
"""


def write(tmp_path: Path, text: str = SUITE) -> Path:
    path = tmp_path / "traffic.yaml"
    path.write_text(text)
    return path


def test_a_batch_splits_into_packed_prefills_and_a_paged_ragged_decode_with_its_weight(tmp_path: Path) -> None:
    traffic = load_suite(write(tmp_path)).traffic("cpu")
    assert (traffic.requests, traffic.tokens) == (2 * 3 + 1, 2 * 66 + 32)
    (p1, d1, p2) = traffic.parts
    assert (p1.phase, p1.weight, p1.case.doc_lens, p1.case.documents, p1.case.batch) == ("prefill", 2.0, (64,), 1, 1)
    assert (d1.phase, d1.weight, d1.case.kv_lens, d1.case.page_size, d1.case.seq_len) == ("decode", 2.0, (128, 128),
                                                                                        4, 1)
    assert workload.visible_total(d1.case) == 2 * 128  # each decode's query sees its whole cache
    assert (p2.phase, p2.weight, p2.case.seq_len) == ("prefill", 1.0, 32)
    assert load_suite(write(tmp_path)).cases("cpu") == [p1.case, d1.case, p2.case]


def test_extends_and_empty_sequences_are_documents_with_their_own_keys(tmp_path: Path) -> None:
    text = SUITE.replace("- {vllm: q32}", "- {generate: constant, batch: 4, seq_len: 8, zero_fraction: 0.5}").replace(
        "q64_2q1s128", "q4s12_q1s9")
    parts = load_suite(write(tmp_path, text)).traffic("cpu").parts
    extend = parts[0].case
    assert (extend.doc_lens, extend.doc_kv_lens, extend.kv_seq_len) == ((4,), (12,), 12)
    empty = parts[2].case
    assert sorted(zip(empty.doc_lens, empty.doc_lens, strict=False)) == [(0, 0), (0, 0), (8, 8), (8, 8)]


def test_the_cpu_block_replaces_the_geometry_and_the_sources(tmp_path: Path) -> None:
    text = SUITE + "  cpu:\n    heads: 4\n    kv_heads: 4\n    sources: [{vllm: q16}]\n"
    suite = load_suite(write(tmp_path, text))
    (cpu,) = suite.traffic("cpu").parts
    assert (cpu.case.heads, cpu.case.kv_heads, cpu.case.seq_len) == (4, 4, 16)
    assert {p.case.heads for p in suite.traffic("cuda").parts} == {2}


@pytest.mark.parametrize("change, words", [
    (("    - {vllm: q32}\n", "    - {vllm: q32, flashinfer: x.jsonl}\n"), "one of generate, vllm or flashinfer"),
    (("    - {vllm: q32}\n", "    - {generate: longtail, batch: 4}\n"), "generate needs batch and seq_len"),
    (("    - {vllm: q32}\n", "    - {vllm: q32, seeds: 3}\n"), "belong to generate"),
    (("    - {vllm: q32}\n", "    - {vllm: q3x}\n"), "segment 'q3x' is not"),
    (("    - {vllm: q32}\n", "    - {flashinfer: absent.jsonl}\n"), "absent.jsonl: cannot be read"),
    (("  kv_heads: 1\n", "  kv_heads: 3\n"), "kv_heads 3 does not divide heads 2"),
    (("    - {vllm: q32}\n", "    - {generate: constant, batch: 1024, seq_len: 4096}\n"),
     "holds 0 decodes and 4194304 queries"),
    (("    - {vllm: q32}\n", "    - {generate: wide, batch: 1024, seq_len: 8, seeds: 100}\n"),
     "1024 x 100 requests"),
    (("mix:\n", "mixx:\n"), "mixx: unknown key"),
])
def test_a_bad_mix_is_one_line_and_exit_2_with_nothing_run(tmp_path: Path, change: tuple[str, str],
                                                           words: str) -> None:
    path = write(tmp_path, SUITE.replace(*change))
    with pytest.raises(SuiteError, match=words):
        load_suite(path)
    result = CliRunner().invoke(app, ["run", str(path), "--device", "cpu", "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and not (tmp_path / "run").exists()
    assert words.split(" ")[0] in result.output and len(result.output.strip().splitlines()) == 1


def test_a_flashinfer_definition_of_another_geometry_is_refused(tmp_path: Path) -> None:
    trace = "traffic/flashinfer/workloads/gqa_paged/gqa_paged_decode_h32_kv8_d128_ps1.jsonl"
    text = SUITE.replace("- {vllm: q32}", f"- {{flashinfer: {ROOT / 'attnbench' / 'suites' / trace}}}")
    with pytest.raises(SuiteError, match="has heads 32, the mix 2"):
        load_suite(write(tmp_path, text))
    geometry = "  heads: 32\n  kv_heads: 8\n  head_dim: 128\n  dtype: float16\n"
    with pytest.raises(SuiteError, match="has dtype bfloat16, the mix float16"):
        load_suite(write(tmp_path, text.replace("  heads: 2\n  kv_heads: 1\n  head_dim: 16\n  dtype: float32\n",
                                                geometry)))
    # the packaged suite's GPU geometry is the traces' own, and its CPU block reads none of them
    suite = load_suite("mix")
    assert {p.case.heads for p in suite.traffic("cuda").parts} == {32}
    assert {p.source.split()[0] for p in suite.traffic("cpu").parts} == {"longtail"}


# ---- recommend --mix against a hand computation ------------------------------------------------------------------
# (median, low, high) of two backends on each part: naive wins the prefills, sdpa the decode.
TIMES = {"prefill64": {"naive": (10.0, 9.5, 10.6), "sdpa": (20.0, 19.0, 21.0)},
         "decode": {"naive": (5.0, 4.9, 5.3), "sdpa": (2.0, 1.8, 2.1)},
         "prefill32": {"naive": (4.0, 3.9, 4.4), "sdpa": (8.0, 7.5, 8.2)}}


def records(cases: dict[str, Case], times: dict[str, dict[str, tuple[float, float, float]]]) -> list[dict]:
    found = []
    for name, by_backend in times.items():
        case = cases[name]
        for backend, (ms, low, high) in by_backend.items():
            found.append({**case.fields(), "schema_version": 1, "run_id": "r1", "suite": "traffic",
                          "timestamp": "2026-01-01T00:00:00+00:00", "backend": backend, "kernel": f"{backend} k",
                          "device_name": "AMD EPYC", "case_id": case.case_id, "status": "ok", "reason": None,
                          "time_ms": ms, "ci_low_ms": low, "ci_high_ms": high, "ci_level": 0.95, "samples": 20,
                          "times_ms": [ms] * 20, "noisy": False, "throttled": False, "repeatable": True})
    return found


def run_dir(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    directory = tmp_path / "run"
    directory.mkdir()
    (directory / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (directory / "env.json").write_text(json.dumps({"run_id": "r1", "timestamp": "2026-01-01T00:00:00",
                                                    "device": "cpu", "device_name": "AMD EPYC"}))
    return directory


@pytest.fixture
def planted(tmp_path: Path) -> tuple[Path, Path]:
    suite = write(tmp_path)
    parts = load_suite(suite).traffic("cpu").parts
    cases = {"prefill64": parts[0].case, "decode": parts[1].case, "prefill32": parts[2].case}
    return run_dir(tmp_path, records(cases, TIMES)), suite


def test_mix_numbers_agree_with_a_hand_computation_from_the_records(planted: tuple[Path, Path]) -> None:
    run, suite = planted
    result = mix_of_runs([run], suite)
    requests, tokens = 2 * 3 + 1, 2 * 66 + 32
    naive, sdpa = (next(t for t in result.totals if t.name == n) for n in ("naive", "sdpa"))
    # naive: 2 x 10 (prefill 64) + 2 x 5 (the decode part) + 1 x 4 (prefill 32) over 7 requests
    assert result.per_request(naive).value == pytest.approx((2 * 10 + 2 * 5 + 4) / requests)
    assert result.per_request(naive).low == pytest.approx((2 * 9.5 + 2 * 4.9 + 3.9) / requests)
    assert result.per_request(naive).high == pytest.approx((2 * 10.6 + 2 * 5.3 + 4.4) / requests)
    assert result.per_request(sdpa).value == pytest.approx((2 * 20 + 2 * 2 + 8) / requests)
    assert result.per_token(naive).value == pytest.approx(34 / tokens)
    assert naive.share("prefill") == pytest.approx(24 / 34) and naive.share("decode") == pytest.approx(10 / 34)
    # the table calls naive on both prefill buckets and sdpa on the decode one: 2 x 10 + 2 x 2 + 4
    assert result.dispatch.calls == {c: b for c, b in zip([p.case.case_id for p in result.traffic.parts],
                                                          ["naive", "sdpa", "naive"], strict=False)}
    assert not result.dispatch.fallback and not result.unmeasured
    assert result.per_request(result.dispatch).value == pytest.approx(28 / requests)
    assert result.dispatch.share("decode") == pytest.approx(4 / 28)
    assert result.best is naive
    gain = result.gain
    assert gain is not None and gain.value == pytest.approx(34 / 28)
    # paired: the prefills, naive's on both sides, stand at their medians; the decode part at its far ends
    assert gain.low == pytest.approx((2 * 10 + 4 + 2 * 4.9) / (2 * 10 + 4 + 2 * 2.1))
    assert gain.high == pytest.approx((2 * 10 + 4 + 2 * 5.3) / (2 * 10 + 4 + 2 * 1.8))


def test_a_shape_no_backend_measured_is_named_and_no_total_is_claimed(tmp_path: Path) -> None:
    suite = write(tmp_path)
    parts = load_suite(suite).traffic("cpu").parts
    cases = {"prefill64": parts[0].case, "prefill32": parts[2].case}
    run = run_dir(tmp_path, records(cases, {k: v for k, v in TIMES.items() if k != "decode"}))
    result = mix_of_runs([run], suite)
    assert result.unmeasured == [parts[1].case.case_id]
    assert result.best is None and result.gain is None and not result.dispatch.complete
    out = CliRunner().invoke(app, ["recommend", str(run), "--mix", str(suite)]).output
    assert "No backend measured: `" + parts[1].case.case_id in out
    assert "No single backend has a clean number on every part" in out


def test_recommend_mix_prints_and_writes_the_section(planted: tuple[Path, Path], tmp_path: Path) -> None:
    run, suite = planted
    result = CliRunner().invoke(app, ["recommend", str(run), "--mix", str(suite), "--md", str(tmp_path / "r.md")])
    assert result.exit_code == 0, result.output
    assert "| **dispatch** (recommend's table per shape) | 4 [3.79, 4.26] |" in result.output
    assert "the dispatch is 1.21× faster than it [1.2, 1.25]." in result.output
    assert "Fastest on the decode parts alone: `sdpa`" in (tmp_path / "r.md").read_text()


def test_recommend_mix_refuses_a_suite_without_mix_and_runs_without_its_cases(planted: tuple[Path, Path],
                                                                              tmp_path: Path) -> None:
    run, _ = planted
    plain = CliRunner().invoke(app, ["recommend", str(run), "--mix", "quick"])
    assert plain.exit_code == 2 and "has no mix: block" in plain.output
    other = write(tmp_path / "o", SUITE.replace("q32}", "q48}").replace("q64_2q1s128", "q8")) if (
        tmp_path / "o").mkdir() is None else None
    refused = CliRunner().invoke(app, ["recommend", str(run), "--mix", str(other)])
    assert refused.exit_code == 2 and "none of the mix's 2 cases on cpu" in refused.output


def test_an_overhead_flagged_backend_gets_what_its_user_pays_and_is_never_best_nor_called(tmp_path: Path) -> None:
    """On a CPU naive and sdpa-math are flagged overhead: their time is real, but recommend never calls them."""
    suite = write(tmp_path)
    parts = load_suite(suite).traffic("cpu").parts
    cases = {"prefill64": parts[0].case, "decode": parts[1].case, "prefill32": parts[2].case}
    fast = {name: {"sdpa-math": (1.0, 0.9, 1.1)} for name in TIMES}  # faster than both, on every part
    rows = records(cases, TIMES) + [{**r, "overhead": "declared kernels 60% of the call (under 80%)"}
                                    for r in records(cases, fast)]
    result = mix_of_runs([run_dir(tmp_path, rows)], suite)
    flagged = next(t for t in result.totals if t.name == "sdpa-math")
    assert result.flagged == ["sdpa-math"] and flagged.complete
    assert result.per_request(flagged).value == pytest.approx((2 + 2 + 1) / 7)
    assert result.best is not None and result.best.name == "naive"
    assert "sdpa-math" not in result.dispatch.calls.values()


def test_the_committed_cpu_run_gives_the_numbers_the_manual_quotes() -> None:
    """docs/traffic.md's table, from reports/cpu-AMD-EPYC-2core-mix and the packaged suite's CPU block."""
    result = mix_of_runs([ROOT / "reports" / "cpu-AMD-EPYC-2core-mix"], "mix")
    flex = next(t for t in result.totals if t.name == "flex")
    assert result.best is flex and set(result.dispatch.calls.values()) == {"flex"}
    assert round(result.per_request(flex).value, 2) == 5.01 and round(flex.share("prefill"), 2) == 0.86
    assert (result.traffic.requests, len(result.traffic.parts)) == (48, 6)
    naive = next(t for t in result.totals if t.name == "naive")
    assert result.flagged == ["naive", "sdpa-math"] and round(result.per_request(naive).value, 1) == 62.4
    assert [len(t.missing) for t in result.totals if t.name in ("sdpa", "sdpa-flash")] == [3, 3]
    assert len(result.dispatch.fallback) == 1 and not result.unmeasured
