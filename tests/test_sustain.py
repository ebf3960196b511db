"""The loop before the samples (attnbench.run.sustain): it waits out a falling GPU clock within its bound, gives the
call's energy from the counter read around it, and on a CPU without RAPL runs nothing at all."""

from __future__ import annotations

import pytest

from attnbench.gpu.sample import GpuSample
from attnbench.run import sustain
from attnbench.run.sustain import sustained_loop
from attnbench.timing.energy import EnergyReading, EnergyUnavailable, Zone


class Scripted:
    """A virtual second clock, a call that takes `call_s` of it, an energy counter at `watts`, and an SM clock that
    follows `mhz(t)`."""

    def __init__(self, call_s: float = 0.01, watts: float = 500.0, mhz=lambda t: 1980, wrap: int | None = None,
                 start_mj: int = 10_000, throttled_after: float | None = None) -> None:
        self.now, self.calls, self.call_s, self.watts, self.mhz = 0.0, 0, call_s, watts, mhz
        self.wrap, self.start_mj, self.throttled_after = wrap, start_mj, throttled_after

    def call(self) -> None:
        self.now += self.call_s
        self.calls += 1

    def clock(self) -> float:
        return self.now

    def energy(self) -> EnergyReading:
        count = self.start_mj + int(self.watts * self.now * 1e3)
        return EnergyReading("nvml", 1e-3, (Zone("GPU 0", count % self.wrap if self.wrap else count, self.wrap),))

    def probe(self) -> GpuSample:
        hot = self.throttled_after is not None and self.now >= self.throttled_after
        return GpuSample(sm_clock_mhz=int(self.mhz(self.now)), throttled=hot,
                         clock_event_reasons=("sw_power_cap",) if hot else ())


def run(script: Scripted, min_s: float = 1.0, tokens: int = 4096, probe: bool = True) -> dict:
    return sustained_loop(script.call, min_s=min_s, tokens_per_call=tokens, read_energy=script.energy,
                          probe=script.probe if probe else None, clock=script.clock)


def test_a_steady_gpu_loops_its_minimum_and_gives_energy_per_call_and_per_token() -> None:
    script = Scripted(call_s=0.01, watts=500.0)
    extra = run(script)
    loop = extra["sustain"]
    assert 1.0 <= loop["ms"] / 1e3 <= 1.0 + sustain.PROBE_S
    assert loop["calls"] == script.calls and loop["stopped"] == "the SM clock steady"
    assert extra["energy_mj"] == pytest.approx(500.0 * 0.01 * 1e3, rel=0.01)  # 500 W x 10 ms = 5 J = 5000 mJ
    assert extra["joules_per_token"] == pytest.approx(5.0 / 4096, rel=0.01)
    assert extra["energy_power_w"] == pytest.approx(500.0, rel=0.01) and extra["energy_source"] == "nvml"
    assert extra["energy_throttled"] is False and "energy_skipped" not in extra


def test_a_falling_clock_is_waited_out_and_the_wait_is_bounded() -> None:
    # As the H200 did under sw_power_cap: boost for ~150 ms, then down to 1740 MHz by 1.4 s, then held.
    settling = Scripted(mhz=lambda t: 1980 if t < 0.15 else max(1740, 1980 - 240 * (t - 0.15) / 1.25))
    extra = run(settling)
    assert extra["sustain"]["stopped"] == "the SM clock steady" and 1400 <= extra["sustain"]["ms"] <= 1700
    assert extra["sustain"]["sm_clock_mhz"] == [1980, 1740]
    falling_forever = Scripted(mhz=lambda t: 2000 - 200 * t)  # 20 MHz per 100 ms probe: past the 15 MHz slack
    extra = run(falling_forever)
    assert extra["sustain"]["stopped"] == "the limit, the clock still falling"
    assert sustain.SUSTAIN_FACTOR * 1e3 <= extra["sustain"]["ms"] < sustain.SUSTAIN_FACTOR * 1e3 + 120


def test_a_throttled_loop_is_marked() -> None:
    extra = run(Scripted(throttled_after=0.5))
    assert extra["energy_throttled"] is True


def test_a_slow_call_is_one_loop_call_and_a_short_loop_gives_no_energy() -> None:
    slow = Scripted(call_s=1.3)
    extra = run(slow)
    assert extra["sustain"]["calls"] == 1 and extra["energy_mj"] == pytest.approx(500 * 1.3 * 1e3, rel=0.01)
    short = run(Scripted(), min_s=0.2)
    assert "energy_mj" not in short and "under the 1 s" in short["energy_skipped"]


def test_a_counter_that_went_back_gives_no_energy_and_says_why() -> None:
    class Reloaded(Scripted):
        def energy(self) -> EnergyReading:
            reading = super().energy()
            return reading if self.calls == 0 else EnergyReading("nvml", 1e-3, (Zone("GPU 0", 5, None),))

    extra = run(Reloaded())
    assert "went back" in extra["energy_skipped"] and "sustain" in extra


def test_a_cpu_without_rapl_runs_no_loop_at_all() -> None:
    calls = []

    def unreadable() -> EnergyReading:
        raise EnergyUnavailable("RAPL not readable: /sys/class/powercap does not exist")

    extra = sustained_loop(lambda: calls.append(1), min_s=1.0, tokens_per_call=1, read_energy=unreadable, probe=None)
    assert extra == {"energy_skipped": "RAPL not readable: /sys/class/powercap does not exist"} and calls == []


@pytest.mark.slow
def test_a_measurement_records_the_loop_and_its_energy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through measure(): the loop runs before the samples with the timed call, and the record carries what it gave;
    the run's last line counts the loop as timed work."""
    from attnbench.backends.registry import default_registry
    from attnbench.run.measure import Settings, measure
    from attnbench.run.recording import RunInfo
    from attnbench.run.tally import Tally
    from attnbench.timing.timers import ClockTimer, TimingSettings
    from attnbench.verify.inputs import CaseData
    from tests.helpers import make_case

    meter = {"mj": 0}

    def energy() -> EnergyReading:
        meter["mj"] += 700  # 700 mJ between two reads
        return EnergyReading("nvml", 1e-3, (Zone("GPU 0", meter["mj"], None),))

    monkeypatch.setattr(sustain, "for_device", lambda device: (energy, None, lambda: None))
    timing = TimingSettings(warmup_ms=0, budget_ms=0, min_samples=1, max_samples=1, energy_ms=1000)
    record = measure(CaseData(make_case(seq_len=32)), default_registry().get("naive"), ClockTimer(),
                     Settings(RunInfo("r", "t"), timing))
    assert record.status == "ok"
    loop = record.extra["sustain"]
    assert loop["ms"] >= 1000 and loop["calls"] > 1 and loop["stopped"] == "the minimum"
    assert record.extra["energy_mj"] == pytest.approx(700 / loop["calls"])
    assert record.extra["joules_per_token"] == pytest.approx(0.7 / loop["calls"] / 32)
    assert Tally.of([record]).timed_s >= 1.0
