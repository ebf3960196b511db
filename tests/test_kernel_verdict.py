"""Behaviour-wide: the profiled call names what ran, and planted backends that run the wrong kernel, spend their call
in a copy, or lose a kernel in a graph replay are caught by name (attnbench.run.profiled, attnbench.timing.profile)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from attnbench.backends.base import Backend, Capabilities, Prepared
from attnbench.backends.registry import default_registry
from attnbench.backends.sdpa import SDPA_FLASH
from attnbench.core.case import Case
from attnbench.records.record import Record
from attnbench.report.compare_table import comparison_markdown
from attnbench.run import stages as stages_module
from attnbench.run.measure import Settings, measure
from attnbench.run.recording import RunInfo
from attnbench.timing.timers import ClockTimer, TimingSettings
from attnbench.verify.quant_data import case_data

FEW = TimingSettings(warmup_ms=0.0, budget_ms=0.0, min_samples=5, max_samples=5)


def case(window: int | None = None, mode: str = "fwd") -> Case:
    return Case("cpu", "float32", 1, 256, 256, 4, 4, 64, True, window, mode)


def run(backend: Backend, timer: object = None, c: Case | None = None, settings: Settings | None = None):  # type: ignore[no-untyped-def]
    return measure(case_data(c or case()), backend, timer or ClockTimer(), settings or Settings(RunInfo("r", "t"), FEW))


class _Sdpa(Backend):
    """SDPA with causal=True, bound to the kernel the subclass's call picks."""

    capabilities = Capabilities(kernel_names=SDPA_FLASH)

    def deterministic(self, c: Case) -> str:
        return "honoured (plain PyTorch ops on a CPU)"

    def prepare(self, c: Case, q, k, v) -> Prepared:  # type: ignore[no-untyped-def]
        return Prepared(inputs=(q, k, v), call=self.call, kernel="sdpa flash (as claimed)")

    @staticmethod
    def call(q, k, v):  # type: ignore[no-untyped-def]
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class ClaimsFlashRunsMath(_Sdpa):
    name = "claims-flash-runs-math"

    @staticmethod
    def call(q, k, v):  # type: ignore[no-untyped-def]
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel([SDPBackend.MATH]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class CopiesFirst(_Sdpa):
    name = "copies-first"

    @staticmethod
    def call(q, k, v):  # type: ignore[no-untyped-def]
        import torch

        waste = torch.empty(64, *q.shape)
        for _ in range(16):  # 1024 copies of Q's layout: a copy that dwarfs the kernel
            waste.copy_(q.transpose(-1, -2).reshape(q.shape).expand(64, *q.shape))
        return _Sdpa.call(q, k, v)


def test_the_cpu_flash_kernel_is_named_and_math_is_not_it() -> None:
    # 512 tokens, 8 heads, as quick's: at 256 and 4 heads (a 0.3 ms call) the ops around the kernel took 21% of one
    # profiled call on a busy 2-core VM; at quick's sizes sdpa-flash's share was 0.90-0.99 in 22 runs there.
    sized = Case("cpu", "float32", 1, 512, 512, 8, 8, 64, True, None, "fwd")
    flash = run(default_registry().get("sdpa-flash"), c=sized)
    math = run(default_registry().get("sdpa-math"), c=sized)
    assert flash.status == "ok" and flash.kernels[0]["name"] == "aten::_scaled_dot_product_flash_attention_for_cpu"
    assert flash.attention_share >= 0.8 and flash.overhead is None
    assert math.status == "ok" and not any("flash" in k["name"] for k in math.kernels)
    assert {"aten::bmm", "aten::_softmax"} <= {k["name"] for k in math.kernels}
    shares = [k["share"] for k in flash.kernels]
    assert shares == sorted(shares, reverse=True) and sum(shares) == pytest.approx(1.0, abs=1e-3)


def test_a_backend_that_claims_flash_but_runs_math_is_wrong_kernel_with_its_time_kept() -> None:
    record = run(ClaimsFlashRunsMath())
    assert record.status == "wrong_kernel"
    assert "none of claims-flash-runs-math's declared kernels ran" in record.reason and "aten::" in record.reason
    assert record.time_ms is not None and record.samples == 5  # kept, never reported as the backend's


def test_a_large_copy_inside_the_call_is_flagged_overhead_and_named() -> None:
    record = run(CopiesFirst())
    assert record.status == "ok" and record.attention_share < 0.8
    assert record.overhead is not None and "aten::copy_" in record.overhead and "(copy)" in record.overhead


class DroppingGraphTimer(ClockTimer):
    """A CPU stand-in of CudaGraphTimer: after its samples it keeps a 'replay' — here one that lost the softmax."""

    name = "graph-stand-in"

    def __init__(self, replay_runs_all: bool) -> None:
        super().__init__()
        self.replay_runs_all = replay_runs_all

    def measure(self, fn, settings):  # type: ignore[no-untyped-def]
        samples = super().measure(fn, settings)
        self.replay = (fn if self.replay_runs_all else self._lossy, 1)
        return samples

    @staticmethod
    def _lossy() -> None:
        import torch

        a = torch.randn(4, 256, 64)
        torch.bmm(a, a.transpose(1, 2))  # the matmul, but no softmax and no second matmul's partner


def test_a_graph_replay_that_drops_a_kernel_is_wrong_kernel() -> None:
    naive = default_registry().get("naive")
    lost = run(naive, DroppingGraphTimer(replay_runs_all=False))
    whole = run(naive, DroppingGraphTimer(replay_runs_all=True))
    assert lost.status == "wrong_kernel" and "graph replay ran" in lost.reason and "aten::_softmax" in lost.reason
    assert whole.status == "ok", whole.reason


def test_profiling_leaves_the_samples_as_they_were(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each call lasts longer than the one before (its index in ms on the injected clock): a profiled call before
    or among the samples would shift every sample after it."""
    calls = [0]

    class Counting(_Sdpa):
        name = "counting"

        def prepare(self, c, q, k, v):  # type: ignore[no-untyped-def]
            prepared = super().prepare(c, q, k, v)
            inner = prepared.call

            def call(*args):  # type: ignore[no-untyped-def]
                calls[0] += 1
                return inner(*args)
            prepared.call = call
            return prepared

    clock = lambda: calls[0] ** 2 * 1_000_000  # noqa: E731 - call n lasts 2n-1 ms
    with_profile = run(Counting(), ClockTimer(clock))
    calls[0] = 0
    monkeypatch.setattr(stages_module, "profiled", lambda *a, **k: _unprofiled())
    without = run(Counting(), ClockTimer(clock))
    assert with_profile.kernels and without.kernels is None
    assert with_profile.times_ms == without.times_ms and with_profile.time_ms == without.time_ms


def _unprofiled():  # type: ignore[no-untyped-def]
    from attnbench.run.profiled import KernelFields, Profiled

    return Profiled(KernelFields(), None, 0.0)


def test_trace_is_written_as_chrome_json_holding_the_profiled_call_and_one_timed_sample(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import re
    import subprocess
    import sys

    backend = default_registry().get("sdpa-flash")
    record = run(backend, settings=Settings(RunInfo("r", "t"), FEW, trace_dir=tmp_path))
    trace = tmp_path / record.trace
    assert record.trace == f"traces/{record.case_id}-sdpa-flash.json"
    assert sorted(p.name for p in trace.parent.iterdir()) == [trace.name], "no part of a trace is left beside it"
    read = subprocess.run([sys.executable, "-m", "json.tool", str(trace)], capture_output=True, text=True)
    assert read.returncode == 0, read.stderr
    events = json.loads(read.stdout)["traceEvents"]
    declared = backend.capabilities.attention_kernels("cpu", "fwd")
    ranges = {e["name"]: e for e in events if str(e.get("name", "")).startswith("attnbench: ")}
    assert set(ranges) == {"attnbench: profiled call", "attnbench: timed sample (perf_counter)"}
    for label, span in ranges.items():  # each call ran the declared kernel inside its own range
        inside = [e for e in events if e.get("ph") == "X" and any(re.search(p, e["name"]) for p in declared)
                  and span["ts"] <= e["ts"] <= span["ts"] + span["dur"]]
        assert len(inside) == 1, label
    assert ranges["attnbench: profiled call"]["ts"] < ranges["attnbench: timed sample (perf_counter)"]["ts"]
    assert record.extra["setup_parts"]["profile"] > 0 and record.samples == 5  # the sample is setup, not a sample


def test_a_profiler_that_cannot_run_gives_null_kernels_with_a_reason() -> None:
    from attnbench.timing.profile import profile_call

    def boom() -> None:
        raise RuntimeError("launch hidden")

    profile = profile_call(boom, "cpu")
    assert profile.kernels is None and "launch hidden" in profile.reason


def test_recommend_never_chooses_an_overhead_or_wrong_kernel_record() -> None:
    from attnbench.stats.metric import TIME
    from attnbench.stats.pooling import trouble

    clean = dataclasses.replace(quick_flash(), time_ms=1.0, ci_low_ms=0.9, ci_high_ms=1.1, noisy=False, overhead=None)
    assert trouble(clean, TIME) is None
    assert trouble(dataclasses.replace(clean, overhead="declared kernels 40% of the call"), TIME) == "overhead"
    assert dataclasses.replace(clean, status="wrong_kernel", reason="x").kernel_trouble == "wrong kernel"


def test_the_report_names_the_top_kernel_and_lists_overhead_and_wrong_kernel() -> None:
    from attnbench.report.findings import build_findings
    from attnbench.report.groups import group_records
    from attnbench.report.rows import ran_text

    flash = run(default_registry().get("sdpa-flash"))
    copies = run(CopiesFirst())
    wrong = run(ClaimsFlashRunsMath())
    assert ran_text(flash).startswith("aten::_scaled_dot_product_flash_attention_for_cpu ")
    assert "overhead" in ran_text(copies)
    records = [flash, copies, wrong]
    found = build_findings(group_records(records), records, None)
    assert any("copies-first" in line and "aten::copy_" in line for line in found.kernels)
    assert any(f.status == "wrong_kernel" for f in found.failures)


def test_compare_calls_out_a_backend_whose_kernel_changed() -> None:
    from attnbench.stats.compare import compare_records

    flash = run(default_registry().get("sdpa-flash"))
    math = dataclasses.replace(run(default_registry().get("sdpa-math")), backend="sdpa-flash")
    comparison = compare_records([flash], [math], "base", "new")
    change = comparison.matches[0].kernel_change
    assert change.startswith(f"sdpa-flash now runs {math.kernels[0]['name']}")
    assert "; no longer aten::_scaled_dot_product_flash_attention_for_cpu" in change
    assert "### Kernel changed" in comparison_markdown(comparison)


def test_compare_is_quiet_when_the_same_kernels_ran_in_another_order_of_time() -> None:
    """A naive CPU call's bmm and softmax hold close shares and trade the top place between identical runs."""
    from attnbench.stats.compare import compare_records

    base = run(default_registry().get("naive"))
    kernels = base.kernels
    assert len(kernels) >= 2
    swapped = dataclasses.replace(base, kernels=[kernels[1], kernels[0], *kernels[2:]])
    comparison = compare_records([base], [swapped], "base", "new")
    assert comparison.matches[0].kernel_change is None
    assert "### Kernel changed" not in comparison_markdown(comparison)


# ---- the CPU "done when": every ok record names its kernels, and the right ones -------------------------
def test_the_done_when_check_fails_on_a_record_that_names_no_kernel_or_the_wrong_one() -> None:
    from tests.helpers import CPU_FLASH, assert_kernels_named
    from tests.test_report import a_record

    def rec(backend: str, top: str, share: float | None = 0.9) -> Record:
        return Record.from_dict(a_record(backend=backend, case_id="c", attention_share=share,
                                         kernels=[{"name": top, "calls": 1, "time_ms": 1.0, "share": 1.0}]))

    both = [{"name": n, "calls": 1, "time_ms": 1.0, "share": 0.3} for n in ("aten::fill_", CPU_FLASH + "_backward",
                                                                               CPU_FLASH)]
    assert_kernels_named([rec("sdpa-flash", CPU_FLASH), rec("sdpa-math", "aten::bmm", 0.5),
                          rec("flex", "## Call CompiledFxGraph fabc"),
                          dataclasses.replace(rec("sdpa-flash", "x"), mode="fwd_bwd", kernels=both)])
    for planted in (rec("sdpa-flash", "aten::bmm"), rec("sdpa-math", CPU_FLASH), rec("flex", "aten::bmm"),
                    rec("naive", "aten::bmm", None), dataclasses.replace(rec("naive", "aten::bmm"), kernels=None),
                    dataclasses.replace(rec("naive", "aten::bmm"), kernels=[]),
                    dataclasses.replace(rec("sdpa-flash", "x"), mode="fwd_bwd", kernels=both[:2]),  # no flash forward
                    dataclasses.replace(rec("sdpa-flash", "x"), mode="fwd_bwd",
                                        kernels=[*both, {**both[0], "name": "aten::bmm"}])):  # and a matmul
        with pytest.raises(AssertionError):
            assert_kernels_named([planted])


LONG_SMALLEST = 512  # the CPU block's smallest length is 2048; its calls take seconds there (the block: ~6 minutes)


def long_cpu_block_at(seq: int) -> list[tuple[Case, str]]:
    """suites/long.yaml's CPU block, every backend and every axis, at `seq` tokens, each window scaled by `seq` over
    the block's smallest length (so a window still masks keys); flex on one case of the four: the windowed GQA one
    (its own mask and enable_gqa), for each of its graphs compiles for half a minute on a 2-core CPU."""
    import dataclasses
    from pathlib import Path

    from attnbench.sweep.suite import load_suite

    suite = load_suite(Path(__file__).parent.parent / "suites" / "long.yaml")
    cases = suite.cases("cpu")
    smallest = min(c.seq_len for c in cases)
    small = [dataclasses.replace(c, seq_len=seq, kv_seq_len=seq,
                                 window=None if c.window is None else c.window * seq // smallest)
             for c in cases if c.seq_len == smallest]
    assert len(small) == 4 and {c.window for c in small} == {None, 1024 * seq // smallest}
    flex_case = next(c for c in small if c.window is not None and c.kv_heads < c.heads)
    return [(c, b) for c in small for b in suite.model.backends or () if b != "flex" or c == flex_case]


@pytest.mark.slow
def test_every_ok_record_of_the_long_cpu_block_names_its_kernels() -> None:
    """The long block's CPU backends at a short length (what this leaves out: docs/verified.md)."""
    from attnbench.run.measure import InProcess
    from attnbench.run.schedule import Schedule
    from tests.helpers import ONE_SAMPLE, assert_kernels_named

    registry = default_registry()
    tasks = [(c, registry.get(b)) for c, b in long_cpu_block_at(LONG_SMALLEST)]
    records: list[Record] = []
    info = RunInfo("long-cpu-small", "long")
    Schedule(info).run(tasks, lambda case, record: records.append(record),
                       InProcess(ClockTimer(), Settings(info, ONE_SAMPLE)))
    as_dicts = [r.to_dict() for r in records]
    assert_kernels_named(records)
    ran = {r["backend"] for r in as_dicts if r["status"] == "ok"}
    assert ran == {"naive", "sdpa", "sdpa-math", "sdpa-flash", "flex", "sliding-window"}, as_dicts
    assert all(r["reason"] for r in as_dicts if r["status"] != "ok")  # every other backend said why (CUDA-only)


def test_the_committed_long_cpu_run_names_the_kernels_of_every_record_at_2k_to_8k() -> None:
    """reports/cpu-Intel-Xeon-2core-long, the CPU block of suites/long.yaml at its own lengths (2K-8K, what a
    test cannot afford to run): every ok record names what ran, by the same rule as the short run above."""
    from pathlib import Path

    from attnbench.records.results import load_records
    from tests.helpers import assert_kernels_named

    records = load_records(Path(__file__).parents[1] / "reports" / "cpu-Intel-Xeon-2core-long")
    assert_kernels_named(records)
    ok = [r for r in records if r.status == "ok"]
    assert {r.seq_len for r in ok} == {2048, 4096, 8192} and len(ok) == 66
    assert {r.backend for r in ok} == {"naive", "sdpa", "sdpa-math", "sdpa-flash", "flex", "sliding-window"}


@pytest.mark.slow
def test_the_gpu_checks_kernel_name_step_passes_a_traced_run_and_names_each_planted_fault(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """scripts/check_kernel_names.py (gpu-check.sh's step: every backend's records and traces against its declared
    names), run here on the recorded CPU run with traces, then on copies with one fault planted each."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).parents[1]
    script = root / "scripts" / "check_kernel_names.py"

    def check(run: Path) -> subprocess.CompletedProcess:  # type: ignore[type-arg]
        return subprocess.run([sys.executable, str(script), str(run.parent), "--device", "cpu"], capture_output=True,
                              text=True, timeout=120)

    clean = check(Path(shutil.copytree(root / "tests" / "data" / "trace-run", tmp_path / "clean" / "run")))
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert clean.stdout.splitlines()[-1] == \
        "kernel names: 3 backends checked (3 records, 3 traces), 0 unchecked, 0 problems"

    def planted(name: str, change) -> str:  # type: ignore[no-untyped-def]
        run = Path(shutil.copytree(root / "tests" / "data" / "trace-run", tmp_path / name / "run"))
        records = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
        change(run, next(r for r in records if r["backend"] == "sdpa-flash"))
        (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        result = check(run)
        assert result.returncode == 1, result.stdout
        return result.stdout

    def drop_kernel(run: Path, r: dict) -> None:  # type: ignore[type-arg]
        trace = run / r["trace"]
        data = json.loads(trace.read_text())
        data["traceEvents"] = [e for e in data["traceEvents"] if "flash_attention" not in str(e.get("name"))]
        trace.write_text(json.dumps(data))

    assert "names none of the declared kernels" in planted("no-kernel", drop_kernel)
    assert "wrong_kernel: math ran" in planted("wrong", lambda run, r: r.update(status="wrong_kernel",
                                                                                 reason="math ran"))
    assert "no kernels seen (hidden)" in planted("null", lambda run, r: r.update(kernels=None, kernels_reason="hidden"))
    assert "is not a Chrome trace" in planted("cut", lambda run, r: (run / r["trace"]).write_text("{\"traceEv"))


@pytest.mark.slow
def test_the_profilers_start_and_stop_lines_never_reach_the_runs_stderr_and_everything_else_does() -> None:
    """torch 2.13's Kineto writes "USDT:... profiler_start" to stderr twice per profiled call: into every run's
    progress. A real profiled call in a fresh process, with a line of the call's own written meanwhile."""
    import subprocess
    import sys

    script = ("import os, torch\n"
              "from attnbench.timing.profile import profile_call\n"
              "a, b = torch.randn(256, 256), torch.randn(256, 256)  # made outside: the call is the mm alone\n"
              "def fn():\n"
              "    os.write(2, b'the call says this\\n')\n"
              "    return torch.mm(a, b)\n"
              "print(profile_call(fn, 'cpu').kernels[0].name)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert "aten::mm" in done.stdout
    assert "USDT" not in done.stderr and "profiler_start" not in done.stderr
    assert "the call says this" in done.stderr


# ---- the verdict by share, on the committed profiles ---------------------------------------------------------------
PROFILED_RUNS = ("reports/cpu-Intel-Xeon-2core-quick", "reports/cpu-Intel-Xeon-2core-long",
                 "reports/cpu-Intel-Xeon-2core-frameworks", "reports/cpu-Intel-Xeon-2core-fp8", "tests/data/trace-run")


def committed_profiles() -> list[Record]:
    from pathlib import Path

    from attnbench.records.results import load_records

    root = Path(__file__).resolve().parents[1]
    return [r for run in PROFILED_RUNS for r in load_records(root / run) if r.kernels]


def rejudge(record: Record, extra: tuple[tuple[str, float], ...] = (), device: str | None = None):  # type: ignore[no-untyped-def,type-arg]
    """A stored record's profile judged again by today's declarations, with kernels of `extra` (name, share of the
    new call) added beside it."""
    from attnbench.backends.registry import declared_kernels
    from attnbench.timing.profile import judge_kernels, kernels_from

    rows = [(k["name"], k["calls"], k["time_ms"]) for k in record.kernels]
    total = sum(ms for _, _, ms in rows)
    whole = total / (1 - sum(share for _, share in extra))  # the call with the planted kernels in it
    rows += [(name, 1, whole * share) for name, share in extra]
    device = device or record.device
    own = default_registry().get(record.backend).capabilities.attention_kernels(device, record.mode)
    return judge_kernels(kernels_from(rows), own, declared_kernels(device, record.mode), record.backend, device)


def test_every_committed_profile_keeps_its_verdict_under_todays_names() -> None:
    """198 real profiled calls (quick, long, frameworks, fp8, the traced run): none is another backend's kernel, and
    each keeps the attention share and the overhead flag it was recorded with; naive-fp8, which declared nothing
    then, is the math path now, flagged by its dequantizing copies."""
    records = committed_profiles()
    assert len(records) == 198
    for r in records:
        verdict = rejudge(r)
        assert verdict.wrong_kernel is None, (r["backend"], r["case_id"], verdict.wrong_kernel)
        if r.backend == "naive-fp8":
            assert r.attention_share is None
            assert verdict.overhead is not None and "aten::copy_" in verdict.overhead
            continue
        assert round(verdict.attention_share, 4) == r.attention_share, (r.backend, r.case_id)
        assert bool(verdict.overhead) == bool(r.overhead), (r.backend, r.case_id)


def quick_flash() -> Record:
    return next(r for r in committed_profiles() if r.backend == "sdpa-flash" and r.mode == "fwd"
                and r.case_id == "cpu-fp32-b1-s512-h8-kv8-d64-causal-fwd")


def test_a_crumb_of_another_backends_kernel_is_no_verdict_and_a_share_beyond_the_noise_is() -> None:
    """Edits of a real sdpa-flash profile (quick, 512 tokens): the math path's aten::bmm planted beside the flash
    kernel at 0.2% and 9% of the call is a crumb under the ±10% a CPU record's median is measured to; at 11% and 30%
    its time is measurably naive's: wrong_kernel, naming it."""
    flash = quick_flash()
    assert rejudge(flash).wrong_kernel is None
    for crumb in (0.002, 0.09):
        assert rejudge(flash, (("aten::bmm", crumb),)).wrong_kernel is None, crumb
    for share in (0.11, 0.30):
        reason = rejudge(flash, (("aten::bmm", share),)).wrong_kernel
        assert reason is not None and reason.startswith(f"aten::bmm (naive's kernel: {share:.0%} of the call"), reason
    # Two foreign kernels of one backend count together: 6% + 6% of the math path's is beyond 10%.
    both = rejudge(flash, (("aten::bmm", 0.06), ("aten::_softmax", 0.06))).wrong_kernel
    assert both is not None and "naive's kernels: 12% of the call, at least 10%" in both


def test_on_cuda_the_share_is_the_gpus_precision_and_a_gemm_crumb_in_a_flash_call_is_no_verdict() -> None:
    """The issue's case: a 0.2% sm90_xmma_gemm inside an sdpa-flash call made it wrong_kernel ("naive's kernel").
    The same real profile with its kernel named as on CUDA (FA2's forward): under the GPU's ±1% a crumb, at 5% a
    verdict (on a CPU, 9% of aten::bmm above is a crumb: the share is each device's precision)."""
    fa2 = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4, false, false, float>>"
    flash = dataclasses.replace(quick_flash(), device="cuda", kernels=[
        dict(k, name=fa2) if k["name"].startswith("aten::_scaled_dot") else k for k in quick_flash().kernels or ()])
    xmma = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_kernel__5x_cublas"
    assert rejudge(flash, ((xmma, 0.002),)).wrong_kernel is None
    assert rejudge(flash, ((xmma, 0.009),)).wrong_kernel is None
    assert "naive's kernel: 5% of the call, at least 1%" in str(rejudge(flash, ((xmma, 0.05),)).wrong_kernel)


def test_a_failed_profile_is_shown_unchecked_and_never_counted_as_checked() -> None:
    """Real records: the frameworks run's runtime records, whose torch.profiler saw no op (kernels null), an H200
    record written before profiling, and a quick sdpa-flash record with its profile planted as failed."""
    from pathlib import Path

    from attnbench.records.results import load_records
    from attnbench.report.findings import overhead_lines, unchecked_lines
    from attnbench.report.rows import kernel_unchecked, ran_text

    root = Path(__file__).resolve().parents[1]
    flash = quick_flash()
    failed = dataclasses.replace(flash, kernels=None, kernels_reason="the profiler could not run: RuntimeError: busy",
                                 attention_share=None)
    assert kernel_unchecked(flash) is None and not ran_text(flash).count("unchecked")
    assert ran_text(failed) == "unchecked: the profiler could not run: RuntimeError: busy"
    old = load_records(root / "reports" / "NVIDIA-H200-20261130-012030" / "run")[0]
    assert old.status == "ok" and ran_text(old) == "unchecked: written before profiling"
    frameworks = load_records(root / "reports" / "cpu-Intel-Xeon-2core-frameworks")
    jax = next(r for r in frameworks if r.backend == "jax" and r.status == "ok")
    assert ran_text(jax) == "unchecked: the profiler saw no op in the call"
    undeclared = dataclasses.replace(flash, attention_share=None)
    assert "unchecked: its backend declares no kernel names here" in ran_text(undeclared)
    lines = unchecked_lines([flash, failed, *frameworks])
    assert "Kernels unchecked (the profiler could not run: RuntimeError: busy): sdpa-flash 1 of 15." in lines
    assert "Kernels unchecked (the profiler saw no op in the call): jax 13 of 13, onnxruntime 13 of 13, " \
           "onnxruntime-gqa 7 of 7, onnxruntime-mha 13 of 13, openvino 13 of 13." in lines
    # The overhead line counts profiled records only: the failed one is not among them.
    copies = dataclasses.replace(
        flash, attention_share=0.55,
        overhead="declared kernels 55% of the call (under 80%); the rest: aten::copy_ 45% (copy)")
    assert overhead_lines([copies, failed]) == ["sdpa-flash: overhead in 1 of 1 profiled records; its declared "
                                                "kernels 55% of the call; the rest most often aten::copy_ (copy)."]


class FlashWithAMatmulCrumb(_Sdpa):
    name = "flash-with-a-matmul-crumb"

    @staticmethod
    def call(q, k, v):  # type: ignore[no-untyped-def]
        import torch

        torch.bmm(q[0, :1, :4], k[0, :1, :4].transpose(-1, -2))  # a 4x4 matmul: the math path's op, a crumb
        return _Sdpa.call(q, k, v)


class FlashThenMath(_Sdpa):
    name = "flash-then-math"

    @staticmethod
    def call(q, k, v):  # type: ignore[no-untyped-def]
        for _ in range(4):  # the whole attention again on the math path, four times: a single profiled call on a
            ClaimsFlashRunsMath.call(q, k, v)  # busy CPU saw its bmm and softmax at 6% of the call once
        return _Sdpa.call(q, k, v)


def test_planted_backends_a_matmul_crumb_stays_ok_and_a_second_attention_on_the_math_path_is_wrong_kernel() -> None:
    """Real measurements at quick's size: a 4x4 aten::bmm beside the flash kernel is a crumb of its call; the math
    path run beside it takes well over the CPU's 10% and is another backend's kernel."""
    sized = Case("cpu", "float32", 1, 512, 512, 8, 8, 64, True, None, "fwd")
    crumb = run(FlashWithAMatmulCrumb(), c=sized)
    assert any(k["name"] == "aten::bmm" for k in crumb.kernels)
    assert crumb.status == "ok", crumb.reason
    fallback = run(FlashThenMath(), c=sized)
    assert fallback.status == "wrong_kernel", fallback.kernels
    assert "(naive's kernels:" in fallback.reason and "ran under flash-then-math" in fallback.reason
