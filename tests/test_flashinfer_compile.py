"""FlashInfer's JIT compiled in the compile phase, never inside a measurement (docs/run-time.md, "Compiling ahead";
the H200 run of 2026-12-04 timed its first FlashInfer measurement out at --timeout 70 while nvcc built its module):
against tests/flashinfer_jit.py, a stand-in FlashInfer whose module builds take a set time in a child process, in
the cache folder FLASHINFER_WORKSPACE_BASE names."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from attnbench.backends.flashinfer import FlashInferBackend
from attnbench.backends.registry import default_registry
from attnbench.run import calibration, forecast, precompile, session
from attnbench.run.compile_cache import FLASHINFER_ENV
from attnbench.run.options import RunOptions
from tests.flashinfer_jit import ARCH, BUILD_S_VAR, VERSION, builds, install
from tests.helpers import ONE_SAMPLE, make_case
from tests.test_flashinfer_standin import CASES, FP8_CASES

PLUGIN = "tests.flashinfer_jit:STANDIN"
# Two single-prefill modules (with and without a window) over 8 cases, one decode module over 2 page sizes, one over
# an FP8 K/V cache (whose module only the measurement's own FP8 inputs and scales build).
SUITE = """name: fi-ahead
device: cpu
backends: [flashinfer-jit]
timing: {warmup_ms: 0, budget_ms: 1, min_samples: 1, max_samples: 1}
sweep: {seq_len: [64, 96], heads: [4], kv_heads: [heads, 2], head_dim: [16], dtype: [bfloat16], causal: [true],
        window: [null, 24]}
also:
  - {batch: 4, seq_len: 1, kv_seq_len: 80, kv_lengths: random, page_size: [16, 32], heads: 4, kv_heads: 2,
     head_dim: 16, dtype: bfloat16, causal: true}
  - {batch: 4, seq_len: 1, kv_seq_len: 80, kv_lengths: random, page_size: 16, heads: 4, kv_heads: 2, head_dim: 16,
     dtype: bfloat16, kv_dtype: float8_e4m3fn, causal: true}
