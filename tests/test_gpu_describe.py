"""attnbench.gpu.describe: a GPU's state in the words doctor and the report use."""

from __future__ import annotations

from attnbench.gpu.describe import describe
from attnbench.gpu.read import snapshot
from attnbench.gpu.smi import SmiReader
from attnbench.gpu.state import GpuState
from tests.fake_smi import H200, smi


def test_the_idle_h200_in_one_line() -> None:
    assert describe(snapshot(H200, SmiReader(smi()))) == (
        "GPU 0 state (nvidia-smi): SM clock 345 MHz (application 1980, max 1980) · memory clock 3201 MHz "
        "(application 3201, max 3201) · 81 W of 700 W · 34 °C · persistence on · ECC on · MIG off · "
        "compute mode default · clock events: gpu_idle · no other processes · clocks not locked")
    assert describe(GpuState(2, error="no NVML")) == "GPU 2 state: unknown (no NVML)"
    assert describe(GpuState(0, source="nvml")).endswith("clock events: none · other processes unknown · "
                                                         "clocks perhaps not locked")
