"""Reading a GPU by parsing `nvidia-smi --query-gpu`, where NVML's binding is missing; only `run_nvidia_smi`
runs anything."""

from __future__ import annotations

import csv
import io
import subprocess
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from attnbench.gpu.state import GpuId, GpuProcess, GpuState, GpuStateError, reason_names

# Before driver 535 the reasons field is SMI_OLD_REASONS, asked for when the new name is refused.
SMI_FIELDS = ("index", "name", "uuid", "pci.bus_id", "clocks.current.sm", "clocks.current.memory",
              "clocks.applications.graphics", "clocks.applications.memory", "clocks.max.sm",
              "clocks.max.memory", "power.limit", "power.draw", "temperature.gpu", "persistence_mode",
              "ecc.mode.current", "mig.mode.current", "compute_mode", "clocks_event_reasons.active")
SMI_OLD_REASONS = "clocks_throttle_reasons.active"
SMI_APPS = "--query-compute-apps=gpu_uuid,pid,process_name,used_gpu_memory"
SMI_KEYS = {"sm_clock_mhz": "clocks.current.sm", "sm_clock_app_mhz": "clocks.applications.graphics",
            "sm_clock_max_mhz": "clocks.max.sm", "memory_clock_mhz": "clocks.current.memory",
            "memory_clock_app_mhz": "clocks.applications.memory", "memory_clock_max_mhz": "clocks.max.memory",
            "power_limit_w": "power.limit", "power_draw_w": "power.draw", "temperature_c": "temperature.gpu",
            "persistence_mode": "persistence_mode", "ecc": "ecc.mode.current", "mig": "mig.mode.current",
            "compute_mode": "compute_mode", "clock_event_reasons": "clocks_event_reasons.active"}


def smi_value(text: str | None) -> str | None:
    """None for '[N/A]', '[Not Supported]' and the like."""
    if text is None:
        return None
    text = text.strip()
    if not text or text.startswith("[") or text in ("N/A", "Not Supported"):
        return None
    return text


def smi_number(text: str | None) -> float | None:
    """'345 MHz' -> 345.0, '700.00 W' -> 700.0."""
    value = smi_value(text)
    if value is None:
        return None
    try:
        return float(value.split()[0])
    except ValueError:
        return None


def smi_int(text: str | None) -> int | None:
    number = smi_number(text)
    return None if number is None else int(round(number))


def smi_flag(text: str | None) -> bool | None:
    """'Enabled' -> True, 'Disabled' -> False."""
    value = smi_value(text)
    return None if value is None else {"enabled": True, "disabled": False}.get(value.lower())


def parse_smi_csv(text: str) -> list[dict[str, str]]:
    """Rows keyed by field name, units dropped from the header."""
    rows = list(csv.reader(io.StringIO(text.strip()), skipinitialspace=True))
    if not rows:
        return []
    header = [name.split(" [")[0].strip() for name in rows[0]]
    return [dict(zip(header, (cell.strip() for cell in row), strict=False)) for row in rows[1:] if row]


