"""The compile phase (attnbench.run.precompile): which graphs it compiles, that a failure there costs nothing but the
head start, and that after it a flex measurement loads its graph instead of compiling it, its record otherwise the
same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from attnbench.backends.registry import default_registry
from attnbench.run import precompile, session
from attnbench.run.options import RunOptions, resume_command
from tests.helpers import make_case

PLUGIN = "tests.compile_faults:PLANTED"


def test_the_default_pool_is_a_process_per_core_but_one_at_most_16_and_none_on_two_cores() -> None:
    assert [precompile.default_workers(cores) for cores in (1, 2, 3, 8, 64)] == [0, 0, 2, 7, 16]


def test_the_option_travels_with_the_run_options_to_a_resumed_run_and_a_shard() -> None:
    options = RunOptions(compile_workers=4, compile_timeout_s=300)
    assert options.to_argv() == ["--compile-workers", "4", "--compile-timeout", "300"]
    assert RunOptions().to_argv() == []
    assert resume_command("long", Path("out"), options).endswith("--compile-workers 4 --compile-timeout 300")
    assert (options.for_shards().compile_workers, options.for_shards().compile_timeout_s) == (4, 300)


def test_the_jobs_are_the_distinct_compile_keys_not_yet_cached_backward_first() -> None:
    registry = default_registry()
    flex, dynamic, sdpa = (registry.get(name) for name in ("flex", "flex-dynamic", "sdpa"))
    short, long = (make_case(seq_len=s, causal=True) for s in (128, 256))
    backward = make_case(seq_len=128, causal=True, mode="fwd_bwd")
    lengths = [make_case(seq_len=s, causal=True, heads=2, kv_heads=2) for s in (64, 96, 128)]
    capped = make_case(seq_len=64, softcap=30.0)  # flex-dynamic maps no workload axis: refused, nothing to compile
    tasks = [(short, sdpa), (short, flex), (long, flex), (short, flex), (backward, flex), (capped, dynamic),
             *((c, dynamic) for c in lengths)]
    jobs = precompile.jobs_of(tasks, cached={flex.compile_key(long)})
    assert [(job.backend, [c.seq_len for c in job.cases]) for job in jobs] == [
        ("flex", [128]),  # the backward graph first
        ("flex", [128]),  # the short forward once, though two tasks share it; the long one is cached already
        ("flex-dynamic", [64, 96]),  # a masked dynamic kernel: two lengths are compiled before it serves them all
    ]
    assert jobs[0].cases[0].needs_grad and [job.key for job in jobs] == [
        flex.compile_key(backward), flex.compile_key(short), dynamic.compile_key(lengths[0])]


def test_the_pool_takes_one_length_after_another_the_longest_first_so_few_long_cases_run_at_once() -> None:
    flex = default_registry().get("flex")
    cases = [make_case(seq_len=s, heads=h, mode=mode) for mode in ("fwd", "fwd_bwd") for s in (64, 128, 256)
             for h in (2, 4)]  # lengths outermost, as a suite lists them
    jobs = precompile.jobs_of([(c, flex) for c in cases], set())
    assert [(j.cases[0].mode, j.cases[0].seq_len, j.cases[0].heads) for j in jobs] == [
        ("fwd_bwd", 256, 2), ("fwd_bwd", 128, 2), ("fwd_bwd", 64, 2), ("fwd_bwd", 256, 4), ("fwd_bwd", 128, 4),
        ("fwd_bwd", 64, 4), ("fwd", 256, 2), ("fwd", 128, 2), ("fwd", 64, 2), ("fwd", 256, 4), ("fwd", 128, 4),
        ("fwd", 64, 4)]


@pytest.mark.slow
def test_a_failed_compile_costs_its_job_only_and_the_next_runs_in_a_fresh_process() -> None:
    planted = default_registry([PLUGIN]).get("planted-compile")
    cases = [make_case(seq_len=s) for s in (32, 40, 48, 64)]  # raises, refused, its process exits, compiles
    # one process: 64 compiles; 48 ends it; a fresh one finds 40 refused; 32 raises in it
    jobs = precompile.jobs_of([(c, planted) for c in cases], set())
    seen: list[str] = []
    result = precompile.precompile(jobs, 1, "cpu", (PLUGIN,), on_done=lambda r: seen.append(r.status))
    by_length = {r.job.cases[0].seq_len: r for r in result.results}
    assert by_length[32].status == "failed" and by_length[32].reason == "ValueError: planted compile failure"
    assert by_length[40].status == "skipped" and by_length[40].reason == "planted refusal"
    assert by_length[48].status == "failed" and "exited with code 3" in (by_length[48].reason or "")
    assert "planted exit while compiling" in (by_length[48].reason or "")
    assert by_length[64].status == "compiled" and by_length[64].kernels_compiled == 1
    assert seen == ["compiled", "failed", "skipped", "failed"]  # the longest first
    summary = result.to_dict()
    assert (summary["workers"], summary["jobs"], summary["compiled"], summary["failed"], summary["skipped"]) == (
        1, 4, 1, 2, 1)
    assert [f["case_id"] for f in summary["failures"]] == [cases[2].case_id, cases[0].case_id]
    assert list(result.compiled_keys()) == ["planted|64"]


def hung_compilers() -> list[int]:
    """Processes running compile_faults' hung compiler (`sleep HUNG_S`)."""
    from tests.compile_faults import HUNG_S

    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().split(b"\0")[:2] == [b"sleep",
                                                                                               HUNG_S.encode()]:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_a_compile_past_its_budget_is_killed_with_its_compiler_and_its_key_is_kept_from_the_measurement() -> None:
    """The job's process and the compiler it started are killed at the budget (not at --timeout); the job is
    `timed_out`, its reason names the limit, and over_budget() hands its key to the measurement, which skips it."""
    planted = default_registry([PLUGIN]).get("planted-compile")
    jobs = precompile.jobs_of([(make_case(seq_len=s), planted) for s in (56, 64)], set())
    result = precompile.precompile(jobs, 1, "cpu", (PLUGIN,), limit_s=4)
    by_length = {r.job.cases[0].seq_len: r for r in result.results}
    assert by_length[56].status == "timed_out" and by_length[64].status == "compiled"
    assert by_length[56].seconds < 20
    hung = by_length[56].job.cases[0].case_id
    assert by_length[56].reason == (f"the compile ahead of planted-compile {hung} did not finish within 4 s, the "
                                    "compile phase's limit (--compile-timeout)")
    assert hung_compilers() == []
    assert result.over_budget() == {"planted|56": by_length[56].reason}
    summary = result.to_dict()
    assert (summary["timed_out"], summary["failed"], summary["limit_s"]) == (1, 0, 4)
    assert summary["failures"][0]["reason"] == by_length[56].reason


