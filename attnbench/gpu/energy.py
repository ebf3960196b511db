"""NVML's total energy counter of a GPU as an EnergyReading, read before and after a loop of the timed call.

The counter (nvmlDeviceGetTotalEnergyConsumption, Volta and later) counts the whole GPU's millijoules since the
driver loaded, an unsigned 64-bit number that does not wrap in practice; a MIG slice reads its whole GPU's.
attnbench.timing.energy.loop_energy turns two readings into energy per call.
"""

from __future__ import annotations

from attnbench.gpu.nvml import NvmlReader
from attnbench.gpu.read import INSTALL_HINT, Reader, default_reader
from attnbench.gpu.state import GpuId, GpuStateError
from attnbench.timing.energy import EnergyReading, EnergyUnavailable, Zone


def read_gpu_energy(gpu: GpuId, reader: Reader | None = None) -> EnergyReading:
    """The GPU's energy counter now; EnergyUnavailable with the reason where there is none (no NVML, a GPU
    before Volta, a driver that does not count)."""
    try:
        reader = reader or default_reader()
    except GpuStateError as exc:
        raise EnergyUnavailable(f"no GPU energy counter: {exc}") from None
    if not isinstance(reader, NvmlReader):
        raise EnergyUnavailable(f"no GPU energy counter: it is read through NVML, not {reader.source} "
                                f"({INSTALL_HINT})")
    try:
        millijoules = reader.energy_mj(gpu)
    except GpuStateError as exc:
        raise EnergyUnavailable(str(exc)) from None
    return EnergyReading("nvml", 1e-3, (Zone(f"GPU {gpu.index}", millijoules, None),))
