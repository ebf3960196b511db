"""attnbench.timing.bracket and the timer per runtime, from the H200 run of 2026-12-04
(reports/NVIDIA-H200-20261204-c671d98): jax-cudnn's events read 1.25-2.0 us for a case cuDNN's kernel takes 152 us,
because JAX's blocking call ran on its own stream while the spin held torch's and both events came after it.
Replayed on a simulated GPU (tests/cuda_timeline.py), exact to the nanosecond."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path

import pytest

from attnbench.backends.base import Backend, Capabilities, Prepared
from attnbench.backends.registry import default_registry
from attnbench.core import policy
from attnbench.core.case import Case
from attnbench.records.results import load_records
from attnbench.run.measure import Settings, measure
from attnbench.run.recording import RunInfo
from attnbench.timing.bracket import OWN_RUNTIME, TORCH_STREAM, Bracket, judged
from attnbench.timing.timers import CudaEventTimer, CudaGraphTimer, HostTimer, TimingSettings, timer_for_work
from attnbench.verify.inputs import CaseData
from tests.cuda_timeline import Flush, Timeline
from tests.helpers import make_case

H200 = Path(__file__).resolve().parents[1] / "reports" / "NVIDIA-H200-20261204-c671d98"
TIMER_RUN = H200.parent / "NVIDIA-H200-20261204-timer"  # the timer per runtime on the same GPU that day
CASE = "cuda-bf16-b1-s4096-h16-kv16-d128-causal-fwd"
RUNTIMES = ("jax", "jax-cudnn", "onnxruntime", "onnxruntime-mha", "onnxruntime-gqa", "openvino")
SETTINGS = TimingSettings(warmup_ms=0, budget_ms=5, min_samples=6, max_samples=50)
FLUSH_NS = 26_000  # 120 MiB at 4.8 TB/s
DISPATCH_NS = 5_000  # assumed: JAX's dispatch before its kernel starts


def h200() -> dict[str, dict]:
    """jax-cudnn's and sdpa-cudnn's records of CASE, and triton's do_bench of sdpa-cudnn on it (ms)."""
    records = {r.backend: r for r in load_records(H200 / "check") if r.case_id == CASE}
    bench = next(x for x in json.loads((H200 / "xcheck-run1.json").read_text())
                 if x["name"] == "sdpa-cudnn" and x["seq"] == 4096 and x["kv_heads"] == 16)
    return {"jax": records["jax-cudnn"], "sdpa": records["sdpa-cudnn"], "do_bench_ms": bench["ms"]}


def ns(ms: float) -> int:
    return round(ms * 1e6)


def timeline() -> tuple[Timeline, CudaEventTimer, int]:
    """The simulated GPU with an empty pair of the recorded jax-cudnn events' least time, the event timer on it, and
    cuDNN's kernel (do_bench's median) in ns."""
    found = h200()
    line = Timeline(pair_ns=ns(min(found["jax"].times_ms)))
    timer = CudaEventTimer(device="meta", cuda=line, host_clock=line.clock)
    timer.flush = Flush(line, FLUSH_NS)
    return line, timer, ns(found["do_bench_ms"])


def test_the_recorded_values_the_replay_is_built_from() -> None:
    found = h200()
    assert found["jax"].timer == "cuda-event" and found["jax"].status == "implausible"  # stored ok, read back judged
    assert min(found["jax"].times_ms) == pytest.approx(0.001248) and found["jax"].time_ms < 0.0021
    assert found["do_bench_ms"] == pytest.approx(0.152064, abs=1e-6)
    assert found["sdpa"].time_ms == pytest.approx(0.1548, abs=1e-4) and found["sdpa"].kernels[0]["share"] > 0.99


