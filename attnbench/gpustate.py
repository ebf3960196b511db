"""The GPU's state — clocks, power, temperature, modes, other processes — for env.json, each measurement and doctor.

Numbers from a throttling or shared GPU are not the GPU's numbers, so every CUDA run records the state
of its GPUs. Read through NVML (the optional `nvidia-ml-py`, `pip install 'attnbench[nvml]'`), else by
parsing `nvidia-smi --query-gpu`; both readers give the same dictionary. Nothing here runs on CPU:
callers ask only for CUDA devices, and a value a GPU does not report is None with the reason beside it.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, Callable, Protocol

# Clock event ("throttle") reasons: pynvml's nvmlClocksEventReason* bits (nvidia-ml-py 13.615; 0x200 and
# 0x400 only as the deprecated nvmlClocksThrottleReason*), named as `nvidia-smi -q` names them.
REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",  # also "user defined clocks": application clocks or clocks locked by -lgc
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
# Slowed down for heat or power: a timing taken under one of these is not the GPU's number. Idle, the
# user's own clock settings, sync boost and display clocks are not throttling.
THROTTLING = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
# NVML's enum values (nvml.h; the same in every pynvml), so that a fake NVML can be used in tests.
NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 0, 1, 2, 0
COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}
# The fields `nvidia-smi --query-gpu` is asked for; the reasons field was `clocks_throttle_reasons.active`
# before driver 535, which is asked for when the new name is refused.
SMI_FIELDS = ("index", "name", "uuid", "pci.bus_id", "clocks.current.sm", "clocks.current.memory",
              "clocks.applications.graphics", "clocks.applications.memory", "clocks.max.sm", "clocks.max.memory",
              "power.limit", "power.draw", "temperature.gpu", "persistence_mode", "ecc.mode.current",
              "mig.mode.current", "compute_mode", "clocks_event_reasons.active")
SMI_OLD_REASONS = "clocks_throttle_reasons.active"
SMI_APPS = "--query-compute-apps=gpu_uuid,pid,process_name,used_gpu_memory"
# One step of the SM clock table (15 MHz on Hopper): a clock this close to its target counts as at it.
CLOCK_SLACK_MHZ = 15
INSTALL_HINT = "pip install 'attnbench[nvml]'"
LOCK_WORDS = {True: "locked", False: "not locked", None: "perhaps not locked"}


class GpuStateError(Exception):
    """The state of a GPU could not be read; the message says why (no NVML, no nvidia-smi, no such GPU)."""


@dataclass(frozen=True)
class GpuId:
    """Which physical GPU torch's device `index` is: the keys NVML and nvidia-smi know it by.

    Matched by UUID first, then PCI bus id: torch's indices follow CUDA_VISIBLE_DEVICES and CUDA's
    device order, NVML's and nvidia-smi's do not.
    """

    index: int
    uuid: str | None = None  # as torch gives it, with or without NVML's "GPU-"/"MIG-" prefix
    pci_bus_id: str | None = None  # "00000000:00:06.0"

    def uuids(self) -> list[str]:
        if not self.uuid:
            return []
        if self.uuid.startswith(("GPU-", "MIG-")):
            return [self.uuid]
        return [f"GPU-{self.uuid}", f"MIG-{self.uuid}"]

    def physical_index(self) -> int | None:
        """The index nvidia-smi knows this GPU by, from CUDA_VISIBLE_DEVICES when it lists numbers."""
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is None:
            return self.index
        entries = [entry.strip() for entry in visible.split(",") if entry.strip()]
        if self.index < len(entries) and entries[self.index].isdigit():
            return int(entries[self.index])
        return None


def torch_gpu(index: int) -> GpuId:
    """The identity of torch's CUDA device `index` (its UUID and PCI address, where this torch has them)."""
    import torch

    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    bus = None
    if all(hasattr(props, name) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
        bus = f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"
    return GpuId(index, str(uuid) if uuid else None, bus)


# ---- pure parsing and judging: tested against recorded NVML and nvidia-smi outputs ----------------

def reason_names(mask: int | None) -> list[str] | None:
    """The names of the clock event reasons set in `mask`; unknown bits as 'unknown_0x…'."""
    if mask is None:
        return None
    names = [name for bit, name in REASONS.items() if mask & bit]
    rest = mask & ~sum(REASONS)
    return names + [f"unknown_{bit:#x}" for bit in (1 << n for n in range(64)) if rest & bit]


def throttling_names(names: list[str] | None) -> list[str]:
    """Of these reasons, the ones that mean heat or power slowed the GPU."""
    return [name for bit, name in REASONS.items() if bit & THROTTLING and name in (names or [])]


def smi_value(text: str | None) -> str | None:
    """One nvidia-smi CSV cell; None for '[N/A]', '[Not Supported]' and the like."""
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
    """nvidia-smi's `--format=csv` output as rows keyed by field name, units dropped from the header."""
    rows = list(csv.reader(io.StringIO(text.strip()), skipinitialspace=True))
    if not rows:
        return []
    header = [name.split(" [")[0].strip() for name in rows[0]]
    return [dict(zip(header, (cell.strip() for cell in row))) for row in rows[1:] if row]


def state_from_smi(row: dict[str, str], apps: list[dict[str, str]]) -> dict[str, Any]:
    """The state of one GPU from its `--query-gpu` row and the `--query-compute-apps` rows."""
    reasons_text = smi_value(row.get("clocks_event_reasons.active") or row.get(SMI_OLD_REASONS))
    mask = int(reasons_text, 16) if reasons_text else None
    mode = smi_value(row.get("compute_mode"))
    state: dict[str, Any] = {
        "nvml_index": smi_int(row.get("index")), "name": smi_value(row.get("name")),
        "uuid": smi_value(row.get("uuid")), "pci_bus_id": smi_value(row.get("pci.bus_id")),
        "sm_clock_mhz": smi_int(row.get("clocks.current.sm")),
        "sm_clock_app_mhz": smi_int(row.get("clocks.applications.graphics")),
        "sm_clock_max_mhz": smi_int(row.get("clocks.max.sm")),
        "memory_clock_mhz": smi_int(row.get("clocks.current.memory")),
        "memory_clock_app_mhz": smi_int(row.get("clocks.applications.memory")),
        "memory_clock_max_mhz": smi_int(row.get("clocks.max.memory")),
        "power_limit_w": smi_number(row.get("power.limit")), "power_draw_w": smi_number(row.get("power.draw")),
        "temperature_c": smi_int(row.get("temperature.gpu")),
        "persistence_mode": smi_flag(row.get("persistence_mode")), "ecc": smi_flag(row.get("ecc.mode.current")),
        "mig": smi_flag(row.get("mig.mode.current")), "compute_mode": mode.lower() if mode else None,
        "clock_event_reasons": reason_names(mask),
    }
    state["unavailable"] = {key: row.get(field) or "absent" for key, field in SMI_KEYS.items()
                            if state.get(key) is None and field in row}
    state["processes"] = [{"pid": smi_int(app.get("pid")), "name": smi_value(app.get("process_name")),
                           "used_memory_bytes": _mib(app.get("used_gpu_memory"))}
                          for app in apps if not state["uuid"] or app.get("gpu_uuid") == state["uuid"]]
    return state


SMI_KEYS = {"sm_clock_mhz": "clocks.current.sm", "sm_clock_app_mhz": "clocks.applications.graphics",
            "sm_clock_max_mhz": "clocks.max.sm", "memory_clock_mhz": "clocks.current.memory",
            "memory_clock_app_mhz": "clocks.applications.memory", "memory_clock_max_mhz": "clocks.max.memory",
            "power_limit_w": "power.limit", "power_draw_w": "power.draw", "temperature_c": "temperature.gpu",
            "persistence_mode": "persistence_mode", "ecc": "ecc.mode.current", "mig": "mig.mode.current",
            "compute_mode": "compute_mode", "clock_event_reasons": "clocks_event_reasons.active"}


def _mib(text: str | None) -> int | None:
    value = smi_number(text)
    return None if value is None else int(value * 2**20)


def other_processes(processes: list[dict[str, Any]], own_pid: int,
                    holds_context: bool) -> tuple[list[dict[str, Any]], bool]:
    """The processes on the GPU other than this one, and whether pids could tell them apart.

    A process holding a CUDA context that NVML does not list by its pid sees NVML's pids from another
    PID namespace (a container): then one of the listed processes is this one, which one is unknown,
    and the others are all but one of them.
    """
    if holds_context and processes and all(p.get("pid") != own_pid for p in processes):
        return processes, False
    return [p for p in processes if p.get("pid") != own_pid], True


# A measuring worker's parent (the harness) names, in this variable, the GPUs (by torch UUID) where it holds a
# CUDA context itself: on those the worker does not count it as another process.
HARNESS_GPUS_VAR = "ATTNBENCH_HARNESS_GPUS"


def contexts_held_here() -> list[str]:
    """UUIDs of the GPUs where this process holds a CUDA context (none is created to find out)."""
    import torch

    if not torch.cuda.is_initialized():
        return []
    held = []
    for index in range(torch.cuda.device_count()):
        try:
            if torch._C._cuda_hasPrimaryContext(index):
                held.append(str(torch.cuda.get_device_properties(index).uuid))
        except (AttributeError, RuntimeError):  # an older torch: nothing known, nothing discounted
            continue
    return held


def harness_processes(gpu: GpuId | None) -> int:
    """How many of the GPU's processes are this run's own harness (the worker's parent): 0 or 1. Parent and worker
    both spell the UUID as torch gives it (contexts_held_here, torch_gpu)."""
    named = os.environ.get(HARNESS_GPUS_VAR, "").split(",")
    return int(gpu is not None and bool(gpu.uuid) and gpu.uuid in named)


def finish(state: dict[str, Any], holds_context: bool, harness: int = 0) -> dict[str, Any]:
    """Add what follows from the raw state: throttled, the other processes, whether clocks are locked.

    `harness` processes on the GPU are this run's own (a worker's parent) and are not counted as others.
    """
    names = state.get("clock_event_reasons")
    throttles = throttling_names(names)
    processes = state.pop("processes", None)
    if processes is None:
        state["other_processes"], others = None, None
    else:
        listed, comparable = other_processes(processes, os.getpid(), holds_context)
        if comparable and harness:  # pids comparable: the parent is known by its pid
            listed = [p for p in listed if p.get("pid") != os.getppid()]
            harness = 0
        state["other_processes"] = listed
        others = max(0, len(listed) - harness - (0 if comparable else 1))
        if not comparable:
            state["pid_namespace_differs"] = True
    state["other_process_count"] = others
    state["throttle_reasons"] = throttles
    # True on evidence of either; False only when both were read and are clean; None when unknown.
    state["throttled"] = True if throttles or others else None if names is None or others is None else False
    locked, why = clock_lock(state)
    state["clocks_locked"], state["clocks_lock_evidence"] = locked, why
    return state


def clock_lock(state: dict[str, Any]) -> tuple[bool | None, str]:
    """Whether the SM clock is locked, and the evidence; None where a snapshot cannot tell.

    NVML has no getter for clocks locked with `nvidia-smi -lgc` (only nvmlDeviceSet/ResetGpuLockedClocks),
    so this judges by behaviour: an idle GPU whose SM clock dropped below its target is not locked; one
    that holds its target while idle is; a busy GPU at its target could be either.
    """
    current, target = state.get("sm_clock_mhz"), state.get("sm_clock_app_mhz") or state.get("sm_clock_max_mhz")
    reasons = state.get("clock_event_reasons") or []
    if current is None or target is None:
        return None, "the SM clock could not be read"
    below = current < target - CLOCK_SLACK_MHZ
    if "gpu_idle" in reasons:
        if below:
            return False, f"the SM clock drops to {current} MHz when idle, {target} MHz under load"
        return True, f"the SM clock holds {current} MHz while idle"
    if state.get("throttle_reasons"):
        return None, f"throttled ({', '.join(state['throttle_reasons'])}) at {current} MHz"
    if below and "applications_clocks_setting" in reasons:
        return True, f"the SM clock is held at {current} MHz, below its {target} MHz, by a lock or application clocks"
    return None, f"the GPU was busy at {current} MHz, where locked and boosting clocks look alike"


# ---- readers: NVML through pynvml (or a fake of it), and nvidia-smi ----------------------------------

class Reader(Protocol):
    source: str

    def read(self, gpu: GpuId, full: bool) -> dict[str, Any]: ...


class NvmlReader:
    """Reads GPUs through `lib`: pynvml after nvmlInit, or in tests a fake with the same function names."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        self.error: type[BaseException] = getattr(lib, "NVMLError", Exception)
        self.source = "nvml"
        self._handles: dict[GpuId, tuple[Any, Any, str]] = {}

    def _handle(self, gpu: GpuId) -> tuple[Any, Any, str]:
        """(the device's handle, its whole GPU's handle — not the same for a MIG slice, how it was matched)."""
        if gpu in self._handles:
            return self._handles[gpu]
        lib, handle, matched = self.lib, None, ""
        for uuid in gpu.uuids():
            try:
                handle, matched = lib.nvmlDeviceGetHandleByUUID(uuid), "uuid"
                break
            except self.error:
                continue
        if handle is None and gpu.pci_bus_id:
            try:
                handle, matched = lib.nvmlDeviceGetHandleByPciBusId(gpu.pci_bus_id), "pci_bus_id"
            except self.error:
                pass
        physical = gpu.physical_index()
        if handle is None and physical is not None and not gpu.uuid and not gpu.pci_bus_id:
            try:
                handle, matched = lib.nvmlDeviceGetHandleByIndex(physical), "index"
            except self.error:
                pass
        if handle is None:
            raise GpuStateError(f"NVML has no GPU with torch device {gpu.index}'s UUID {gpu.uuid} "
                                f"or PCI bus id {gpu.pci_bus_id}")
        whole = handle
        try:
            if lib.nvmlDeviceIsMigDeviceHandle(handle):
                whole = lib.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
                matched += " (a MIG device)"
        except self.error:
            pass
        self._handles[gpu] = (handle, whole, matched)
        return self._handles[gpu]

    def read(self, gpu: GpuId, full: bool) -> dict[str, Any]:
        lib = self.lib
        handle, whole, matched = self._handle(gpu)
        state: dict[str, Any] = {}
        unavailable: dict[str, str] = {}

        def ask(key: str, call: Callable[[], Any], convert: Callable[[Any], Any] = lambda v: v) -> None:
            try:
                value = call()
            except self.error as exc:
                unavailable[key] = str(exc) or type(exc).__name__
                state[key] = None
            else:
                state[key] = None if value is None else convert(value)

        reasons = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None) \
            or lib.nvmlDeviceGetCurrentClocksThrottleReasons  # pynvml before 12.535
        if full:
            ask("nvml_index", lambda: lib.nvmlDeviceGetIndex(whole))
            ask("name", lambda: lib.nvmlDeviceGetName(handle), _text)
            ask("uuid", lambda: lib.nvmlDeviceGetUUID(handle), _text)
            ask("pci_bus_id", lambda: lib.nvmlDeviceGetPciInfo(whole).busId, _text)
        ask("sm_clock_mhz", lambda: lib.nvmlDeviceGetClockInfo(whole, NVML_CLOCK_SM))
        if full:
            # application clocks are set and shown for "graphics" (nvidia-smi -ac, clocks.applications.graphics)
            ask("sm_clock_app_mhz", lambda: lib.nvmlDeviceGetApplicationsClock(whole, NVML_CLOCK_GRAPHICS))
            ask("sm_clock_max_mhz", lambda: lib.nvmlDeviceGetMaxClockInfo(whole, NVML_CLOCK_SM))
            ask("memory_clock_mhz", lambda: lib.nvmlDeviceGetClockInfo(whole, NVML_CLOCK_MEM))
            ask("memory_clock_app_mhz", lambda: lib.nvmlDeviceGetApplicationsClock(whole, NVML_CLOCK_MEM))
            ask("memory_clock_max_mhz", lambda: lib.nvmlDeviceGetMaxClockInfo(whole, NVML_CLOCK_MEM))
            ask("power_limit_w", lambda: lib.nvmlDeviceGetPowerManagementLimit(whole), lambda mw: mw / 1000)
            ask("power_draw_w", lambda: lib.nvmlDeviceGetPowerUsage(whole), lambda mw: mw / 1000)
            ask("temperature_c", lambda: lib.nvmlDeviceGetTemperature(whole, NVML_TEMPERATURE_GPU))
            ask("persistence_mode", lambda: lib.nvmlDeviceGetPersistenceMode(whole), bool)
            ask("ecc", lambda: lib.nvmlDeviceGetEccMode(whole)[0], bool)
            ask("mig", lambda: lib.nvmlDeviceGetMigMode(whole)[0], bool)
            ask("compute_mode", lambda: lib.nvmlDeviceGetComputeMode(handle), lambda m: COMPUTE_MODES.get(m, str(m)))
        ask("clock_event_reasons", lambda: reasons(whole), reason_names)
        ask("processes", lambda: [self._process(p) for p in lib.nvmlDeviceGetComputeRunningProcesses(handle)])
        if full:
            state["matched_by"] = matched
            state["unavailable"] = unavailable
        return state

    def _process(self, process: Any) -> dict[str, Any]:
        try:
            name = _text(self.lib.nvmlSystemGetProcessName(process.pid))
        except self.error:
            name = None  # another PID namespace, or no permission to see it
        return {"pid": process.pid, "name": name, "used_memory_bytes": getattr(process, "usedGpuMemory", None)}

    def driver(self) -> str | None:
        try:
            return _text(self.lib.nvmlSystemGetDriverVersion())
        except self.error:
            return None


def _text(value: Any) -> str:
    """NVML strings: str in recent pynvml, bytes in old ones."""
    return value.decode() if isinstance(value, bytes) else str(value)


def run_nvidia_smi(args: list[str]) -> str:
    """nvidia-smi's standard output for `args`; GpuStateError when it is missing or fails."""
    try:
        out = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as exc:
        raise GpuStateError(f"nvidia-smi did not run ({exc})") from None
    if out.returncode != 0:
        said = (out.stdout.strip() or out.stderr.strip()).splitlines()
        raise GpuStateError(f"nvidia-smi {args[0]} failed: {said[0] if said else f'exit {out.returncode}'}")
    return out.stdout


class SmiReader:
    """Reads GPUs by parsing `nvidia-smi --query-gpu` (`run` is replaced by recorded outputs in tests)."""

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
            self.fields = (*SMI_FIELDS[:-1], SMI_OLD_REASONS)  # a driver before 535
            return self._query()

    def read(self, gpu: GpuId, full: bool) -> dict[str, Any]:
        rows = self._query()
        row = (next((r for r in rows if r.get("uuid") in gpu.uuids()), None)
               or next((r for r in rows if gpu.pci_bus_id and (r.get("pci.bus_id") or "").upper()
                        == gpu.pci_bus_id.upper()), None))
        matched = "uuid" if row and row.get("uuid") in gpu.uuids() else "pci_bus_id"
        if row is None and not gpu.uuid and not gpu.pci_bus_id:
            row, matched = next((r for r in rows if smi_int(r.get("index")) == gpu.physical_index()), None), "index"
        if row is None:
            raise GpuStateError(f"nvidia-smi lists no GPU with torch device {gpu.index}'s UUID {gpu.uuid} "
                                f"or PCI bus id {gpu.pci_bus_id}")
        try:
            apps: list[dict[str, str]] | None = parse_smi_csv(self.run([SMI_APPS, "--format=csv"]))
        except GpuStateError:
            apps = None
        state = state_from_smi(row, apps or [])
        if apps is None:
            state["processes"] = None
        if not full:
            return {key: state[key] for key in ("sm_clock_mhz", "clock_event_reasons", "processes")}
        state["matched_by"] = matched
        return state


# ---- what the rest of attnbench calls -----------------------------------------------------------------

_READER: Reader | None = None
_READER_PROBLEM: str | None = None


def default_reader() -> Reader:
    """NVML when nvidia-ml-py and the driver's library load, else nvidia-smi; made once per process."""
    global _READER, _READER_PROBLEM
    if _READER is not None:
        return _READER
    if _READER_PROBLEM is not None:
        raise GpuStateError(_READER_PROBLEM)
    try:
        import pynvml

        pynvml.nvmlInit()
        _READER = NvmlReader(pynvml)
        return _READER
    except ImportError:
        why = f"nvidia-ml-py is not installed ({INSTALL_HINT})"
    except Exception as exc:  # pynvml.NVMLError: no libnvidia-ml, a driver/library mismatch
        why = f"NVML did not start ({type(exc).__name__}: {exc})"
    if shutil.which("nvidia-smi"):
        _READER = SmiReader()
        return _READER
    _READER_PROBLEM = f"no NVML: {why}; and no nvidia-smi on PATH"
    raise GpuStateError(_READER_PROBLEM)


def snapshot(gpu: GpuId, reader: Reader | None = None, holds_context: bool = False) -> dict[str, Any]:
    """Everything env.json records about one GPU; on failure, the reason under "error"."""
    base: dict[str, Any] = {"index": gpu.index}
    try:
        reader = reader or default_reader()
        base["source"] = reader.source
        if isinstance(reader, NvmlReader):
            base["driver"] = reader.driver()
        return finish({**base, **reader.read(gpu, full=True)}, holds_context)
    except GpuStateError as exc:
        return {**base, "error": str(exc)}
    except Exception as exc:  # an NVML or driver surprise must not stop a run: it is recorded instead
        return {**base, "error": f"{type(exc).__name__}: {exc}"}


def gpu_states(reader: Reader | None = None, gpus: list[GpuId] | None = None) -> list[dict[str, Any]]:
    """The state of every GPU torch can see (the GPUs a run may use), for env.json's "gpu_state"."""
    if gpus is None:
        import torch

        gpus = [torch_gpu(index) for index in range(torch.cuda.device_count())]
    return [snapshot(gpu, reader) for gpu in gpus]


def env_fields(device: str) -> dict[str, Any]:
    """env.json's "gpu_state" on CUDA; nothing at all on CPU."""
    return {"gpu_state": gpu_states()} if device == "cuda" else {}


def measurement_sample(gpu: GpuId, reader: Reader | None = None) -> dict[str, Any]:
    """The SM clock, clock event reasons and other processes right after a timing: `extra` fields and `throttled`."""
    try:
        state = finish((reader or default_reader()).read(gpu, full=False), holds_context=True,
                       harness=harness_processes(gpu))
    except GpuStateError as exc:
        return {"extra": {"gpu_state_error": str(exc)}}
    except Exception as exc:  # never costs the measurement: the record says what could not be read
        return {"extra": {"gpu_state_error": f"{type(exc).__name__}: {exc}"}}
    extra = {"sm_clock_mhz": state["sm_clock_mhz"], "clock_event_reasons": state["clock_event_reasons"],
             "other_gpu_processes": state["other_process_count"]}
    return {"throttled": state["throttled"], "extra": extra}


def record_sample(fields: dict[str, Any], device: str, reader: Reader | None = None,
                  gpu: GpuId | None = None) -> None:
    """Put a measurement's GPU sample into its record fields (`throttled`, and `extra`); nothing on CPU."""
    if device != "cuda":
        return
    if gpu is None:
        import torch

        gpu = torch_gpu(torch.cuda.current_device())
    sample = measurement_sample(gpu, reader)
    fields.setdefault("extra", {}).update(sample["extra"])
    if "throttled" in sample:
        fields["throttled"] = sample["throttled"]


# ---- doctor: the state in words, and how to lock the clocks -----------------------------------------

def describe(state: dict[str, Any]) -> str:
    """One line of a GPU's state, for doctor and bug reports."""
    if state.get("error"):
        return f"GPU {state['index']} state: unknown ({state['error']})"

    def mhz(now: str, app: str, top: str) -> str:
        parts = [f"{state.get(now)} MHz" if state.get(now) is not None else "? MHz"]
        extra = [f"{word} {state[key]}" for word, key in (("application", app), ("max", top))
                 if state.get(key) is not None]
        return parts[0] + (f" ({', '.join(extra)})" if extra else "")

    def flag(value: Any) -> str:
        return "?" if value is None else "on" if value else "off"

    power = (f"{state['power_draw_w']:.0f} W of {state['power_limit_w']:.0f} W" if state.get("power_draw_w")
             is not None and state.get("power_limit_w") is not None else "power ?")
    temperature = f"{state['temperature_c']} °C" if state.get("temperature_c") is not None else "? °C"
    reasons = ", ".join(state.get("clock_event_reasons") or []) or "none"
    others = state.get("other_process_count")
    who = ("other processes unknown" if others is None else "no other processes" if others == 0
           else f"{others} other process{'es' if others != 1 else ''}")
    sm, memory = mhz("sm_clock_mhz", "sm_clock_app_mhz", "sm_clock_max_mhz"), \
        mhz("memory_clock_mhz", "memory_clock_app_mhz", "memory_clock_max_mhz")
    return (f"GPU {state['index']} state ({state.get('source')}): SM clock {sm} · memory clock {memory} · {power} · "
            f"{temperature} · persistence {flag(state.get('persistence_mode'))} · ECC {flag(state.get('ecc'))} · "
            f"MIG {flag(state.get('mig'))} · compute mode {state.get('compute_mode') or '?'} · "
            f"clock events: {reasons} · {who} · clocks {LOCK_WORDS[state.get('clocks_locked')]}")


def lock_commands(state: dict[str, Any]) -> list[str]:
    """The nvidia-smi commands (as root) that lock this GPU's clocks at their maximum, and the ones that undo it."""
    gpu = state.get("nvml_index") if state.get("nvml_index") is not None else state.get("uuid") or state["index"]
    sm = state.get("sm_clock_max_mhz") or "<max SM MHz>"
    mem = state.get("memory_clock_max_mhz") or "<max memory MHz>"
    return [f"sudo nvidia-smi -i {gpu} -pm 1    # persistence mode: settings stay between processes",
            f"sudo nvidia-smi -i {gpu} --lock-gpu-clocks={sm},{sm}    # -lgc; a lower clock the GPU can hold "
            f"under load also avoids power capping",
            f"sudo nvidia-smi -i {gpu} --lock-memory-clocks={mem},{mem}    # -lmc, where the GPU supports it",
            f"sudo nvidia-smi -i {gpu} --reset-gpu-clocks; sudo nvidia-smi -i {gpu} --reset-memory-clocks"
            f"    # -rgc, -rmc: undo"]


def advice(state: dict[str, Any]) -> list[str]:
    """Warnings about a GPU whose numbers would not be the GPU's own, each a sentence."""
    if state.get("error"):
        hint = f" ({INSTALL_HINT}, or put nvidia-smi on PATH)" if "no NVML" in state["error"] else ""
        return [f"GPU {state['index']}: its state (clocks, throttling, other processes) is not recorded: "
                f"{state['error']}{hint}"]
    warnings = []
    index = state["index"]
    if state.get("clocks_locked") is not True:
        verdict = "are not locked" if state.get("clocks_locked") is False else "may not be locked"
        warnings.append(f"GPU {index}: its SM clocks {verdict} ({state.get('clocks_lock_evidence')}); boost and "
                        f"power management move them between runs, and the timings with them")
    if state.get("throttle_reasons"):
        warnings.append(f"GPU {index}: throttled now ({', '.join(state['throttle_reasons'])})")
    if state.get("other_process_count"):
        listed = ", ".join(f"{p.get('pid')} {p.get('name') or '?'}" for p in state.get("other_processes") or [])
        warnings.append(f"GPU {index}: {state['other_process_count']} other process(es) on it ({listed}): "
                        f"their work shares the GPU with the measurements")
    if state.get("pid_namespace_differs"):
        warnings.append(f"GPU {index}: NVML's process ids are not this process's (a container?): other "
                        f"processes are counted, not named")
    if state.get("persistence_mode") is False:
        warnings.append(f"GPU {index}: persistence mode is off: the driver unloads between processes and "
                        f"clock settings do not stay")
    if state.get("mig"):
        warnings.append(f"GPU {index}: MIG is on: the numbers are one slice's, not the whole GPU's")
    return warnings


def doctor_lines(states: list[dict[str, Any]]) -> list[str]:
    """For `attnbench doctor`: each GPU's state, its warnings and, where clocks float, the commands that lock them."""
    lines = []
    for state in states:
        lines.append(describe(state))
        lines += [f"warning: {warning}" for warning in advice(state)]
        if needs_lock(state):
            lines.append("  to lock the clocks (as root; the last line undoes it):")
            lines += [f"    {command}" for command in lock_commands(state)]
    return lines


def needs_lock(state: dict[str, Any]) -> bool:
    """Whether doctor should print the lock commands: the state was read and the clocks are not known locked."""
    return not state.get("error") and state.get("clocks_locked") is not True


def doctor_json(states: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same for `doctor --json`: per GPU, its warnings and the lock commands when they apply."""
    return [{"index": s["index"], "clocks_locked": s.get("clocks_locked"), "warnings": advice(s),
             "lock_commands": lock_commands(s) if needs_lock(s) else []} for s in states]