def state_from_smi(index: int, row: dict[str, str], apps: list[dict[str, str]] | None) -> GpuState:
    """From the `--query-gpu` row and the `--query-compute-apps` rows (None: not listed)."""
    reasons_text = smi_value(row.get("clocks_event_reasons.active") or row.get(SMI_OLD_REASONS))
    mode = smi_value(row.get("compute_mode"))
    values: dict[str, Any] = {
        "nvml_index": smi_int(row.get("index")), "name": smi_value(row.get("name")),
        "uuid": smi_value(row.get("uuid")), "pci_bus_id": smi_value(row.get("pci.bus_id")),
        "sm_clock_mhz": smi_int(row.get("clocks.current.sm")),
        "sm_clock_app_mhz": smi_int(row.get("clocks.applications.graphics")),
        "sm_clock_max_mhz": smi_int(row.get("clocks.max.sm")),
        "memory_clock_mhz": smi_int(row.get("clocks.current.memory")),
        "memory_clock_app_mhz": smi_int(row.get("clocks.applications.memory")),
        "memory_clock_max_mhz": smi_int(row.get("clocks.max.memory")),
        "power_limit_w": smi_number(row.get("power.limit")),
        "power_draw_w": smi_number(row.get("power.draw")),
        "temperature_c": smi_int(row.get("temperature.gpu")),
        "persistence_mode": smi_flag(row.get("persistence_mode")),
        "ecc": smi_flag(row.get("ecc.mode.current")), "mig": smi_flag(row.get("mig.mode.current")),
        "compute_mode": mode.lower() if mode else None,
        "clock_event_reasons": reason_names(int(reasons_text, 16) if reasons_text else None),
    }
    values["unavailable"] = {key: row.get(field) or "absent" for key, field in SMI_KEYS.items()
                             if values.get(key) is None and field in row}
    values["processes"] = None if apps is None else tuple(
        GpuProcess(smi_int(app.get("pid")), smi_value(app.get("process_name")),
                   _mib(app.get("used_gpu_memory")))
        for app in apps if not values["uuid"] or app.get("gpu_uuid") == values["uuid"])
    return GpuState(index, source="nvidia-smi", **values)


def _mib(text: str | None) -> int | None:
    value = smi_number(text)
    return None if value is None else int(value * 2**20)


def run_nvidia_smi(args: list[str]) -> str:
    """Standard output; GpuStateError when it is missing or fails."""
    try:
        out = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as exc:
        raise GpuStateError(f"nvidia-smi did not run ({exc})") from None
    if out.returncode != 0:
        said = (out.stdout.strip() or out.stderr.strip()).splitlines()
        reason = said[0] if said else f"exit {out.returncode}"
        raise GpuStateError(f"nvidia-smi {args[0]} failed: {reason}")
    return out.stdout


class SmiReader:
    """`run` is replaced by recorded outputs in tests."""

    def __init__(self, run: Callable[[list[str]], str] = run_nvidia_smi) -> None:
        self.run = run
        self.source = "nvidia-smi"
        self.fields = SMI_FIELDS

    def _query(self) -> list[dict[str, str]]:
        try:
            return parse_smi_csv(self.run([f"--query-gpu={','.join(self.fields)}", "--format=csv"]))
        except GpuStateError as exc:
            if self.fields[-1] != SMI_FIELDS[-1] or "valid field" not in str(exc):
                raise
            self.fields = (*SMI_FIELDS[:-1], SMI_OLD_REASONS)
            return self._query()

    def read(self, gpu: GpuId, full: bool) -> GpuState:
        """Matched by UUID, then PCI address, by index only when torch knows neither."""
        rows = self._query()
        row = (next((r for r in rows if r.get("uuid") in gpu.uuids()), None)
               or next((r for r in rows if gpu.pci_bus_id and (r.get("pci.bus_id") or "").upper()
                        == gpu.pci_bus_id.upper()), None))
        matched = "uuid" if row and row.get("uuid") in gpu.uuids() else "pci_bus_id"
        if row is None and not gpu.uuid and not gpu.pci_bus_id:
            row, matched = next((r for r in rows if smi_int(r.get("index")) == gpu.physical_index()),
                                None), "index"
        if row is None:
            raise GpuStateError(f"nvidia-smi lists no GPU with torch device {gpu.index}'s UUID {gpu.uuid} "
                                f"or PCI bus id {gpu.pci_bus_id}")
        try:
            apps: list[dict[str, str]] | None = parse_smi_csv(self.run([SMI_APPS, "--format=csv"]))
        except GpuStateError:
            apps = None
        state = state_from_smi(gpu.index, row, apps)
        if not full:  # as NVML's light read gives it
            return GpuState(gpu.index, source=self.source, sm_clock_mhz=state.sm_clock_mhz,
                            power_draw_w=state.power_draw_w, clock_event_reasons=state.clock_event_reasons,
                            processes=state.processes)
        return replace(state, matched_by=matched)

    def driver(self) -> str | None:
        """Not recorded from nvidia-smi (env.json's "driver" holds it)."""
        return None
