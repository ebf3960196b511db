"""The compile phase (attnbench.precompile): which graphs it compiles, that a failure there costs nothing but the head
start, and that after it a flex measurement loads its graph instead of compiling it, its record otherwise the same."""

from __future__ import annotations



from attnbench import precompile
from attnbench.registry import default_registry
from tests.conftest import make_case

PLUGIN = "tests.compile_faults:PLANTED"


def test_the_default_pool_is_a_process_per_core_but_one_at_most_16_and_none_on_two_cores() -> None:
    assert [precompile.default_workers(cores) for cores in (1, 2, 3, 8, 64)] == [0, 0, 2, 7, 16]


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


def test_a_failed_compile_costs_its_job_only_and_the_next_runs_in_a_fresh_process() -> None:
    planted = default_registry([PLUGIN]).get("planted-compile")
    cases = [make_case(seq_len=s) for s in (32, 40, 48, 64)]  # raises, refused, its process exits, compiles
    jobs = precompile.jobs_of([(c, planted) for c in cases], set())
    seen: list[str] = []
    result = precompile.precompile(jobs, 1, "cpu", (PLUGIN,), on_done=lambda r: seen.append(r.status))
    by_length = {r.job.cases[0].seq_len: r for r in result.results}
    assert by_length[32].status == "failed" and by_length[32].reason == "ValueError: planted compile failure"
    assert by_length[40].status == "skipped" and by_length[40].reason == "planted refusal"
    assert by_length[48].status == "failed" and "exited with code 3" in (by_length[48].reason or "")
    assert "planted exit while compiling" in (by_length[48].reason or "")
    assert by_length[64].status == "compiled" and by_length[64].kernels_compiled == 1
    assert seen == ["failed", "skipped", "failed", "compiled"]
    summary = result.to_dict()
    assert (summary["workers"], summary["jobs"], summary["compiled"], summary["failed"], summary["skipped"]) == (
        1, 4, 1, 2, 1)
    assert [f["case_id"] for f in summary["failures"]] == [cases[0].case_id, cases[2].case_id]
    assert list(result.compiled_keys()) == ["planted|64"]


def test_a_stop_before_the_phase_starts_no_process() -> None:
    planted = default_registry([PLUGIN]).get("planted-compile")
    jobs = precompile.jobs_of([(make_case(seq_len=64), planted)], set())
    result = precompile.precompile(jobs, 2, "cpu", (PLUGIN,), should_stop=lambda: True)
    assert result.stopped and result.results == [] and result.to_dict()["not_done"] == 1
