"""Reading a GPU through NVML: pynvml after nvmlInit, or a fake with the same names in tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from attnbench.gpu.state import GpuId, GpuProcess, GpuState, GpuStateError, reason_names

# NVML's enum values (nvml.h), so a fake NVML works.
NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 0, 1, 2, 0
COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}


class NvmlReader:
    def __init__(self, lib: Any) -> None:
        self.lib = lib
        self.error: type[BaseException] = getattr(lib, "NVMLError", Exception)
        self.source = "nvml"
        self._handles: dict[GpuId, tuple[Any, Any, str]] = {}

    def _handle(self, gpu: GpuId) -> tuple[Any, Any, str]:
        """(device handle, whole GPU's handle — another for a MIG slice, how it was matched)."""
        if gpu in self._handles:
            return self._handles[gpu]
        handle, matched = self._find(gpu)
        whole, mig = self._whole(handle)
        self._handles[gpu] = (handle, whole, matched + mig)
        return self._handles[gpu]

    def _find(self, gpu: GpuId) -> tuple[Any, str]:
        """By UUID, else PCI bus id, else (neither known) physical index."""
        lib = self.lib
        handle, matched = self._by_uuid(gpu)
        if handle is None and gpu.pci_bus_id:
            handle, matched = self._ask(lambda: lib.nvmlDeviceGetHandleByPciBusId(gpu.pci_bus_id),
                                        "pci_bus_id")
        physical = gpu.physical_index()
        if handle is None and physical is not None and not gpu.uuid and not gpu.pci_bus_id:
            handle, matched = self._ask(lambda: lib.nvmlDeviceGetHandleByIndex(physical), "index")
        if handle is None:
            raise GpuStateError(f"NVML has no GPU with torch device {gpu.index}'s UUID {gpu.uuid} "
                                f"or PCI bus id {gpu.pci_bus_id}")
        return handle, matched

    def _by_uuid(self, gpu: GpuId) -> tuple[Any, str]:
        for uuid in gpu.uuids():
            try:
                return self.lib.nvmlDeviceGetHandleByUUID(uuid), "uuid"
            except self.error:
                continue
        return None, ""

    def _ask(self, call: Callable[[], Any], matched: str) -> tuple[Any, str]:
        try:
            return call(), matched
        except self.error:
            return None, ""

    def _whole(self, handle: Any) -> tuple[Any, str]:
        """A MIG slice's whole GPU's handle and a note; the handle itself otherwise."""
        try:
            if self.lib.nvmlDeviceIsMigDeviceHandle(handle):
                return self.lib.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle), " (a MIG device)"
        except self.error:
            pass
        return handle, ""

    def read(self, gpu: GpuId, full: bool) -> GpuState:
        """Everything (`full`), or what a measurement samples: SM clock, power, clock events, processes."""
        lib = self.lib
        handle, whole, matched = self._handle(gpu)
        values: dict[str, Any] = {}
        unavailable: dict[str, str] = {}

        def ask(key: str, call: Callable[[], Any], convert: Callable[[Any], Any] = lambda v: v) -> None:
            try:
                value = call()
            except self.error as exc:
                unavailable[key] = str(exc) or type(exc).__name__
                values[key] = None
            else:
                values[key] = None if value is None else convert(value)

        reasons = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None) \
            or lib.nvmlDeviceGetCurrentClocksThrottleReasons  # pynvml before 12.535
        if full:
            ask("nvml_index", lambda: lib.nvmlDeviceGetIndex(whole))
            ask("name", lambda: lib.nvmlDeviceGetName(handle), _text)
            ask("uuid", lambda: lib.nvmlDeviceGetUUID(handle), _text)
            ask("pci_bus_id", lambda: lib.nvmlDeviceGetPciInfo(whole).busId, _text)
        ask("sm_clock_mhz", lambda: lib.nvmlDeviceGetClockInfo(whole, NVML_CLOCK_SM))
        if full:
            # application clocks are set and shown for "graphics" (nvidia-smi -ac)
            ask("sm_clock_app_mhz", lambda: lib.nvmlDeviceGetApplicationsClock(whole, NVML_CLOCK_GRAPHICS))
            ask("sm_clock_max_mhz", lambda: lib.nvmlDeviceGetMaxClockInfo(whole, NVML_CLOCK_SM))
            ask("memory_clock_mhz", lambda: lib.nvmlDeviceGetClockInfo(whole, NVML_CLOCK_MEM))
            ask("memory_clock_app_mhz", lambda: lib.nvmlDeviceGetApplicationsClock(whole, NVML_CLOCK_MEM))
            ask("memory_clock_max_mhz", lambda: lib.nvmlDeviceGetMaxClockInfo(whole, NVML_CLOCK_MEM))
            ask("power_limit_w", lambda: lib.nvmlDeviceGetPowerManagementLimit(whole), lambda mw: mw / 1000)
        ask("power_draw_w", lambda: lib.nvmlDeviceGetPowerUsage(whole), lambda mw: mw / 1000)
        if full:
            ask("temperature_c", lambda: lib.nvmlDeviceGetTemperature(whole, NVML_TEMPERATURE_GPU))
            ask("persistence_mode", lambda: lib.nvmlDeviceGetPersistenceMode(whole), bool)
            ask("ecc", lambda: lib.nvmlDeviceGetEccMode(whole)[0], bool)
            ask("mig", lambda: lib.nvmlDeviceGetMigMode(whole)[0], bool)
            ask("compute_mode", lambda: lib.nvmlDeviceGetComputeMode(handle),
                lambda m: COMPUTE_MODES.get(m, str(m)))
        ask("clock_event_reasons", lambda: reasons(whole), reason_names)
        ask("processes",
            lambda: tuple(self._process(p) for p in lib.nvmlDeviceGetComputeRunningProcesses(handle)))
        if full:
            values["matched_by"] = matched
            values["unavailable"] = unavailable
        return GpuState(gpu.index, source=self.source, **values)

    def _process(self, process: Any) -> GpuProcess:
        try:
            name = _text(self.lib.nvmlSystemGetProcessName(process.pid))
        except self.error:
            name = None  # another PID namespace, or no permission
        return GpuProcess(process.pid, name, getattr(process, "usedGpuMemory", None))

    def driver(self) -> str | None:
        try:
            return _text(self.lib.nvmlSystemGetDriverVersion())
        except self.error:
            return None

    def energy_mj(self, gpu: GpuId) -> int:
        """Millijoules the whole GPU used since the driver loaded."""
        _, whole, _ = self._handle(gpu)
        try:
            return int(self.lib.nvmlDeviceGetTotalEnergyConsumption(whole))
        except self.error as exc:
            raise GpuStateError("NVML has no energy counter for this GPU "
                                "(nvmlDeviceGetTotalEnergyConsumption: "
                                f"{exc or type(exc).__name__})") from None


def _text(value: Any) -> str:
    """str in recent pynvml, bytes in old ones."""
    return value.decode() if isinstance(value, bytes) else str(value)
