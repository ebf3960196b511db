"""flex compiles once per distinct graph: flex-dynamic shares one compile across sequence lengths, flex (static,
one kernel per shape) cannot; compile time is setup, never a sample."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnbench.backends.registry import default_registry
from tests.helpers import make_case, measure_one


def shape(seq: int, **overrides: object):  # type: ignore[no-untyped-def]
    # A shape no other test compiles, so this process's compile caches start empty for it.
    return make_case(seq_len=seq, heads=3, kv_heads=3, head_dim=16, causal=True, window=40, **overrides)


@pytest.mark.slow
def test_two_cases_differing_only_in_sequence_length_share_one_flex_dynamic_compile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))  # nothing on disk to load
    backend = default_registry().get("flex-dynamic")
    first, second = (measure_one(shape(seq), backend) for seq in (256, 384))
    assert first.status == second.status == "ok", (first.reason, second.reason)
    assert "dynamic=True" in first.kernel
    assert first.extra["graphs_traced"] == 1 and first.extra["kernels_compiled"] >= 1
    assert second.extra["graphs_traced"] == 0 and second.extra["kernels_compiled"] == 0  # the same compiled graph
    assert second.extra["compile_s"] < first.extra["compile_s"] / 5
    for record in (first, second):  # the compile is setup: no sample is anywhere near its length
        assert max(record.times_ms) < record.extra["compile_s"] * 1e3 or record is second


@pytest.mark.slow
def test_static_flex_compiles_each_length_and_reuses_only_the_same_shape(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """dynamic=False specialises on the lengths (and on their divisibility by the 128-token block): a new
    length is a new kernel; the same shape again (here: another case object) is Dynamo's cached graph."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    backend = default_registry().get("flex")
    records = [measure_one(shape(seq, dtype="float32"), backend) for seq in (256, 384, 256)]
    assert [r.status for r in records] == ["ok"] * 3
    assert "dynamic=False" in records[0].kernel
    assert [r.extra["graphs_traced"] for r in records] == [1, 1, 0]
    assert records[1].extra["kernels_compiled"] >= 1 and records[2].extra["kernels_compiled"] == 0


@pytest.mark.slow
def test_a_refused_cpu_backward_leaves_later_flex_cases_compiled() -> None:
    """FlexAttention refuses backward on a CPU. Refused inside torch.compile, Dynamo would skip flex_attention for
    the rest of the process, and later cases would run eager under a record saying compiled: the refusal is
    asked of torch before compiling."""
    backend = default_registry().get("flex")
    refused = measure_one(make_case(seq_len=64, heads=5, kv_heads=5, head_dim=16, causal=True, mode="fwd_bwd"), backend)
    assert refused.status == "skipped" and "does not support backward on CPU" in refused.reason
    later = measure_one(make_case(seq_len=256, heads=5, kv_heads=5, head_dim=16, causal=True), backend)
    assert later.status == "ok" and later.extra["graphs_traced"] == 1  # traced and compiled, not skipped to eager


# A flex graph loaded from --cache-dir, after the process's first, spends at most this long in torch.compile
# (`dynamo_s`: trace, cache lookup, load). Measured with benchmarks/flex_warm_load.py on the 2-core development VM:
# 0.15 s median, 0.31 s max (21 loads at 1K-2K); a compile of the same shapes took 3.1-3.4 s.
WARM_LOAD_MAX_S = 1.0
WARM_SHAPES = [dict(device="cpu", dtype="float32", batch=1, seq_len=1024, kv_seq_len=1024, heads=8, kv_heads=kv,
                    head_dim=64, causal=True, window=window, mode="fwd")
               for kv, window in ((8, None), (8, 256), (2, 256))]


def prepare_costs(cases: list[dict]) -> list[dict]:
    """flex's `prepare` on each case in this process: its record's compile fields."""
    from attnbench.backends.flex import FlexBackend
    from attnbench.core.case import Case
    from attnbench.verify.inputs import make_inputs

    costs = []
    for fields in cases:
        case = Case(**fields)
        inputs = make_inputs(case)
        costs.append(FlexBackend().prepare(case, inputs.q, inputs.k, inputs.v).extra)
    return costs


