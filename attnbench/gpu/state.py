"""What is known about one GPU: which one (GpuId), its state (GpuState), who else was on it; an unreported
value is None, with the reader's reason in `unavailable`."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any

# pynvml's nvmlClocksEventReason* bits (nvidia-ml-py 13.615; 0x200, 0x400 only as the deprecated
# nvmlClocksThrottleReason*), named as `nvidia-smi -q` names them.
REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",  # also clocks locked by -lgc
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clocks_setting",
    0x200: "board_limit",
    0x400: "reliability",
}
# Heat or power: a timing under one is not the GPU's number.
THROTTLING = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
THROTTLING_NAMES = tuple(name for bit, name in REASONS.items() if bit & THROTTLING)


class GpuStateError(Exception):
    """Why a GPU's state could not be read."""


def reason_names(mask: int | None) -> tuple[str, ...] | None:
    """Unknown bits as 'unknown_0x…'."""
    if mask is None:
        return None
    names = [name for bit, name in REASONS.items() if mask & bit]
    rest = mask & ~sum(REASONS)
    return tuple(names + [f"unknown_{bit:#x}" for bit in (1 << n for n in range(64)) if rest & bit])


@dataclass(frozen=True)
class GpuId:
    """Which physical GPU torch's device `index` is. Matched by UUID, then PCI bus id: torch's indices follow
    CUDA_VISIBLE_DEVICES, NVML's do not."""

    index: int
    uuid: str | None = None  # as torch gives it, with or without "GPU-"/"MIG-"
    pci_bus_id: str | None = None  # "00000000:00:06.0"

    def uuids(self) -> list[str]:
        if not self.uuid:
            return []
        if self.uuid.startswith(("GPU-", "MIG-")):
            return [self.uuid]
        return [f"GPU-{self.uuid}", f"MIG-{self.uuid}"]

    def physical_index(self) -> int | None:
        """nvidia-smi's index, from CUDA_VISIBLE_DEVICES when it lists numbers."""
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is None:
            return self.index
        entries = [entry.strip() for entry in visible.split(",") if entry.strip()]
        if self.index < len(entries) and entries[self.index].isdigit():
            return int(entries[self.index])
        return None


def torch_gpu(index: int) -> GpuId:
    """Its UUID and PCI address, where this torch has them."""
    import torch

    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    bus = None
    if all(hasattr(props, name) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
        bus = f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"
    return GpuId(index, str(uuid) if uuid else None, bus)


@dataclass(frozen=True)
class GpuProcess:
    """A listed compute process; its pid as the reader sees it (maybe another namespace's)."""

    pid: int | None
    name: str | None = None
    used_memory_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "name": self.name, "used_memory_bytes": self.used_memory_bytes}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuProcess:
        return cls(data.get("pid"), data.get("name"), data.get("used_memory_bytes"))


@dataclass(frozen=True)
class GpuState:
    """One GPU's state as read, and judged by gpu.judge; `processes` (this one included) is not stored."""

    index: int  # torch's
    source: str | None = None  # "nvml" or "nvidia-smi"
    driver: str | None = None  # NVML only
    nvml_index: int | None = None  # what `nvidia-smi -i` takes
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    sm_clock_mhz: int | None = None
    sm_clock_app_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    memory_clock_mhz: int | None = None
    memory_clock_app_mhz: int | None = None
    memory_clock_max_mhz: int | None = None
    power_limit_w: float | None = None
    power_draw_w: float | None = None
    temperature_c: int | None = None
    persistence_mode: bool | None = None
    ecc: bool | None = None
    mig: bool | None = None
    compute_mode: str | None = None
    clock_event_reasons: tuple[str, ...] | None = None
    matched_by: str | None = None
    unavailable: dict[str, str] | None = None  # key -> why no value
    processes: tuple[GpuProcess, ...] | None = None
    # judged
    other_processes: tuple[GpuProcess, ...] | None = None
    pid_namespace_differs: bool = False  # others counted, not named
    other_process_count: int | None = None
    throttle_reasons: tuple[str, ...] = ()
    throttled: bool | None = None
    clocks_locked: bool | None = None
    clocks_lock_evidence: str | None = None
    error: str | None = None  # why nothing could be read

    def to_dict(self) -> dict[str, Any]:
        """The keys attnbench has always written, in its order."""
        head: dict[str, Any] = {"index": self.index}
        if self.source is not None:
            head["source"] = self.source
        if self.source == "nvml":
            head["driver"] = self.driver
        if self.error is not None:
            return {**head, "error": self.error}
        data = {**head, **{key: getattr(self, key) for key in READ_KEYS}}
        data["clock_event_reasons"] = _list(self.clock_event_reasons)
        data["matched_by"] = self.matched_by
        data["unavailable"] = dict(self.unavailable or {})
        data["other_processes"] = None if self.other_processes is None else [p.to_dict()
                                                                             for p in self.other_processes]
        if self.pid_namespace_differs:
            data["pid_namespace_differs"] = True
        data.update(other_process_count=self.other_process_count,
                    throttle_reasons=list(self.throttle_reasons), throttled=self.throttled,
                    clocks_locked=self.clocks_locked, clocks_lock_evidence=self.clocks_lock_evidence)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuState:
        """Missing keys stay None; unknown ones are ignored."""
        known = {f.name for f in fields(cls)} - {"processes", "other_processes", "clock_event_reasons",
                                                   "throttle_reasons", "unavailable"}
        values: dict[str, Any] = {key: data[key] for key in known if key in data}
        values["index"] = data.get("index", 0)
        values["clock_event_reasons"] = _tuple(data.get("clock_event_reasons"))
        values["throttle_reasons"] = tuple(data.get("throttle_reasons") or ())
        unavailable = data.get("unavailable")
        values["unavailable"] = dict(unavailable) if isinstance(unavailable, dict) else None
        listed = data.get("other_processes")
        values["other_processes"] = None if listed is None else tuple(GpuProcess.from_dict(p) for p in listed)
        values["pid_namespace_differs"] = bool(data.get("pid_namespace_differs"))
        return cls(**values)


# The reader's fields in env.json's order.
READ_KEYS = ("nvml_index", "name", "uuid", "pci_bus_id", "sm_clock_mhz", "sm_clock_app_mhz",
             "sm_clock_max_mhz", "memory_clock_mhz", "memory_clock_app_mhz", "memory_clock_max_mhz",
             "power_limit_w", "power_draw_w", "temperature_c", "persistence_mode", "ecc", "mig",
             "compute_mode")


def _list(names: tuple[str, ...] | None) -> list[str] | None:
    return None if names is None else list(names)


def _tuple(names: Any) -> tuple[str, ...] | None:
    return None if names is None else tuple(names)
