"""attnbench.gpu.smi: what nvidia-smi really printed on an H200, parsed to its values and judged."""

from __future__ import annotations

from attnbench.gpu.read import snapshot
from attnbench.gpu.smi import (
    SmiReader,
    parse_smi_csv,
    smi_flag,
    smi_int,
    smi_number,
    smi_value,
)
from attnbench.gpu.state import GpuId, GpuProcess, GpuStateError
from tests.fake_nvml import H200_BUS, H200_UUID
from tests.fake_smi import APPS, H200, QUERY, smi


def test_nvidia_smi_csv_of_the_h200_parses_to_its_values() -> None:
    state = snapshot(H200, SmiReader(smi()))
    assert state.source == "nvidia-smi" and state.matched_by == "uuid"
    assert (state.name, state.uuid, state.pci_bus_id, state.nvml_index) == ("NVIDIA H200", H200_UUID, H200_BUS, 0)
    assert (state.sm_clock_mhz, state.sm_clock_app_mhz, state.sm_clock_max_mhz) == (345, 1980, 1980)
    assert (state.memory_clock_mhz, state.memory_clock_app_mhz, state.memory_clock_max_mhz) == (3201, 3201, 3201)
    assert state.power_limit_w == 700.0 and state.power_draw_w == 80.75 and state.temperature_c == 34
    assert state.persistence_mode is True and state.ecc is True and state.mig is False
    assert state.compute_mode == "default"
    assert state.clock_event_reasons == ("gpu_idle",) and state.throttle_reasons == ()
    assert state.other_processes == () and state.other_process_count == 0
    assert state.throttled is False
    # Idle at 345 MHz with a 1980 MHz target: the clocks float, nothing holds them.
    assert state.clocks_locked is False and "345 MHz when idle, 1980 MHz under load" in state.clocks_lock_evidence
    assert state.unavailable == {}
    assert "driver" not in state.to_dict()  # as env.json has always had it from nvidia-smi


def test_nvidia_smi_is_asked_for_the_fields_the_h200s_driver_answered() -> None:
    calls: list[list[str]] = []
    snapshot(H200, SmiReader(smi(calls=calls)))
    asked = [call[0].split("=", 1)[1].split(",") for call in calls]
    answered = [[name.split(" [")[0] for name in text.splitlines()[0].split(", ")] for text in (QUERY, APPS)]
    assert asked == answered and [call[1] for call in calls] == ["--format=csv", "--format=csv"]


def test_nvidia_smi_cells_units_and_missing_values() -> None:
    assert smi_number("700.00 W") == 700.0 and smi_int("345 MHz") == 345
    assert smi_value("[N/A]") is None and smi_number("[Not Supported]") is None
    assert smi_flag("Enabled") is True and smi_flag("Disabled") is False
    rows = parse_smi_csv(QUERY)
    assert "clocks.current.sm" in rows[0] and rows[0]["clocks.current.sm"] == "345 MHz"
    assert rows[0]["clocks_event_reasons.active"] == "0x0000000000000001"
    assert parse_smi_csv(APPS) == []


def test_nvidia_smi_n_a_values_are_none_with_the_reason() -> None:
    query = QUERY.replace("1980 MHz, 3201 MHz, 1980 MHz", "[N/A], [N/A], 1980 MHz", 1)
    state = snapshot(H200, SmiReader(smi(query)))
    assert state.sm_clock_app_mhz is None and state.unavailable["sm_clock_app_mhz"] == "[N/A]"
    assert state.sm_clock_max_mhz == 1980


def test_nvidia_smi_throttle_bits_and_other_processes_flag_the_gpu() -> None:
    hot = QUERY.replace("0x0000000000000001", "0x0000000000000044")  # SwPowerCap | HwThermalSlowdown
    state = snapshot(H200, SmiReader(smi(hot)))
    assert state.clock_event_reasons == ("sw_power_cap", "hw_thermal_slowdown")
    assert state.throttle_reasons == ("sw_power_cap", "hw_thermal_slowdown") and state.throttled is True
    shared = APPS + f"{H200_UUID}, 4242, /usr/bin/python3, 1024 MiB\nGPU-someother, 4343, python, 10 MiB\n"
    state = snapshot(H200, SmiReader(smi(apps=shared)))
    assert state.other_processes == (GpuProcess(4242, "/usr/bin/python3", 1024 * 2**20),)
    assert state.to_dict()["other_processes"] == [{"pid": 4242, "name": "/usr/bin/python3",
                                                   "used_memory_bytes": 1024 * 2**20}]
    assert state.throttled is True


def test_nvidia_smi_finds_the_gpu_by_uuid_or_pci_address_not_by_position() -> None:
    other = "1, NVIDIA H200, GPU-00000000-0000-0000-0000-000000000000, 00000000:00:07.0, 1980 MHz, 3201 MHz, " \
            "1980 MHz, 3201 MHz, 1980 MHz, 3201 MHz, 700.00 W, 500.00 W, 80, Enabled, Enabled, Disabled, Default, " \
            "0x0000000000000040"
    lines = QUERY.strip().splitlines()
    query = "\n".join([lines[0], other, lines[1]]) + "\n"
    assert snapshot(H200, SmiReader(smi(query))).throttled is False
    by_bus = snapshot(GpuId(0, None, "00000000:00:06.0"), SmiReader(smi(query)))
    assert by_bus.matched_by == "pci_bus_id" and by_bus.uuid == H200_UUID
    lost = snapshot(GpuId(0, "ffffffff-0000-0000-0000-000000000000", "00000000:00:09.0"), SmiReader(smi(query)))
    assert "no GPU with torch device 0's UUID" in lost.error
    assert lost.to_dict() == {"index": 0, "source": "nvidia-smi", "error": lost.error}


def test_a_driver_before_535_is_asked_for_the_throttle_reasons_field() -> None:
    calls: list[list[str]] = []
    old = QUERY.replace("clocks_event_reasons.active", "clocks_throttle_reasons.active")

    def run(args: list[str]) -> str:
        calls.append(args)
        if "clocks_event_reasons.active" in args[0]:
            raise GpuStateError('nvidia-smi failed: Field "clocks_event_reasons.active" is not a valid field to query.')
        return smi(old)(args)

    state = snapshot(H200, SmiReader(run))
    assert state.clock_event_reasons == ("gpu_idle",)
    assert "clocks_throttle_reasons.active" in calls[1][0]


def test_a_measurements_light_read_from_nvidia_smi_has_the_sampled_fields_only() -> None:
    state = SmiReader(smi()).read(H200, full=False)
    assert (state.sm_clock_mhz, state.power_draw_w, state.clock_event_reasons, state.processes) == (
        345, 80.75, ("gpu_idle",), ())
    assert state.name is None and state.matched_by is None