def costs_in_fresh_process(cache: Path, shapes: list[dict] = WARM_SHAPES) -> list[dict]:
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).parents[1]
    code = ("import json, sys; from tests.test_flex_compile import prepare_costs; "
            "print(json.dumps(prepare_costs(json.loads(sys.argv[1])), default=str))")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(shapes)], cwd=root, capture_output=True,
                          text=True, timeout=600, check=True,
                          env={**os.environ, "PYTHONPATH": str(root), "TORCHINDUCTOR_CACHE_DIR": str(cache)})
    return json.loads(done.stdout.strip().splitlines()[-1])


# session, not module: a worker running another module's test between the two would compile again
@pytest.fixture(scope="session")
def cold_cache(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    """WARM_SHAPES compiled once, in a fresh process, into an empty cache: the cache and that process's costs (the
    two tests below start from it; one cold compile of the three shapes costs minutes on two busy cores)."""
    cache = tmp_path_factory.mktemp("flex-cold") / "inductor"
    return cache, costs_in_fresh_process(cache)


@pytest.mark.slow
@pytest.mark.xdist_group("flex-cold-cache")
def test_a_second_process_loads_each_flex_graph_from_the_cache_in_well_under_a_compile(
        cold_cache: tuple[Path, list[dict]], tmp_path: Path) -> None:
    """As a second `attnbench run` with the same --cache-dir: a fresh process prepares the shapes a first one
    compiled. Each is loaded (no kernel compiled, no C++ compiler run, cache hits), and after the process's first
    (which also starts Inductor) torch.compile spends under WARM_LOAD_MAX_S on it, where the compile took more."""
    import shutil

    cache = tmp_path / "inductor"
    shutil.copytree(cold_cache[0], cache)  # the other test removes libraries from its own copy
    cold, warm = cold_cache[1], costs_in_fresh_process(cache)
    assert all(c["kernels_compiled"] >= 1 and c["cache_hits"] == 0 for c in cold), cold
    assert all(c["dynamo_s"] > WARM_LOAD_MAX_S for c in cold), [c["dynamo_s"] for c in cold]  # the bound tells apart
    assert all(w["kernels_compiled"] == 0 and w["cache_hits"] >= 1 for w in warm), warm
    assert [w["cpp_builds"] for w in warm[1:]] == [0] * (len(warm) - 1), warm
    assert all(w["dynamo_s"] <= WARM_LOAD_MAX_S for w in warm[1:]), [w["dynamo_s"] for w in warm]
    assert all(w["dynamo_s"] <= w["compile_s"] for w in warm)  # torch.compile's part of the record's compile_s


@pytest.mark.slow
@pytest.mark.xdist_group("flex-cold-cache")
def test_a_cached_graph_whose_kernel_library_is_gone_is_recorded_as_rebuilt(
        cold_cache: tuple[Path, list[dict]], tmp_path: Path) -> None:
    """FX graph cache and AOTAutograd cache hits (kernels_compiled 0) do not make a load: when the C++ library the
    cached graph loads is not in the cache (removed, or keyed by another compiler command line), Inductor runs the
    C++ compiler again, for about what a compile costs. The record says so (cpp_builds, cpp_build_s). Two of the
    shapes: the first starts Inductor, the second is the rebuild measured alone."""
    import shutil

    cache = tmp_path / "inductor"
    shutil.copytree(cold_cache[0], cache)
    libraries = list(cache.rglob("*.so"))
    assert libraries
    for library in libraries:
        library.unlink()
    rebuilt = costs_in_fresh_process(cache, WARM_SHAPES[:2])
    assert all(r["kernels_compiled"] == 0 and r["cache_hits"] >= 1 for r in rebuilt), rebuilt
    assert all(r["cpp_builds"] >= 1 and r["cpp_build_s"] > WARM_LOAD_MAX_S for r in rebuilt[1:]), rebuilt
    assert all(r["dynamo_s"] > WARM_LOAD_MAX_S for r in rebuilt[1:])  # what the warm-load test holds under its bound
