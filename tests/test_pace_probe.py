"""The machine's pace probe: windows between measurements, at most one per EVERY_S, and what env.json holds."""

from __future__ import annotations

import statistics

from attnbench.run.pace_probe import EVERY_S, WORKLOAD, PaceProbe


def test_a_window_is_taken_only_when_every_s_has_passed_since_the_last() -> None:
    now = [0.0]
    probe = PaceProbe(clock=lambda: now[0])
    for t in (0.0, EVERY_S / 2, EVERY_S * 1.1, EVERY_S * 1.2, EVERY_S * 2.2):
        now[0] = t
        probe.tick()
    assert len(probe.windows_ms) == 3 and all(w > 0 for w in probe.windows_ms)
    probe.finish()  # after the last measurement, whatever the time since the last window
    assert len(probe.windows_ms) == 4
    held = probe.to_dict()
    assert held["workload"] == WORKLOAD and held["median_ms"] == round(statistics.median(probe.windows_ms), 6)


def test_a_probe_that_never_ticked_states_no_median() -> None:
    assert PaceProbe().to_dict() == {"workload": WORKLOAD, "windows_ms": [], "median_ms": None}