"""
MEASURED = 11


@pytest.fixture
def standin_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in `flashinfer` this process installs (availability, the in-process tests) is gone after the test."""
    for name in ("flashinfer", "flashinfer.jit.core", "flashinfer.jit.env"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield
    for name in ("flashinfer", "flashinfer.jit.core", "flashinfer.jit.env"):
        sys.modules.pop(name, None)


def jit_dir_under(cache: Path) -> Path:
    """Where FlashInfer builds with --cache-dir `cache`: FLASHINFER_WORKSPACE_BASE=cache/flashinfer, then its own
    .cache/flashinfer/<version>/<arch>/cached_ops (flashinfer/jit/env.py)."""
    return cache / "flashinfer" / ".cache" / "flashinfer" / VERSION / ARCH / "cached_ops"


def run(tmp_path: Path, name: str, cache: Path, **options: object) -> tuple[list, dict]:
    suite = tmp_path / "fi-ahead.yaml"
    suite.write_text(SUITE)
    chosen = RunOptions(plugins=(PLUGIN,), cache_dir=cache, isolate=True, **options)  # type: ignore[arg-type]
    quiet = Console(file=open(os.devnull, "w"))
    outcome = session.execute(session.plan(suite, chosen), tmp_path / name, quiet, lambda: False, chosen)
    return outcome.records, json.loads((tmp_path / name / "env.json").read_text())


@pytest.mark.slow
@pytest.mark.usefixtures("standin_modules")
def test_the_pool_builds_each_module_once_under_the_cache_dir_and_no_measurement_builds_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each module is built once, in the compile phase, where --cache-dir told FlashInfer to build; every measurement
    then builds nothing (kernels_compiled 0); a second run with that cache builds nothing at all, and its pool only
    loads (cache hits)."""
    monkeypatch.setenv(BUILD_S_VAR, "1.0")
    cache = tmp_path / "cache"
    records, env = run(tmp_path, "first", cache, compile_workers=2)
    built = builds(jit_dir_under(cache))
    assert len(built) == 4 == len({name for name, _ in built})  # single, with a window, decode, FP8 decode: once
    assert sorted(so.parent.name for so in jit_dir_under(cache).glob("*/*.so")) == sorted(n for n, _ in built)
    ahead = env["precompile"]
    assert (ahead["jobs"], ahead["compiled"], ahead["kernels_compiled"], ahead["timed_out"]) == (4, 4, 4, 0)
    assert sorted(m for job in ahead["modules"] for m in job["built"]) == sorted(n for n, _ in built)
    assert all(job["s"] >= 1.0 for job in ahead["modules"])  # each job's seconds hold its module's build
    assert [r.status for r in records] == ["ok"] * MEASURED, [r.reason for r in records]
    assert [r.extra["kernels_compiled"] for r in records] == [0] * MEASURED
    assert sum(r.extra["cache_hits"] for r in records) == 4  # the measuring process loads each module once
    assert sum("precompile_s" in r.extra for r in records) == 4  # the pool's seconds, on each key's first record

    again, env = run(tmp_path, "second", cache, compile_workers=2)
    assert builds(jit_dir_under(cache)) == built  # nothing built again
    ahead = env["precompile"]
    assert (ahead["jobs"], ahead["compiled"], ahead["kernels_compiled"], ahead["cache_hits"]) == (4, 4, 0, 4)
    assert [r.status for r in again] == ["ok"] * MEASURED
    assert [r.extra["kernels_compiled"] for r in again] == [0] * MEASURED


STOPPED = "31.4159"  # seconds of a build the budget stops: a `sleep 31.4159` left running would be found


def sleeping() -> list[int]:
    """Processes running `sleep STOPPED` (the stand-in's compiler)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().split(b"\0")[:2] == [b"sleep",
                                                                                               STOPPED.encode()]:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.slow
@pytest.mark.usefixtures("standin_modules")
def test_a_module_past_the_compile_budget_is_recorded_skipped_by_name_never_timed_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A build longer than --compile-timeout is killed with the compiler it started; every case of its module is
    recorded skipped, naming the module and the limit, and no measurement starts the build again (no record reaches
    --timeout)."""
    monkeypatch.setenv(BUILD_S_VAR, STOPPED)
    began = time.monotonic()
    records, env = run(tmp_path, "late", tmp_path / "cache", compile_workers=2, compile_timeout_s=8, timeout_s=60)
    assert time.monotonic() - began < 31  # no build ran to its end
    assert sleeping() == []  # the killed processes' compilers died with them
    assert [r.status for r in records] == ["skipped"] * MEASURED
    single = ("FlashInfer's JIT compile of single_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_"
              "head_dim_qk_16_head_dim_vo_16_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False did not "
              "finish within 8 s, the compile phase's limit (--compile-timeout)")
    assert [r.reason for r in records if r.window is None and r.page_size is None] == [single] * 4
    assert all(r.reason.startswith("FlashInfer's JIT compile of batch_decode_with_kv_cache_dtype_q_bf16")
               for r in records if r.page_size is not None)
    ahead = env["precompile"]
    assert (ahead["jobs"], ahead["timed_out"], ahead["limit_s"]) == (4, 4, 8)
    assert builds(jit_dir_under(tmp_path / "cache")) == []


def test_the_jobs_are_one_per_module_and_the_ledger_does_not_spare_them() -> None:
    """Lengths, heads and causality share a module; a window, a soft-cap, a head dim, a dtype or an entry point
    does not. FlashInfer's cache is checked every run: compiled.json cannot say it was built for this GPU."""
    fi = FlashInferBackend()
    base = dict(device="cuda", dtype="bfloat16", head_dim=128, causal=True)
    cases = [make_case(seq_len=s, heads=16, kv_heads=kv, **base) for s in (4096, 16384) for kv in (16, 4)]
    cases += [make_case(seq_len=4096, heads=16, kv_heads=16, window=1024, **base),
              make_case(seq_len=4096, heads=16, kv_heads=16, softcap=30.0, **base),
              make_case(seq_len=4096, heads=16, kv_heads=16, **{**base, "causal": False}),
              make_case(seq_len=16384, heads=16, kv_heads=4, documents=16, **base),
              make_case(batch=16, seq_len=1, kv_seq_len=32768, kv_lengths="random", heads=16, kv_heads=4, **base),
              *(make_case(batch=16, seq_len=1, kv_seq_len=32768, kv_lengths="random", page_size=p, heads=16,
                          kv_heads=4, **base) for p in (16, 256)),
              make_case(batch=16, seq_len=1, kv_seq_len=32768, kv_lengths="random", page_size=16, heads=16,
                        kv_heads=4, kv_dtype="float8_e4m3fn", quant="tensor", **base)]
    tasks = [(c, fi) for c in cases]
    jobs = precompile.jobs_of(tasks, cached={fi.compile_key(c) for c in cases})
    assert sorted(len(job.cases) for job in jobs) == [1] * 6
    assert {(job.cases[0].window, job.cases[0].softcap, job.cases[0].page_size, job.cases[0].kv_dtype,
             job.cases[0].documents) for job in jobs} == {
        (None, None, None, None, None), (1024, None, None, None, None), (None, 30.0, None, None, None),
        (None, None, None, None, 16), (None, None, 16, None, None), (None, None, 16, "float8_e4m3fn", None)}


@pytest.mark.usefixtures("standin_modules")
def test_one_compile_key_is_one_set_of_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over every case of the adapter's contract, FP8 K/V caches included, each prepared as its measurement prepares
    it and in a fresh process's state: two cases with one compile key load the same modules, so the job that compiled
    one case's leaves nothing for the other's measurement to build."""
    from attnbench.run.stages import prepare
    from attnbench.verify.quant_data import case_data

    fi = default_registry([PLUGIN]).get("flashinfer-jit")
    monkeypatch.setenv(BUILD_S_VAR, "0")
    monkeypatch.setenv(FLASHINFER_ENV, str(tmp_path))
    modules: dict[str, set[frozenset[str]]] = {}
    for name, (case, _) in {**CASES, **{f"fp8-{n}": c for n, c in FP8_CASES.items()}}.items():
        for module in ("flashinfer", "flashinfer.jit.core", "flashinfer.jit.env"):
            sys.modules.pop(module, None)
        install()
        extra = prepare(case_data(case), fi).prepared.extra
        used = frozenset(extra["jit_built"] + extra["jit_loaded"])
        assert used, name
        modules.setdefault(fi.compile_key(case), set()).add(used)
    assert all(len(sets) == 1 for sets in modules.values()), modules
    assert len(modules) >= 12  # entry points, windows, soft-caps, ALiBi, head dims and K/V dtypes


def test_the_forecast_prices_flashinfer_modules_ahead_at_their_own_cost() -> None:
    """gpu-check's FlashInfer cases on an H200: one job per module, each at FlashInfer's cold build (not Inductor's),
    then each measurement a load; with every module in the ledger the jobs stay, priced as loads."""
    fi = FlashInferBackend()
    base = dict(device="cuda", dtype="bfloat16", head_dim=128, causal=True, heads=16)
    cases = [make_case(seq_len=s, kv_heads=kv, window=w, **base) for s in (4096, 16384) for kv in (16, 4)
             for w in (None, 1024)]
    machine = calibration.datasheet("H200")
    cold = forecast.forecast([(c, fi) for c in cases], ONE_SAMPLE, machine, isolate=True, compile_workers=16)
    assert (cold.precompiled, cold.compile_workers) == (2, 16)
    assert cold.precompile_s == pytest.approx(forecast.GPU_OVERHEADS.worker_start_s + fi.cost.jit.cold_s)
    assert cold.compile_s == pytest.approx(len(cases) * fi.cost.jit.cached_s)
    warm = forecast.forecast([(c, fi) for c in cases], ONE_SAMPLE, machine, isolate=True, compile_workers=16,
                             compiled={fi.compile_key(c) for c in cases})
    assert warm.precompiled == 2
    assert warm.precompile_s == pytest.approx(forecast.GPU_OVERHEADS.worker_start_s + fi.cost.jit.cached_s)
