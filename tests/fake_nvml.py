"""A stand-in for pynvml that answers with what the real one returned on an NVIDIA H200 (tests/data/gpu).

Only the functions attnbench.gpu calls exist, with pynvml's names and argument order; errors are
raised as pynvml raises them (NVMLError subclasses whose str() is NVML's message).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

RECORDED = json.loads((Path(__file__).parent / "data" / "gpu" / "nvml-h200.json").read_text())
H200_UUID = RECORDED["uuid"]  # "GPU-a9a60faf-…", as NVML spells it
H200_BUS = "00000000:00:06.0"


class NVMLError(Exception):
    def __str__(self) -> str:
        return self.args[0] if self.args else "Unknown Error"


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's name
    def __init__(self) -> None:
        super().__init__("Not Supported")


class NVMLError_NotFound(NVMLError):  # noqa: N801
    def __init__(self) -> None:
        super().__init__("Not Found")


class FakeNvml:
    """pynvml on one H200; change `reasons`, `processes`, `unsupported` or `mig` to make other GPUs.

    `energy_mj` is what successive calls of nvmlDeviceGetTotalEnergyConsumption answer (millijoules since the
    driver loaded), one value per call, the last repeated: the H200's probe did not read the counter.
    """

    NVMLError = NVMLError

    def __init__(self, **changes: Any) -> None:
        self.values = dict(RECORDED)
        self.reasons: int = RECORDED["reasons"]
        # The probe process itself held a context: one compute process, this one.
        self.processes = [SimpleNamespace(pid=os.getpid(), usedGpuMemory=536870912)]
        self.process_names = {os.getpid(): "python"}
        self.unsupported: set[str] = set()  # function names that raise NotSupported
        self.mig = False  # torch's device is a MIG slice of the H200
        self.energy_mj: list[int] = [1_000_000]
        for name, value in changes.items():
            setattr(self, name, value)
        self.calls: list[str] = []

    def _answer(self, name: str, value: Any) -> Any:
        self.calls.append(name)
        if name in self.unsupported:
            raise NVMLError_NotSupported()
        return value

    # handles: "whole" is the H200, "slice" a MIG device on it
    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid == self.values["uuid"] and not self.mig:
            return "whole"
        if self.mig and uuid == "MIG-" + self.values["uuid"][len("GPU-"):]:
            return "slice"
        raise NVMLError_NotFound()

    def nvmlDeviceGetHandleByPciBusId(self, bus: str) -> str:
        if bus.upper() == H200_BUS:
            return "whole"
        raise NVMLError_NotFound()

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        if index == 0:
            return "whole"
        raise NVMLError("Invalid Argument")

    def nvmlDeviceIsMigDeviceHandle(self, handle: str) -> bool:
        return handle == "slice"

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: str) -> str:
        assert handle == "slice"
        return "whole"

    def _whole(self, handle: str, name: str) -> None:
        if handle != "whole":  # NVML answers clocks and power for the GPU, not for a MIG slice
            raise NVMLError_NotSupported()

    def nvmlDeviceGetIndex(self, handle: str) -> int:
        return self._answer("nvmlDeviceGetIndex", 0)

    def nvmlDeviceGetName(self, handle: str) -> str:
        return self._answer("nvmlDeviceGetName", self.values["name"] + (" MIG 1g.18gb" if handle == "slice" else ""))

    def nvmlDeviceGetUUID(self, handle: str) -> str:
        return self._answer("nvmlDeviceGetUUID", self.values["uuid"])

    def nvmlDeviceGetPciInfo(self, handle: str) -> SimpleNamespace:
        return self._answer("nvmlDeviceGetPciInfo", SimpleNamespace(busId=H200_BUS))

    def nvmlDeviceGetClockInfo(self, handle: str, clock: int) -> int:
        self._whole(handle, "nvmlDeviceGetClockInfo")
        return self._answer("nvmlDeviceGetClockInfo", {1: self.values["sm_clock"], 2: self.values["mem_clock"]}[clock])

    def nvmlDeviceGetApplicationsClock(self, handle: str, clock: int) -> int:
        self._whole(handle, "nvmlDeviceGetApplicationsClock")
        clocks = {0: self.values["app_sm"], 2: self.values["app_mem"]}
        return self._answer("nvmlDeviceGetApplicationsClock", clocks[clock])

    def nvmlDeviceGetMaxClockInfo(self, handle: str, clock: int) -> int:
        self._whole(handle, "nvmlDeviceGetMaxClockInfo")
        return self._answer("nvmlDeviceGetMaxClockInfo", {1: self.values["max_sm"], 2: self.values["max_mem"]}[clock])

    def nvmlDeviceGetPowerManagementLimit(self, handle: str) -> int:
        return self._answer("nvmlDeviceGetPowerManagementLimit", self.values["power_limit_mw"])

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        return self._answer("nvmlDeviceGetPowerUsage", self.values["power_mw"])

    def nvmlDeviceGetTemperature(self, handle: str, sensor: int) -> int:
        assert sensor == 0
        return self._answer("nvmlDeviceGetTemperature", self.values["temp"])

    def nvmlDeviceGetPersistenceMode(self, handle: str) -> int:
        return self._answer("nvmlDeviceGetPersistenceMode", self.values["persistence"])

    def nvmlDeviceGetEccMode(self, handle: str) -> list[int]:
        return self._answer("nvmlDeviceGetEccMode", json.loads(self.values["ecc"]))

    def nvmlDeviceGetMigMode(self, handle: str) -> list[int]:
        return self._answer("nvmlDeviceGetMigMode", [1, 1] if self.mig else json.loads(self.values["mig"]))

    def nvmlDeviceGetComputeMode(self, handle: str) -> int:
        return self._answer("nvmlDeviceGetComputeMode", self.values["compute_mode"])

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: str) -> int:
        self._whole(handle, "nvmlDeviceGetCurrentClocksEventReasons")
        return self._answer("nvmlDeviceGetCurrentClocksEventReasons", self.reasons)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[SimpleNamespace]:
        return self._answer("nvmlDeviceGetComputeRunningProcesses", list(self.processes))

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: str) -> int:
        self._whole(handle, "nvmlDeviceGetTotalEnergyConsumption")  # the counter is the whole GPU's
        value = self.energy_mj[0] if len(self.energy_mj) == 1 else self.energy_mj.pop(0)
        return self._answer("nvmlDeviceGetTotalEnergyConsumption", value)

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        if pid not in self.process_names:
            raise NVMLError_NotFound()
        return self.process_names[pid]

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.values["driver"]