@pytest.mark.parametrize("dispatch", ["assumed", "recorded"])
def test_events_bracket_nothing_of_a_runtimes_blocking_call_and_the_host_timer_times_it(dispatch: str) -> None:
    """The old path (events behind the cover) reads the empty pair, 1.248 us, for every sample, and the guard calls it
    an error; the host timer reads the call: cuDNN's 152 us and JAX's dispatch. With a dispatch assumed small it is
    within 5% of do_bench's cuDNN; with the one the record implies (launch_cover_us = 1.5 x the host's enqueue of a
    call + 10 us: 0.51 ms, of which 16 us the spin's, flush's and events' launches), 0.50 ms, never the 1.25 us."""
    line, events, kernel_ns = timeline()
    record = h200()["jax"]
    enqueues = 4 * line.launch_ns  # the spin, the flush and the two events around the call
    implied = ns((record.extra["launch_cover_us"] / 1e3 - 0.01) / 1.5) - enqueues - kernel_ns
    dispatch_ns = DISPATCH_NS if dispatch == "assumed" else implied
    call = lambda: line.blocking_call(kernel_ns, dispatch_ns)  # noqa: E731

    old = events.measure(call, SETTINGS)
    assert set(old.times) == {line.pair_ns / 1e6} and old.times[0] == pytest.approx(min(record.times_ms))  # 1.248 us
    assert events.bracket == Bracket((enqueues + dispatch_ns + kernel_ns) / 1e6, line.pair_ns / 1e6,
                                     line.pair_ns / 1e6)
    problem, note = judged(events.bracket, TORCH_STREAM)
    assert note is None and problem is not None
    assert problem.startswith("the events on torch's stream saw 1.25 us of the ")
    assert "within 2x an empty pair's 1.25 us: they bracketed nothing" in problem

    host = timer_for_work(events, OWN_RUNTIME)
    assert isinstance(host, HostTimer) and host.name == "host (blocking call)"
    new = host.measure(call, SETTINGS)
    assert set(new.times) == {(dispatch_ns + kernel_ns) / 1e6}
    if dispatch == "assumed":
        assert abs(statistics.median(new.times) / h200()["do_bench_ms"] - 1) < 0.05
    else:
        assert statistics.median(new.times) == pytest.approx(0.4964, abs=1e-4)
    assert host.bracket is not None and host.bracket.events_ms == line.pair_ns / 1e6
    problem, note = judged(host.bracket, OWN_RUNTIME)
    assert problem is None and note is not None and "its work runs in its own runtime, as declared" in note
    assert host.extra["host_ms"] == statistics.median(new.times) and host.extra["events_empty_ms"] == 0.001248


def test_work_on_torchs_stream_is_timed_by_its_events_and_never_flagged() -> None:
    """cuDNN's kernel launched on torch's stream: the events read it (and the pair's 1.25 us: 153.3 us beside the
    record's 154.8 and do_bench's 152.1). A call 300 us slow to enqueue a 10 us kernel (the events' share of its host
    time is 3.5%, under the 10%) and one that synchronises inside are not flagged: their events saw a kernel."""
    line, events, kernel_ns = timeline()
    sdpa = events.measure(lambda: line.torch_kernel(kernel_ns), SETTINGS)
    assert set(sdpa.times) == {(kernel_ns + line.pair_ns) / 1e6}
    assert abs(sdpa.times[0] / h200()["sdpa"].time_ms - 1) < 0.02
    assert judged(events.bracket, TORCH_STREAM) == (None, None)

    def slow_to_enqueue() -> None:
        line.host_work(300_000)
        line.torch_kernel(10_000)

    assert set(events.measure(slow_to_enqueue, SETTINGS).times) == {(10_000 + line.pair_ns) / 1e6}
    assert events.bracket is not None and events.bracket.share < policy.EVENTS_SHARE
    assert judged(events.bracket, TORCH_STREAM) == (None, None)

    def synchronising() -> None:
        line.torch_kernel(50_000)
        line.synchronize()

    # the end event is enqueued after the synchronize returns: its wait and launch are in the call
    assert set(events.measure(synchronising, SETTINGS).times) == {(50_000 + line.sync_ns + line.launch_ns
                                                             + line.pair_ns) / 1e6}
    assert judged(events.bracket, TORCH_STREAM) == (None, None)


def test_the_rule_on_every_committed_h200_record_flags_jax_cudnns_and_no_other() -> None:
    """Each record's host time per call recovered from its launch cover (the last batch's median x 1.5 + 10 us), its
    events' from time_ms, the empty pair from jax-cudnn's least sample: the guard errs exactly jax-cudnn's four."""
    records = [r for r in load_records(H200 / "check") if r.device == "cuda" and r.timer == "cuda-event"]
    empty = min(min(r.times_ms) for r in records if r.backend == "jax-cudnn")
    flagged = set()
    for r in records:
        host = (r.extra["launch_cover_us"] / 1e3 - 0.01) / 1.5
        problem, note = judged(Bracket(host, r.time_ms, empty), TORCH_STREAM)
        assert note is None
        if problem:
            flagged.add((r.backend, r.case_id))
    assert len(records) == 82 and {b for b, _ in flagged} == {"jax-cudnn"} and len(flagged) == 4


