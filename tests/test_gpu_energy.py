"""attnbench.gpu.energy: NVML's energy counter read around a loop gives energy per call; without NVML, a reason."""

from __future__ import annotations

import pytest

from attnbench.gpu.energy import read_gpu_energy
from attnbench.gpu.nvml import NvmlReader
from attnbench.gpu.smi import SmiReader
from attnbench.timing.energy import EnergyUnavailable, loop_energy
from tests.fake_nvml import FakeNvml
from tests.fake_smi import H200, smi


def test_the_counter_read_around_a_loop_gives_energy_per_call() -> None:
    reader = NvmlReader(FakeNvml(energy_mj=[81_000_000, 81_840_000]))  # 840 J over the loop
    before = read_gpu_energy(H200, reader)
    after = read_gpu_energy(H200, reader)
    energy = loop_energy(before, after, calls=1200, seconds=1.2, tokens_per_call=4096)
    assert (energy.mj_per_call, energy.power_w) == (pytest.approx(700.0), pytest.approx(700.0))
    assert energy.j_per_token == pytest.approx(0.7 / 4096) and energy.source == "nvml"


def test_without_an_nvml_counter_the_reason_is_given() -> None:
    why = r"read through NVML, not nvidia-smi \(pip install 'attnbench\[nvml\]'\)"
    with pytest.raises(EnergyUnavailable, match=why):
        read_gpu_energy(H200, SmiReader(smi()))
    with pytest.raises(EnergyUnavailable, match="no energy counter for this GPU"):
        read_gpu_energy(H200, NvmlReader(FakeNvml(unsupported={"nvmlDeviceGetTotalEnergyConsumption"})))
