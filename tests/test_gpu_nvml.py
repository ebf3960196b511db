"""attnbench.gpu.nvml: what pynvml answered on an H200 (tests/fake_nvml.py) becomes its state; what NVML does not
support is None with NVML's reason."""

from __future__ import annotations

import pytest

from attnbench.gpu.nvml import NvmlReader
from attnbench.gpu.read import snapshot
from attnbench.gpu.state import GpuStateError
from tests.fake_nvml import H200_BUS, H200_UUID, FakeNvml
from tests.fake_smi import H200


def test_nvml_answers_of_the_h200_become_its_state() -> None:
    state = snapshot(H200, NvmlReader(FakeNvml()))
    assert state.source == "nvml" and state.driver == "580.159.04" and state.matched_by == "uuid"
    assert (state.name, state.uuid, state.pci_bus_id) == ("NVIDIA H200", H200_UUID, H200_BUS)
    assert (state.sm_clock_mhz, state.sm_clock_app_mhz, state.sm_clock_max_mhz) == (1980, 1980, 1980)
    assert (state.memory_clock_mhz, state.memory_clock_app_mhz, state.memory_clock_max_mhz) == (3201, 3201, 3201)
    assert state.power_limit_w == 700.0 and state.power_draw_w == pytest.approx(123.502)
    assert state.temperature_c == 35 and state.persistence_mode is True and state.ecc is True
    assert state.mig is False and state.compute_mode == "default"
    assert state.clock_event_reasons == () and state.throttled is False
    # The one compute process NVML listed is this one: no other process.
    assert state.other_processes == () and state.other_process_count == 0
    # Busy at 1980 of 1980 MHz: locked or boosting, a snapshot cannot tell.
    assert state.clocks_locked is None and "busy at 1980 MHz" in state.clocks_lock_evidence


def test_what_nvml_does_not_support_is_none_with_nvmls_reason() -> None:
    fake = FakeNvml(unsupported={"nvmlDeviceGetApplicationsClock", "nvmlDeviceGetPowerUsage"})
    state = snapshot(H200, NvmlReader(fake))
    assert state.sm_clock_app_mhz is None and state.memory_clock_app_mhz is None and state.power_draw_w is None
    assert state.unavailable == {"sm_clock_app_mhz": "Not Supported", "memory_clock_app_mhz": "Not Supported",
                                 "power_draw_w": "Not Supported"}
    assert state.sm_clock_max_mhz == 1980 and state.power_limit_w == 700.0
    idle = snapshot(H200, NvmlReader(FakeNvml(values={**fake.values, "sm_clock": 345}, reasons=0x1,
                                              unsupported={"nvmlDeviceGetApplicationsClock"})))
    assert idle.clocks_locked is False  # judged against the max clock when there are no application clocks


def test_a_mig_slice_is_read_through_its_whole_gpu() -> None:
    state = snapshot(H200, NvmlReader(FakeNvml(mig=True)))
    assert state.matched_by == "uuid (a MIG device)" and state.mig is True
    assert state.sm_clock_mhz == 1980 and state.unavailable == {}  # clocks asked of the GPU, not the slice


def test_a_measurements_light_read_asks_nvml_only_what_it_records() -> None:
    fake = FakeNvml()
    state = NvmlReader(fake).read(H200, full=False)
    assert fake.calls == ["nvmlDeviceGetClockInfo", "nvmlDeviceGetPowerUsage",
                          "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetComputeRunningProcesses"]
    assert (state.sm_clock_mhz, state.power_draw_w, state.clock_event_reasons) == (1980, 123.502, ())


def test_nvmls_energy_counter_is_read_from_the_whole_gpu_and_its_absence_says_why() -> None:
    fake = FakeNvml(energy_mj=[5_000_000, 5_250_000])
    reader = NvmlReader(fake)
    assert [reader.energy_mj(H200), reader.energy_mj(H200)] == [5_000_000, 5_250_000]
    assert NvmlReader(FakeNvml(mig=True, energy_mj=[7])).energy_mj(H200) == 7  # a MIG slice: its GPU's counter
    old = NvmlReader(FakeNvml(unsupported={"nvmlDeviceGetTotalEnergyConsumption"}))  # before Volta
    with pytest.raises(GpuStateError, match=r"no energy counter .*Not Supported"):
        old.energy_mj(H200)


def test_nvmls_real_binding_has_the_energy_counter_under_the_name_the_reader_calls() -> None:
    pynvml = pytest.importorskip("pynvml")
    assert callable(pynvml.nvmlDeviceGetTotalEnergyConsumption)
    assert callable(FakeNvml().nvmlDeviceGetTotalEnergyConsumption)


def test_nvml_is_an_optional_extra_and_the_docker_image_pins_it() -> None:
    import tomllib

    from tests.test_packaging import ROOT, dockerfile_args, extra

    assert extra("nvml")["nvidia-ml-py"].specifier.contains(dockerfile_args()["NVIDIA_ML_PY_VERSION"])
    required = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not [r for r in required if r.startswith("nvidia-ml-py")]  # a CPU install never needs it