def test_the_timer_per_runtime_on_the_h200() -> None:
    """reports/NVIDIA-H200-20261204-timer: jax-cudnn timed on the host, 2.3-2.4x sdpa-cudnn's events, never under them,
    its events within the empty pair beside it (noted; the same clocks undeclared would err); in one process the old
    path's events read the empty pair (the rule errs them) and the host timer agrees with 50 calls back to back
    within 15% (its L2 flush and synchronize before each call aside); and sdpa-cudnn's asynchronous call, timed as
    if it blocked, read 0.019 ms for a 0.154 ms kernel: declared so, the rule errs it."""
    records = {(r.backend, r.kv_heads): r for r in load_records(TIMER_RUN / "timer-check")}
    for kv in (16, 4):
        jax, sdpa = records["jax-cudnn", kv], records["sdpa-cudnn", kv]
        assert (jax.status, jax.timer, sdpa.status, sdpa.timer) == ("ok", "host (blocking call)", "ok", "cuda-event")
        assert 2 < jax.time_ms / sdpa.time_ms < 2.6 and sdpa.time_ms == pytest.approx(0.155, abs=0.001)
        seen = Bracket(jax.extra["host_ms"], jax.extra["events_ms"], jax.extra["events_empty_ms"])
        assert seen.host_ms == jax.time_ms and seen.events_ms <= seen.empty_ms
        assert judged(seen, OWN_RUNTIME) == (None, jax.extra["off_stream"])
        assert judged(seen, TORCH_STREAM)[0] is not None
        assert judged(Bracket(sdpa.extra["host_ms"], sdpa.time_ms, sdpa.extra["events_empty_ms"]),
                      TORCH_STREAM) == (None, None)
    compare = json.loads((TIMER_RUN / "compare.json").read_text())
    for row in compare.values():
        old_ms, old = row["jax-cudnn events"]
        assert old_ms <= 2 * old["events_empty_ms"] and old_ms < 0.002
        assert "they bracketed nothing" in judged(Bracket(old["host_ms"], old["events_ms"], old["events_empty_ms"]),
                                                  TORCH_STREAM)[0]
        assert abs(row["jax-cudnn host"][0] / row["jax-cudnn loop ms"] - 1) < 0.15
        early_ms, early = row["sdpa-cudnn host"]
        assert early_ms < 0.15 * row["sdpa-cudnn loop ms"]
        problem, _ = judged(Bracket(early["host_ms"], early["events_ms"], early["events_empty_ms"]), OWN_RUNTIME)
        assert problem is not None and problem.startswith("the call, declared to block, returned before its work")


def test_a_call_declared_to_block_that_returns_early_is_an_error() -> None:
    """A backend declaring its own runtime whose call only enqueues on torch's stream: the host's clock reads the
    launch (4 us) of a 152 us kernel; the events behind the spin see the kernel, far over the host's time."""
    line, events, kernel_ns = timeline()
    record = measure(CaseData(make_case(seq_len=32)), simulated(OWN_RUNTIME, lambda: line.torch_kernel(kernel_ns)),
                     events, Settings(RunInfo("r", "t"), SETTINGS))
    assert record.status == "error" and record.time_ms is None
    assert record.reason == ("integrity: the call, declared to block, returned before its work was done: the events on "
                             "torch's stream saw 153 us, over 2x the 4 us it held the host (a call that enqueues on "
                             "torch's stream declares Capabilities(runs_on=\"torch-stream\"))")


class SimulatedCall(Backend):
    """naive on the CPU whose call also runs `work` on the simulated GPU: its check is real, its time simulated."""

    name = "simulated"
    work: Callable[[], None] = staticmethod(lambda: None)

    def prepare(self, case: Case, q, k, v) -> Prepared:  # type: ignore[no-untyped-def]
        made = default_registry().get("naive").prepare(case, q, k, v)
        inner = made.call

        def call(*inputs):  # type: ignore[no-untyped-def]
            self.work()
            return inner(*inputs)

        made.call = call
        return made


def simulated(runs_on: str, work: Callable[[], None]) -> Backend:
    kind = type("Simulated", (SimulatedCall,), {"capabilities": Capabilities(runs_on=runs_on),
                                                  "work": staticmethod(work)})
    return kind()


