"""attnbench.gpu.judge: `throttled` means a throttling clock event reason or a process that is not this run's.

The H200 runs of 2026-11-30 (tests/data/gpu/h200-runs.json, from reports/NVIDIA-H200-20261130-*) flagged all
240 timed records `throttled` at 1695-1980 MHz, most with no clock event reason: the one "other process" was
the run's own parent. Their recorded samples are replayed here through the judgement the worker makes now.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from attnbench.gpu import judge
from attnbench.gpu.harness import HARNESS_GPUS_VAR
from attnbench.gpu.nvml import NvmlReader
from attnbench.gpu.sample import measurement_sample
from attnbench.gpu.state import REASONS, GpuId, GpuProcess, GpuState
from tests.fake_nvml import FakeNvml
from tests.fake_smi import H200

H200_RUNS = json.loads((Path(__file__).parent / "data" / "gpu" / "h200-runs.json").read_text())["runs"]
BITS = {name: bit for bit, name in REASONS.items()}


@pytest.mark.parametrize("reasons, names, throttled", [
    (0x40, ("hw_thermal_slowdown",), True),
    (0x4, ("sw_power_cap",), True),
    (0x8, ("hw_slowdown",), True),
    (0x80, ("hw_power_brake_slowdown",), True),
    (0x20, ("sw_thermal_slowdown",), True),
    (0x1, ("gpu_idle",), False),
    (0x2, ("applications_clocks_setting",), False),
    (0x10, ("sync_boost",), False),
    (0x0, (), False),
    (0x41, ("gpu_idle", "hw_thermal_slowdown"), True),
])
def test_a_measurement_is_throttled_only_by_heat_or_power(reasons: int, names: tuple[str, ...],
                                                          throttled: bool) -> None:
    sample = measurement_sample(H200, NvmlReader(FakeNvml(reasons=reasons)))
    assert (sample.throttled, sample.sm_clock_mhz, sample.clock_event_reasons, sample.other_processes) == (
        throttled, 1980, names, 0)


def test_another_process_on_the_gpu_flags_the_measurement() -> None:
    ours = SimpleNamespace(pid=os.getpid(), usedGpuMemory=1 << 29)
    theirs = SimpleNamespace(pid=os.getpid() + 100000, usedGpuMemory=None)
    shared = measurement_sample(H200, NvmlReader(FakeNvml(processes=[ours, theirs])))
    assert shared.throttled is True and shared.other_processes == 1
    alone = measurement_sample(H200, NvmlReader(FakeNvml(processes=[ours])))
    assert alone.throttled is False and alone.other_processes == 0


def test_in_another_pid_namespace_one_listed_process_is_taken_to_be_this_one() -> None:
    from attnbench.gpu.read import snapshot

    host = [SimpleNamespace(pid=900001, usedGpuMemory=None)]  # our process, by its host pid
    alone = measurement_sample(H200, NvmlReader(FakeNvml(processes=host)))
    assert alone.throttled is False and alone.other_processes == 0
    two = host + [SimpleNamespace(pid=900002, usedGpuMemory=None)]
    shared = measurement_sample(H200, NvmlReader(FakeNvml(processes=two)))
    assert shared.throttled is True and shared.other_processes == 1
    # A snapshot taken before this process touched the GPU counts every listed process as another.
    before = snapshot(H200, NvmlReader(FakeNvml(processes=host)))
    assert before.other_process_count == 1 and not before.pid_namespace_differs


def test_unknown_reasons_leave_throttled_unknown_not_false() -> None:
    sample = measurement_sample(H200, NvmlReader(FakeNvml(unsupported={"nvmlDeviceGetCurrentClocksEventReasons"})))
    assert sample.throttled is None and sample.clock_event_reasons is None
    assert judge.throttled(("sw_power_cap",), None) is True  # evidence of either is enough
    assert judge.throttled((), None) is None and judge.throttled((), 0) is False


def test_the_harness_parent_holding_a_context_is_not_another_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Named by the parent, it is discounted, in a container (pids from another namespace) and out of one (the
    parent's own pid); a third process still flags the record."""
    worker, parent, stranger = (SimpleNamespace(pid=p, usedGpuMemory=None) for p in (900001, 900002, 900003))
    monkeypatch.setenv(HARNESS_GPUS_VAR, H200.uuid)
    two = measurement_sample(H200, NvmlReader(FakeNvml(processes=[worker, parent])))
    assert two.throttled is False and two.other_processes == 0
    three = measurement_sample(H200, NvmlReader(FakeNvml(processes=[worker, parent, stranger])))
    assert three.throttled is True and three.other_processes == 1
    ours = [SimpleNamespace(pid=os.getpid(), usedGpuMemory=None), SimpleNamespace(pid=os.getppid(), usedGpuMemory=None)]
    assert measurement_sample(H200, NvmlReader(FakeNvml(processes=ours))).other_processes == 0
    monkeypatch.setenv(HARNESS_GPUS_VAR, "GPU-some-other-card")  # the parent's context is elsewhere
    elsewhere = measurement_sample(H200, NvmlReader(FakeNvml(processes=[worker, parent])))
    assert elsewhere.throttled is True and elsewhere.other_processes == 1