def test_a_stop_before_the_phase_starts_no_process() -> None:
    planted = default_registry([PLUGIN]).get("planted-compile")
    jobs = precompile.jobs_of([(make_case(seq_len=64), planted)], set())
    result = precompile.precompile(jobs, 2, "cpu", (PLUGIN,), should_stop=lambda: True)
    assert result.stopped and result.results == [] and result.to_dict()["not_done"] == 1


FLEX_SUITE = """name: ahead
device: cpu
backends: [flex]
timing: {warmup_ms: 0, budget_ms: 1, min_samples: 1, max_samples: 1}
sweep: {seq_len: [136], heads: [3], kv_heads: [heads], head_dim: [8], causal: [true], window: [24]}
"""
SAME_FIELDS = ("status", "kernel", "case_id", "max_abs_error", "error_bound", "rows_checked", "flops", "bytes_moved",
               "memory_estimate_bytes", "kv_expanded")


@pytest.mark.slow
def test_after_the_pool_the_measurement_loads_its_graph_and_the_record_is_otherwise_the_same(tmp_path: Path) -> None:
    """Two runs of one flex case, each with an empty --cache-dir and measuring in a fresh worker process (so no
    graph is in memory): without the pool the measurement compiles; with it, the pool compiles and the measurement
    loads (kernels_compiled 0, cache hits), and says what the pool spent on its graph."""
    suite = tmp_path / "ahead.yaml"
    suite.write_text(FLEX_SUITE)
    quiet = Console(file=open("/dev/null", "w"))
    records = {}
    for workers in (0, 1):
        options = RunOptions(cache_dir=tmp_path / f"cache{workers}", compile_workers=workers, isolate=True)
        outcome = session.execute(session.plan(suite, options), tmp_path / f"run{workers}", quiet, lambda: False,
                                  options)
        (records[workers],) = outcome.records
        env = json.loads((tmp_path / f"run{workers}" / "env.json").read_text())
        assert env["prediction"]["compile_workers"] == workers
    cold, loaded = records[0], records[1]
    assert cold.status == "ok", cold.reason
    assert cold.extra["kernels_compiled"] >= 1 and "precompile_s" not in cold.extra
    assert "precompile" not in json.loads((tmp_path / "run0" / "env.json").read_text())
    ahead = json.loads((tmp_path / "run1" / "env.json").read_text())["precompile"]
    assert (ahead["workers"], ahead["jobs"], ahead["compiled"], ahead["failed"]) == (1, 1, 1, 0)
    assert ahead["kernels_compiled"] >= 1 and ahead["wall_s"] > 0
    assert loaded.extra["kernels_compiled"] == 0 and loaded.extra["cache_hits"] >= 1
    assert loaded.extra["precompile_s"] > 0 and loaded.extra["setup_parts"]["compile"] > 0  # the load is setup
    for name in SAME_FIELDS:
        assert getattr(loaded, name) == getattr(cold, name), name
    assert set(loaded.extra) - set(cold.extra) == {"precompile_s"}
