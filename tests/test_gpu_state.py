"""attnbench.gpu.state: which GPU (GpuId), the reason bits, and env.json's "gpu_state" entry as a GpuState."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnbench.gpu import state as gpu_state
from attnbench.gpu.nvml import (
    NVML_CLOCK_GRAPHICS,
    NVML_CLOCK_MEM,
    NVML_CLOCK_SM,
    NVML_TEMPERATURE_GPU,
)
from attnbench.gpu.state import GpuId, GpuProcess, GpuState

H200_RUNS = json.loads((Path(__file__).parent / "data" / "gpu" / "h200-runs.json").read_text())["runs"]

PYNVML_NAMES = {
    0x1: "nvmlClocksEventReasonGpuIdle", 0x2: "nvmlClocksEventReasonApplicationsClocksSetting",
    0x4: "nvmlClocksEventReasonSwPowerCap", 0x8: "nvmlClocksEventReasonHwSlowdown",
    0x10: "nvmlClocksEventReasonSyncBoost", 0x20: "nvmlClocksEventReasonSwThermalSlowdown",
    0x40: "nvmlClocksEventReasonHwThermalSlowdown", 0x80: "nvmlClocksEventReasonHwPowerBrakeSlowdown",
    0x100: "nvmlClocksEventReasonDisplayClockSetting", 0x200: "nvmlClocksThrottleReasonBoardLimit",
    0x400: "nvmlClocksThrottleReasonReliability",
}


def test_reason_bits_are_pynvmls() -> None:
    pynvml = pytest.importorskip("pynvml")
    assert {bit: getattr(pynvml, name) for bit, name in PYNVML_NAMES.items()} == {bit: bit for bit in PYNVML_NAMES}
    assert set(gpu_state.REASONS) == set(PYNVML_NAMES)
    assert (pynvml.NVML_CLOCK_GRAPHICS, pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM, pynvml.NVML_TEMPERATURE_GPU) == (
        NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU)
    assert gpu_state.reason_names(0x1001) == ("gpu_idle", "unknown_0x1000")
    assert gpu_state.reason_names(0x44) == ("sw_power_cap", "hw_thermal_slowdown")
    assert gpu_state.THROTTLING_NAMES == ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown",
                                          "hw_thermal_slowdown", "hw_power_brake_slowdown")


@pytest.mark.parametrize("run", sorted(H200_RUNS))
def test_the_h200_runs_env_json_reads_back_key_for_key(run: str) -> None:
    """env.json files already written keep working: a stored entry read as a GpuState writes the same dict."""
    [stored] = H200_RUNS[run]["gpu_state"]
    state = GpuState.from_dict(stored)
    assert (state.sm_clock_mhz, state.sm_clock_max_mhz, state.clock_event_reasons) == (345, 1980, ("gpu_idle",))
    assert state.clocks_locked is False and state.other_processes == () and state.throttled is False
    assert state.to_dict() == stored and list(state.to_dict()) == list(stored)


def test_a_stored_state_keeps_other_processes_and_a_read_error() -> None:
    shared = {"index": 1, "source": "nvidia-smi", "sm_clock_mhz": 1500, "clock_event_reasons": ["sw_power_cap"],
              "other_processes": [{"pid": 4242, "name": "python", "used_memory_bytes": 1 << 30}],
              "pid_namespace_differs": True, "other_process_count": 1, "throttle_reasons": ["sw_power_cap"],
              "throttled": True, "some_future_key": 3}
    state = GpuState.from_dict(shared)
    assert state.other_processes == (GpuProcess(4242, "python", 1 << 30),) and state.pid_namespace_differs
    assert state.throttle_reasons == ("sw_power_cap",) and state.to_dict()["pid_namespace_differs"] is True
    failed = {"index": 0, "source": "nvml", "driver": "580.159.04",
              "error": "NVML has no GPU with torch device 0's UUID"}
    assert GpuState.from_dict(failed).to_dict() == failed
    assert GpuState.from_dict({"index": 0, "error": "no NVML"}).to_dict() == {"index": 0, "error": "no NVML"}


def test_a_gpu_is_known_by_uuid_with_or_without_nvmls_prefix_and_by_its_visible_position(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    assert GpuId(0, "a9a6").uuids() == ["GPU-a9a6", "MIG-a9a6"] and GpuId(0, "MIG-a9a6").uuids() == ["MIG-a9a6"]
    assert GpuId(0).uuids() == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    assert GpuId(1).physical_index() == 5
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-a9a6")
    assert GpuId(0).physical_index() is None  # a UUID says nothing of nvidia-smi's index
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert GpuId(3).physical_index() == 3