def test_the_harness_discount_is_a_pure_function_of_the_listed_pids() -> None:
    me, parent, stranger = GpuProcess(10), GpuProcess(9), GpuProcess(77)
    assert judge.others([me, parent], own_pid=10, holds_context=True, harness=True, parent_pid=9).count == 0
    assert judge.others([me, parent], own_pid=10, holds_context=True).count == 1  # the parent, unnamed
    assert judge.others([me, parent, stranger], 10, True, True, 9).listed == (stranger,)
    container = judge.others([GpuProcess(500), GpuProcess(501)], own_pid=10, holds_context=True, harness=True)
    assert container.count == 0 and container.pid_namespace_differs and len(container.listed) == 2


def h200_worker_saw(recorded: dict, uuid: str, namespace: str) -> NvmlReader:
    """NVML as one H200 worker saw it right after a timing: the recorded clock and clock event reasons, and the two
    processes that made `other_gpu_processes` 1, worker and parent (their pids were not recorded: both shapes that
    give 1 are tried, the worker's own pids and a container's host pids)."""
    extra = recorded["extra"]
    pids = [os.getpid(), os.getppid()] if namespace == "host" else [2_000_001, 2_000_002]
    return NvmlReader(FakeNvml(values={**FakeNvml().values, "sm_clock": extra["sm_clock_mhz"], "uuid": uuid},
                               reasons=sum(BITS[name] for name in extra["clock_event_reasons"]),
                               processes=[SimpleNamespace(pid=pid, usedGpuMemory=None) for pid in pids]))


@pytest.mark.parametrize("namespace", ["host", "container"])
@pytest.mark.parametrize("run", sorted(H200_RUNS))
def test_the_h200_runs_recorded_state_is_not_throttled_once_the_harness_is_discounted(
        run: str, namespace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    records = H200_RUNS[run]["records"]
    uuid = H200_RUNS[run]["gpu_state"][0]["uuid"]
    gpu = GpuId(0, uuid[len("GPU-"):], "00000000:00:06.0")  # torch's name for that H200
    capped = [r for r in records if r["extra"]["clock_event_reasons"]]
    calm = [r for r in records if not r["extra"]["clock_event_reasons"]]
    assert {r["throttled"] for r in records} == {True} and {r["extra"]["other_gpu_processes"] for r in records} == {1}
    assert {tuple(r["extra"]["clock_event_reasons"]) for r in capped} == {("sw_power_cap",)}
    assert len(capped) == {"NVIDIA-H200-20261130-012030": 10, "NVIDIA-H200-20261130-012712": 15}[run]
    assert {r["extra"]["sm_clock_mhz"] for r in calm} <= set(range(1695, 1981))

    # Without the harness named (the code those runs had), the replay gives what the H200 recorded.
    monkeypatch.delenv(HARNESS_GPUS_VAR, raising=False)
    for recorded in records:
        got = measurement_sample(gpu, h200_worker_saw(recorded, uuid, namespace))
        assert (got.throttled, got.other_processes, got.sm_clock_mhz, list(got.clock_event_reasons)) == (
            True, 1, recorded["extra"]["sm_clock_mhz"], recorded["extra"]["clock_event_reasons"])
    # Named by the parent, as isolation does now: only the power-capped timings are throttled.
    monkeypatch.setenv(HARNESS_GPUS_VAR, gpu.uuid)
    for recorded in records:
        got = measurement_sample(gpu, h200_worker_saw(recorded, uuid, namespace))
        assert got.other_processes == 0 and got.throttled is bool(recorded["extra"]["clock_event_reasons"])
    # A real stranger on the GPU, or a throttling reason, still flags a calm timing.
    stranger = h200_worker_saw(calm[0], uuid, namespace)
    stranger.lib.processes.append(SimpleNamespace(pid=2_000_003, usedGpuMemory=None))
    got = measurement_sample(gpu, stranger)
    assert got.throttled is True and got.other_processes == 1
    for reason in ("sw_power_cap", "hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown",
                   "hw_power_brake_slowdown"):
        hot = h200_worker_saw(calm[0], uuid, namespace)
        hot.lib.reasons = BITS[reason]
        assert measurement_sample(gpu, hot).throttled is True, reason


@pytest.mark.parametrize("clock, reasons, locked, words", [
    (345, ("gpu_idle",), False, "the SM clock drops to 345 MHz when idle, 1980 MHz under load"),
    (1980, ("gpu_idle",), True, "the SM clock holds 1980 MHz while idle"),
    (1710, ("sw_power_cap",), None, "throttled (sw_power_cap) at 1710 MHz"),
    (1500, ("applications_clocks_setting",), True, "held at 1500 MHz, below its 1980 MHz, by a lock"),
    (1980, (), None, "the GPU was busy at 1980 MHz, where locked and boosting clocks look alike"),
    (None, (), None, "the SM clock could not be read"),
])
def test_clocks_are_judged_locked_by_how_they_behave(clock: int | None, reasons: tuple[str, ...], locked: bool | None,
                                                     words: str) -> None:
    state = GpuState(0, sm_clock_mhz=clock, sm_clock_app_mhz=1980, sm_clock_max_mhz=1980, clock_event_reasons=reasons)
    verdict, evidence = judge.clock_lock(state)
    assert verdict is locked and words in evidence