def test_the_record_names_the_timer_and_carries_host_and_events_side_by_side() -> None:
    """Through measure(): declared, the record is timed on the host, with the events beside it and the note; the same
    call undeclared is `error` (integrity), its reason holding both times, never a time of 1.25 us."""
    line, events, kernel_ns = timeline()
    run = Settings(RunInfo("r", "t"), SETTINGS)
    data = CaseData(make_case(seq_len=32))
    call = lambda: line.blocking_call(kernel_ns, DISPATCH_NS)  # noqa: E731

    declared = measure(data, simulated(OWN_RUNTIME, call), events, run)
    assert declared.status == "ok" and declared.timer == "host (blocking call)", declared.reason
    assert declared.time_ms == (kernel_ns + DISPATCH_NS) / 1e6 == declared.extra["host_ms"]
    assert declared.extra["events_ms"] == 0.001248 and declared.extra["events_empty_ms"] == 0.001248
    assert declared.extra["off_stream"].startswith("the events on torch's stream saw 1.25 us of the 157 us each call")

    undeclared = measure(data, simulated(TORCH_STREAM, call), events, run)
    assert undeclared.status == "error" and undeclared.time_ms is None and undeclared.timer is None
    assert undeclared.reason.startswith("integrity: the events on torch's stream saw 1.25 us of the 173 us each call")
    assert 'declares Capabilities(runs_on="own-runtime")' in undeclared.reason
    assert undeclared.extra["host_ms"] == 0.173064 and undeclared.extra["events_ms"] == 0.001248

    plain = measure(data, simulated(TORCH_STREAM, lambda: line.torch_kernel(kernel_ns)), events, run)
    assert plain.status == "ok" and plain.timer == "cuda-event" and "off_stream" not in plain.extra
    assert plain.time_ms == 0.153312 and plain.extra["events_ms"] == plain.time_ms


def wrapped(name: str, work: Callable[[], None]) -> Backend:
    """The registry's backend, its call also running `work` on the simulated GPU; its declaration its own."""
    base = type(default_registry().get(name))

    def prepare(self, case, q, k, v):  # type: ignore[no-untyped-def]
        made = base.prepare(self, case, q, k, v)
        inner = made.call

        def call(*inputs):  # type: ignore[no-untyped-def]
            work()
            return inner(*inputs)

        made.call = call
        return made

    return type(f"Timed{base.__name__}", (base,), {"prepare": prepare})()


@pytest.mark.parametrize("name", ["jax", "onnxruntime"])
def test_jax_and_onnxruntime_declare_their_work_off_torchs_stream(name: str) -> None:
    """Every runtime backend declares it (ONNX Runtime's in op_capabilities, the one place each op's, its CUDA
    provider's too once mapped, takes it from); the real call, measured with the CUDA timer, is timed on the host."""
    registry = default_registry()
    assert {n: registry.get(n).capabilities.runs_on for n in RUNTIMES} == dict.fromkeys(RUNTIMES, OWN_RUNTIME)
    assert registry.get("sdpa").capabilities.runs_on == TORCH_STREAM
    line, events, kernel_ns = timeline()
    record = measure(CaseData(make_case(seq_len=32)), wrapped(name, lambda: line.blocking_call(kernel_ns, 0)),
                     events, Settings(RunInfo("r", "t"), SETTINGS))
    assert record.status == "ok", record.reason
    assert record.timer == "host (blocking call)" and record.time_ms == kernel_ns / 1e6
    assert "its own runtime, as declared" in record.extra["off_stream"]


def test_a_cuda_graph_captures_torchs_stream_only_so_a_runtime_is_skipped_by_the_run_and_the_forecast() -> None:
    from attnbench.run import forecast
    from attnbench.run.calibration import datasheet
    from attnbench.run.skip import why_skipped

    jax = default_registry().get("jax")
    record = measure(CaseData(make_case(seq_len=32)), jax, CudaGraphTimer(), Settings(RunInfo("r", "t"), SETTINGS))
    assert record.status == "skipped"
    assert record.reason == "the cuda-graph timer times work on torch's stream only; jax's runs in its own runtime"
    case = make_case(device="cuda", dtype="bfloat16")
    facts = forecast.facts(case, default_registry().get("jax-cudnn"), datasheet("H200"), None, {},
                           timer_runs_on=CudaGraphTimer.runs_on)
    assert why_skipped(case, default_registry().get("jax-cudnn"), facts) is not None
    assert why_skipped(case, default_registry().get("sdpa"), facts) is None


def test_runs_on_is_one_of_two_places_declared_in_capabilities() -> None:
    with pytest.raises(ValueError, match="runs_on='jax-stream'"):
        Capabilities(runs_on="jax-stream")
    with pytest.raises(TypeError, match="declare runs_on in capabilities"):
        type("Plugin", (Backend,), {"runs_on": OWN_RUNTIME})
