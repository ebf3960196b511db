"""attnbench.timing.energy: energy per call from two counter readings (wrap, reset, a loop too short), and RAPL's
counters read from a sysfs tree laid out as the kernel lays out /sys/class/powercap."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from attnbench.timing.energy import (
    MIN_LOOP_S,
    POWERCAP,
    EnergyReading,
    EnergyUnavailable,
    LoopEnergy,
    Zone,
    joules_between,
    loop_energy,
    read_rapl,
)

RAPL_RANGE_UJ = 262143328850  # max_energy_range_uj of an Intel package zone (2^32 counts of 61.04 µJ)


def nvml(mj: int) -> EnergyReading:
    return EnergyReading("nvml", 1e-3, (Zone("GPU 0", mj, None),))


def test_a_one_second_loop_on_a_gpu_gives_energy_per_call_per_token_and_power() -> None:
    # 2,000 decode steps of a batch of 8 in 1.25 s, the counter 875 J apart: 700 W, 437.5 mJ a step.
    energy = loop_energy(nvml(9_000_000), nvml(9_875_000), calls=2000, seconds=1.25, tokens_per_call=8)
    assert energy == LoopEnergy("nvml", 875.0, 1.25, 2000, pytest.approx(437.5), pytest.approx(0.0546875), 700.0)
    prefill = loop_energy(nvml(0), nvml(612_000), calls=400, seconds=1.02, tokens_per_call=16384)
    assert prefill.mj_per_call == pytest.approx(1530.0) and prefill.j_per_token == pytest.approx(1.53 / 16384)
    assert loop_energy(nvml(0), nvml(612_000), 400, 1.02).j_per_token is None


def test_a_loop_shorter_than_the_counters_resolution_is_refused_with_the_reason() -> None:
    short, long = MIN_LOOP_S / 4, MIN_LOOP_S * 2
    with pytest.raises(EnergyUnavailable, match=re.escape(
            f"the loop lasted {short:g} s, under the {MIN_LOOP_S:g} s nvml's energy counter needs")):
        loop_energy(nvml(0), nvml(175_000), calls=50, seconds=short)
    with pytest.raises(EnergyUnavailable, match=f"did not move in {long:g} s"):
        loop_energy(nvml(5), nvml(5), calls=50, seconds=long)
    with pytest.raises(ValueError):
        loop_energy(nvml(0), nvml(1000), calls=0, seconds=2.0)


def test_a_counter_that_wraps_is_unwrapped_and_one_that_resets_is_refused() -> None:
    before = EnergyReading("rapl", 1e-6, (Zone("package-0", RAPL_RANGE_UJ - 40_000_000, RAPL_RANGE_UJ),
                                          Zone("package-1", 1_000_000, RAPL_RANGE_UJ)))
    after = EnergyReading("rapl", 1e-6, (Zone("package-0", 50_000_000, RAPL_RANGE_UJ),
                                         Zone("package-1", 91_000_000, RAPL_RANGE_UJ)))
    assert joules_between(before, after) == pytest.approx(90.0 + 90.0)  # package-0 wrapped, package-1 did not
    assert loop_energy(before, after, calls=100, seconds=1.5).power_w == pytest.approx(120.0)
    with pytest.raises(EnergyUnavailable, match=r"GPU 0 went back from 9000000 to 1200 \(the driver reloaded\?\)"):
        joules_between(nvml(9_000_000), nvml(1_200))
    with pytest.raises(ValueError, match="different counters"):
        joules_between(nvml(0), before)


def rapl_zone(root: Path, name: str, label: str, energy_uj: int | None, range_uj: int = RAPL_RANGE_UJ) -> Path:
    zone = root / name
    zone.mkdir(parents=True)
    (zone / "name").write_text(label + "\n")
    if energy_uj is not None:
        (zone / "energy_uj").write_text(f"{energy_uj}\n")
    (zone / "max_energy_range_uj").write_text(f"{range_uj}\n")
    return zone


def test_rapl_reads_each_package_zone_and_leaves_out_subzones_and_psys(tmp_path: Path) -> None:
    (tmp_path / "intel-rapl").mkdir()  # the control type's own directory
    rapl_zone(tmp_path, "intel-rapl:0", "package-0", 123_456_789)
    rapl_zone(tmp_path, "intel-rapl:0:0", "core", 5)
    rapl_zone(tmp_path, "intel-rapl:0:1", "dram", 6)
    rapl_zone(tmp_path, "intel-rapl:1", "package-1", 42)
    rapl_zone(tmp_path, "intel-rapl:2", "psys", 7)
    reading = read_rapl(tmp_path)
    assert reading == EnergyReading("rapl", 1e-6, (Zone("package-0", 123_456_789, RAPL_RANGE_UJ),
                                                   Zone("package-1", 42, RAPL_RANGE_UJ)))
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("60000\n")  # package-0 wrapped; package-1 moved 1 J
    (tmp_path / "intel-rapl:1" / "energy_uj").write_text("1000042\n")
    energy = loop_energy(reading, read_rapl(tmp_path), calls=10, seconds=2.0)
    assert energy.energy_j == pytest.approx((RAPL_RANGE_UJ - 123_456_789 + 60_000 + 1_000_000) / 1e6)


def test_rapl_that_cannot_be_read_says_why(tmp_path: Path) -> None:
    with pytest.raises(EnergyUnavailable, match=r"RAPL not readable: .*/nowhere does not exist"):
        read_rapl(tmp_path / "nowhere")
    (tmp_path / "dtpm").mkdir()
    with pytest.raises(EnergyUnavailable, match=r"has no intel-rapl:N package zone \(it holds dtpm\)"):
        read_rapl(tmp_path)
    zone = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 5)
    (zone / "energy_uj").unlink()
    with pytest.raises(EnergyUnavailable, match=r"intel-rapl:0/energy_uj: No such file"):
        read_rapl(tmp_path)


def test_permission_denied_is_the_reason_a_non_root_user_gets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Patched kernels make energy_uj readable by root only; the test runs as root in CI, so the refusal is made."""
    rapl_zone(tmp_path, "intel-rapl:0", "package-0", 5)
    real = Path.read_text

    def read_text(path: Path, *args, **kwargs) -> str:  # type: ignore[no-untyped-def]
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    with pytest.raises(EnergyUnavailable, match=r"intel-rapl:0/energy_uj: permission denied \(root only on kernels "
                                                r"patched for CVE-2020-8694"):
        read_rapl(tmp_path)


def test_this_machine_either_reads_rapl_or_says_why() -> None:
    """The 2-core EPYC VM this was written on has no /sys/class/powercap at all."""
    try:
        reading = read_rapl()
    except EnergyUnavailable as exc:
        assert str(exc).startswith("RAPL not readable: ")
        assert POWERCAP.is_dir() or "does not exist" in str(exc)
    else:
        assert reading.zones and all(zone.name.startswith("package") for zone in reading.zones)
