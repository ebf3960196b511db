"""NVML's total energy counter (nvmlDeviceGetTotalEnergyConsumption: mJ since driver load, Volta and later; a
MIG slice reads its whole GPU's) as an EnergyReading."""

from __future__ import annotations

from attnbench.gpu.nvml import NvmlReader
from attnbench.gpu.read import INSTALL_HINT, Reader, default_reader
from attnbench.gpu.state import GpuId, GpuStateError
from attnbench.timing.energy import EnergyReading, EnergyUnavailable, Zone


def read_gpu_energy(gpu: GpuId, reader: Reader | None = None) -> EnergyReading:
    """EnergyUnavailable with the reason where there is none."""
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
