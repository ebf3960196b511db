"""The GPU's state: parsed from what NVML and nvidia-smi really printed on an H200, judged, and absent on CPU."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from attnbench import gpustate
from attnbench.gpustate import GpuId, GpuStateError, NvmlReader, SmiReader
from tests.conftest import make_case, measure_one
from tests.fake_nvml import H200_BUS, H200_UUID, FakeNvml

DATA = Path(__file__).parent / "data" / "gpustate"
QUERY = (DATA / "nvidia-smi-query.csv").read_text()  # `nvidia-smi --query-gpu=... --format=csv`, idle H200
APPS = (DATA / "nvidia-smi-apps.csv").read_text()  # `--query-compute-apps=...`: header only, no process
# torch's view of the same GPU: its uuid without NVML's prefix, its PCI address.
H200 = GpuId(0, H200_UUID[len("GPU-"):], H200_BUS)


def smi(query: str = QUERY, apps: str = APPS, calls: list[list[str]] | None = None):  # type: ignore[no-untyped-def]
    """A stand-in for running nvidia-smi that prints the recorded outputs."""
    def run(args: list[str]) -> str:
        if calls is not None:
            calls.append(args)
        return apps if args[0].startswith("--query-compute-apps") else query
    return run


def test_nvidia_smi_csv_of_the_h200_parses_to_its_values() -> None:
    state = gpustate.snapshot(H200, SmiReader(smi()))
    assert state["source"] == "nvidia-smi" and state["matched_by"] == "uuid"
    assert (state["name"], state["uuid"], state["pci_bus_id"], state["nvml_index"]) == (
        "NVIDIA H200", H200_UUID, H200_BUS, 0)
    assert (state["sm_clock_mhz"], state["sm_clock_app_mhz"], state["sm_clock_max_mhz"]) == (345, 1980, 1980)
    assert (state["memory_clock_mhz"], state["memory_clock_app_mhz"], state["memory_clock_max_mhz"]) == (3201, 3201, 3201)
    assert state["power_limit_w"] == 700.0 and state["power_draw_w"] == 80.75 and state["temperature_c"] == 34
    assert state["persistence_mode"] is True and state["ecc"] is True and state["mig"] is False
    assert state["compute_mode"] == "default"
    assert state["clock_event_reasons"] == ["gpu_idle"] and state["throttle_reasons"] == []
    assert state["other_processes"] == [] and state["other_process_count"] == 0
    assert state["throttled"] is False
    # Idle at 345 MHz with a 1980 MHz target: the clocks float, nothing holds them.
    assert state["clocks_locked"] is False and "345 MHz when idle, 1980 MHz under load" in state["clocks_lock_evidence"]
    assert state["unavailable"] == {}


def test_nvidia_smi_is_asked_for_the_fields_the_h200s_driver_answered() -> None:
    calls: list[list[str]] = []
    gpustate.snapshot(H200, SmiReader(smi(calls=calls)))
    asked = [call[0].split("=", 1)[1].split(",") for call in calls]
    answered = [[name.split(" [")[0] for name in text.splitlines()[0].split(", ")] for text in (QUERY, APPS)]
    assert asked == answered and [call[1] for call in calls] == ["--format=csv", "--format=csv"]


def test_nvidia_smi_cells_units_and_missing_values() -> None:
    assert gpustate.smi_number("700.00 W") == 700.0 and gpustate.smi_int("345 MHz") == 345
    assert gpustate.smi_value("[N/A]") is None and gpustate.smi_number("[Not Supported]") is None
    assert gpustate.smi_flag("Enabled") is True and gpustate.smi_flag("Disabled") is False
    rows = gpustate.parse_smi_csv(QUERY)
    assert "clocks.current.sm" in rows[0] and rows[0]["clocks.current.sm"] == "345 MHz"
    assert rows[0]["clocks_event_reasons.active"] == "0x0000000000000001"
    assert gpustate.parse_smi_csv(APPS) == []


def test_nvidia_smi_n_a_values_are_none_with_the_reason() -> None:
    query = QUERY.replace("1980 MHz, 3201 MHz, 1980 MHz", "[N/A], [N/A], 1980 MHz", 1)
    state = gpustate.snapshot(H200, SmiReader(smi(query)))
    assert state["sm_clock_app_mhz"] is None and state["unavailable"]["sm_clock_app_mhz"] == "[N/A]"
    assert state["sm_clock_max_mhz"] == 1980


def test_nvidia_smi_throttle_bits_and_other_processes_flag_the_gpu() -> None:
    hot = QUERY.replace("0x0000000000000001", "0x0000000000000044")  # SwPowerCap | HwThermalSlowdown
    state = gpustate.snapshot(H200, SmiReader(smi(hot)))
    assert state["clock_event_reasons"] == ["sw_power_cap", "hw_thermal_slowdown"]
    assert state["throttle_reasons"] == ["sw_power_cap", "hw_thermal_slowdown"] and state["throttled"] is True
    shared = APPS + f"{H200_UUID}, 4242, /usr/bin/python3, 1024 MiB\nGPU-someother, 4343, python, 10 MiB\n"
    state = gpustate.snapshot(H200, SmiReader(smi(apps=shared)))
    assert state["other_processes"] == [{"pid": 4242, "name": "/usr/bin/python3", "used_memory_bytes": 1024 * 2**20}]
    assert state["throttled"] is True


def test_nvidia_smi_finds_the_gpu_by_uuid_or_pci_address_not_by_position() -> None:
    other = "1, NVIDIA H200, GPU-00000000-0000-0000-0000-000000000000, 00000000:00:07.0, 1980 MHz, 3201 MHz, " \
            "1980 MHz, 3201 MHz, 1980 MHz, 3201 MHz, 700.00 W, 500.00 W, 80, Enabled, Enabled, Disabled, Default, " \
            "0x0000000000000040"
    lines = QUERY.strip().splitlines()
    query = "\n".join([lines[0], other, lines[1]]) + "\n"
    assert gpustate.snapshot(H200, SmiReader(smi(query)))["throttled"] is False
    by_bus = gpustate.snapshot(GpuId(0, None, "00000000:00:06.0"), SmiReader(smi(query)))
    assert by_bus["matched_by"] == "pci_bus_id" and by_bus["uuid"] == H200_UUID
    lost = gpustate.snapshot(GpuId(0, "ffffffff-0000-0000-0000-000000000000", "00000000:00:09.0"), SmiReader(smi(query)))
    assert "no GPU with torch device 0's UUID" in lost["error"]


def test_a_driver_before_535_is_asked_for_the_throttle_reasons_field() -> None:
    calls: list[list[str]] = []
    old = QUERY.replace("clocks_event_reasons.active", "clocks_throttle_reasons.active")

    def run(args: list[str]) -> str:
        calls.append(args)
        if "clocks_event_reasons.active" in args[0]:
            raise GpuStateError('nvidia-smi failed: Field "clocks_event_reasons.active" is not a valid field to query.')
        return smi(old)(args)

    state = gpustate.snapshot(H200, SmiReader(run))
    assert state["clock_event_reasons"] == ["gpu_idle"]
    assert "clocks_throttle_reasons.active" in calls[1][0]


def test_nvml_answers_of_the_h200_become_its_state() -> None:
    state = gpustate.snapshot(H200, NvmlReader(FakeNvml()))
    assert state["source"] == "nvml" and state["driver"] == "580.159.04" and state["matched_by"] == "uuid"
    assert (state["name"], state["uuid"], state["pci_bus_id"]) == ("NVIDIA H200", H200_UUID, H200_BUS)
    assert (state["sm_clock_mhz"], state["sm_clock_app_mhz"], state["sm_clock_max_mhz"]) == (1980, 1980, 1980)
    assert (state["memory_clock_mhz"], state["memory_clock_app_mhz"], state["memory_clock_max_mhz"]) == (3201, 3201, 3201)
    assert state["power_limit_w"] == 700.0 and state["power_draw_w"] == pytest.approx(123.502)
    assert state["temperature_c"] == 35 and state["persistence_mode"] is True and state["ecc"] is True
    assert state["mig"] is False and state["compute_mode"] == "default"
    assert state["clock_event_reasons"] == [] and state["throttled"] is False
    # The one compute process NVML listed is this one: no other process.
    assert state["other_processes"] == [] and state["other_process_count"] == 0
    # Busy at 1980 of 1980 MHz: locked or boosting, a snapshot cannot tell.
    assert state["clocks_locked"] is None and "busy at 1980 MHz" in state["clocks_lock_evidence"]


def test_what_nvml_does_not_support_is_none_with_nvmls_reason() -> None:
    fake = FakeNvml(unsupported={"nvmlDeviceGetApplicationsClock", "nvmlDeviceGetPowerUsage"})
    state = gpustate.snapshot(H200, NvmlReader(fake))
    assert state["sm_clock_app_mhz"] is None and state["memory_clock_app_mhz"] is None and state["power_draw_w"] is None
    assert state["unavailable"] == {"sm_clock_app_mhz": "Not Supported", "memory_clock_app_mhz": "Not Supported",
                                    "power_draw_w": "Not Supported"}
    assert state["sm_clock_max_mhz"] == 1980 and state["power_limit_w"] == 700.0
    idle = gpustate.snapshot(H200, NvmlReader(FakeNvml(values={**fake.values, "sm_clock": 345}, reasons=0x1,
                                                           unsupported={"nvmlDeviceGetApplicationsClock"})))
    assert idle["clocks_locked"] is False  # judged against the max clock when there are no application clocks


def test_a_mig_slice_is_read_through_its_whole_gpu() -> None:
    state = gpustate.snapshot(H200, NvmlReader(FakeNvml(mig=True)))
    assert state["matched_by"] == "uuid (a MIG device)" and state["mig"] is True
    assert state["sm_clock_mhz"] == 1980 and state["unavailable"] == {}  # clocks asked of the GPU, not the slice
    assert any("MIG is on" in warning for warning in gpustate.advice(state))


@pytest.mark.parametrize("reasons, names, throttled", [
    (0x40, ["hw_thermal_slowdown"], True),
    (0x4, ["sw_power_cap"], True),
    (0x8, ["hw_slowdown"], True),
    (0x80, ["hw_power_brake_slowdown"], True),
    (0x20, ["sw_thermal_slowdown"], True),
    (0x1, ["gpu_idle"], False),
    (0x2, ["applications_clocks_setting"], False),
    (0x10, ["sync_boost"], False),
    (0x0, [], False),
    (0x41, ["gpu_idle", "hw_thermal_slowdown"], True),
])
def test_a_measurement_is_throttled_only_by_heat_or_power(reasons: int, names: list[str], throttled: bool) -> None:
    sample = gpustate.measurement_sample(H200, NvmlReader(FakeNvml(reasons=reasons)))
    assert sample == {"throttled": throttled,
                      "extra": {"sm_clock_mhz": 1980, "clock_event_reasons": names, "other_gpu_processes": 0}}


def test_another_process_on_the_gpu_flags_the_measurement() -> None:
    from types import SimpleNamespace

    ours = SimpleNamespace(pid=os.getpid(), usedGpuMemory=1 << 29)
    theirs = SimpleNamespace(pid=os.getpid() + 100000, usedGpuMemory=None)
    shared = gpustate.measurement_sample(H200, NvmlReader(FakeNvml(processes=[ours, theirs])))
    assert shared["throttled"] is True and shared["extra"]["other_gpu_processes"] == 1
    alone = gpustate.measurement_sample(H200, NvmlReader(FakeNvml(processes=[ours])))
    assert alone["throttled"] is False and alone["extra"]["other_gpu_processes"] == 0


def test_in_another_pid_namespace_one_listed_process_is_taken_to_be_this_one() -> None:
    from types import SimpleNamespace

    host = [SimpleNamespace(pid=900001, usedGpuMemory=None)]  # our process, by its host pid
    alone = gpustate.measurement_sample(H200, NvmlReader(FakeNvml(processes=host)))
    assert alone["throttled"] is False and alone["extra"]["other_gpu_processes"] == 0
    two = host + [SimpleNamespace(pid=900002, usedGpuMemory=None)]
    shared = gpustate.measurement_sample(H200, NvmlReader(FakeNvml(processes=two)))
    assert shared["throttled"] is True and shared["extra"]["other_gpu_processes"] == 1
    # A snapshot taken before this process touched the GPU counts every listed process as another.
    before = gpustate.snapshot(H200, NvmlReader(FakeNvml(processes=host)))
    assert before["other_process_count"] == 1 and "pid_namespace_differs" not in before


def test_unknown_reasons_leave_throttled_unknown_not_false() -> None:
    sample = gpustate.measurement_sample(
        H200, NvmlReader(FakeNvml(unsupported={"nvmlDeviceGetCurrentClocksEventReasons"})))
    assert sample["throttled"] is None and sample["extra"]["clock_event_reasons"] is None


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
    assert set(gpustate.REASONS) == set(PYNVML_NAMES)
    assert (pynvml.NVML_CLOCK_GRAPHICS, pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM, pynvml.NVML_TEMPERATURE_GPU) == (
        gpustate.NVML_CLOCK_GRAPHICS, gpustate.NVML_CLOCK_SM, gpustate.NVML_CLOCK_MEM, gpustate.NVML_TEMPERATURE_GPU)
    assert gpustate.reason_names(0x1001) == ["gpu_idle", "unknown_0x1000"]


@pytest.fixture
def fresh_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpustate, "_READER", None)
    monkeypatch.setattr(gpustate, "_READER_PROBLEM", None)


def test_without_nvidia_ml_py_nor_nvidia_smi_the_state_says_why(fresh_reader, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    monkeypatch.setattr(gpustate.shutil, "which", lambda name: None)
    state = gpustate.snapshot(H200)
    assert state == {"index": 0, "error": "no NVML: nvidia-ml-py is not installed (pip install 'attnbench[nvml]'); "
                                          "and no nvidia-smi on PATH"}
    assert "pip install 'attnbench[nvml]'" in gpustate.advice(state)[0]
    assert gpustate.measurement_sample(H200) == {"extra": {"gpu_state_error": state["error"]}}


def test_nvml_without_its_driver_library_falls_back_to_nvidia_smi(fresh_reader, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("pynvml")  # the real one: this machine has no libnvidia-ml
    monkeypatch.setattr(gpustate.shutil, "which", lambda name: None)
    assert "NVML did not start (NVMLError_LibraryNotFound" in gpustate.snapshot(H200)["error"]
    monkeypatch.setattr(gpustate, "_READER_PROBLEM", None)
    monkeypatch.setattr(gpustate.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    assert isinstance(gpustate.default_reader(), SmiReader)


def test_record_sample_fills_the_record_on_cuda_and_nothing_on_cpu() -> None:
    fields: dict = {"extra": {"compile_s": 1.0}}
    gpustate.record_sample(fields, "cpu", NvmlReader(FakeNvml(reasons=0x40)), H200)
    assert fields == {"extra": {"compile_s": 1.0}}
    gpustate.record_sample(fields, "cuda", NvmlReader(FakeNvml(reasons=0x40)), H200)
    assert fields["throttled"] is True
    assert fields["extra"] == {"compile_s": 1.0, "sm_clock_mhz": 1980, "clock_event_reasons": ["hw_thermal_slowdown"],
                               "other_gpu_processes": 0}


def test_a_cpu_measurement_and_env_have_no_gpu_state_at_all(tmp_path: Path) -> None:
    from attnbench.env import collect_env
    from attnbench.registry import default_registry

    record = measure_one(make_case(), default_registry().get("naive"))
    assert record.status == "ok" and record.throttled is None
    assert not {"sm_clock_mhz", "clock_event_reasons", "other_gpu_processes", "gpu_state_error"} & set(record.extra)
    assert "gpu_state" not in collect_env("cpu")


def test_env_json_holds_each_visible_gpus_state_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    states = gpustate.gpu_states(SmiReader(smi()), gpus=[H200])
    assert [s["sm_clock_max_mhz"] for s in states] == [1980]
    monkeypatch.setattr(gpustate, "gpu_states", lambda: states)
    assert gpustate.env_fields("cuda") == {"gpu_state": states} and gpustate.env_fields("cpu") == {}


def test_doctor_warns_that_floating_clocks_are_not_locked_and_prints_the_commands() -> None:
    state = gpustate.snapshot(H200, SmiReader(smi()))
    lines = gpustate.doctor_lines([state])
    assert lines[0].startswith("GPU 0 state (nvidia-smi): SM clock 345 MHz (application 1980, max 1980)")
    assert "81 W of 700 W" in lines[0] and "34 °C" in lines[0] and "no other processes" in lines[0]
    assert any(line.startswith("warning: GPU 0: its SM clocks are not locked (the SM clock drops to 345 MHz") for line in lines)
    text = "\n".join(lines)
    for command in ("nvidia-smi -i 0 -pm 1", "--lock-gpu-clocks=1980,1980", "--lock-memory-clocks=3201,3201",
                    "--reset-gpu-clocks", "--reset-memory-clocks"):
        assert command in text
    [advice] = gpustate.doctor_json([state])
    assert advice["clocks_locked"] is False and "--lock-gpu-clocks=1980,1980" in advice["lock_commands"][1]


def test_doctor_stays_quiet_about_clocks_held_at_their_target_while_idle() -> None:
    locked = QUERY.replace("345 MHz", "1980 MHz")  # idle, yet at 1980 MHz: locked with -lgc
    state = gpustate.snapshot(H200, SmiReader(smi(locked)))
    assert state["clocks_locked"] is True
    assert gpustate.advice(state) == [] and gpustate.doctor_json([state])[0]["lock_commands"] == []
    assert not any("lock" in line for line in gpustate.doctor_lines([state])[1:])


def test_attnbench_doctor_shows_the_state_and_the_lock_commands_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    import attnbench.doctor as doctor
    import attnbench.env as env

    state = gpustate.snapshot(H200, SmiReader(smi()))
    monkeypatch.setattr(env, "collect_env", lambda device: {"device": device, "gpu_state": [state]})
    monkeypatch.setattr(doctor, "sdpa_kernel_usability", lambda device: {})
    diagnosis = doctor.diagnose("cuda")
    text = "\n".join(doctor.format_text(diagnosis))
    assert "GPU 0 state (nvidia-smi): SM clock 345 MHz" in text and "its SM clocks are not locked" in text
    assert "sudo nvidia-smi -i 0 --lock-gpu-clocks=1980,1980" in text
    advice = diagnosis.to_dict()["gpu_advice"]
    assert advice[0]["clocks_locked"] is False and len(advice[0]["lock_commands"]) == 4
    assert diagnosis.to_dict()["environment"]["gpu_state"][0]["sm_clock_max_mhz"] == 1980


def test_attnbench_doctor_on_cpu_says_nothing_about_gpu_clocks() -> None:
    import json

    from typer.testing import CliRunner

    from attnbench.cli import app

    report = CliRunner().invoke(app, ["doctor", "--device", "cpu", "--json"])
    data = json.loads(report.output[report.output.index("{"):])
    assert data["gpu_advice"] == [] and "gpu_state" not in data["environment"]
    text = CliRunner().invoke(app, ["doctor", "--device", "cpu"]).output
    assert "state (" not in text and "--lock-gpu-clocks" not in text


def test_the_run_summary_marks_a_throttled_median() -> None:
    from rich.console import Console

    from attnbench.results import Record
    from attnbench.tables import print_summary

    case = make_case(device="cuda").fields()
    record = Record(run_id="r", suite="s", timestamp="t", backend="sdpa", status="ok", time_ms=1.0, time_ms_iqr=0.01,
                    throttled=True, case_id="c", **case)
    console = Console(record=True, width=200)
    print_summary([record, Record(**{**record.to_dict(), "backend": "naive", "throttled": False})], console)
    text = console.export_text()
    assert "!1.000" in text and text.count("!1.000") == 1
    assert "! before a median: timed on a throttled or shared GPU" in text


def test_nvml_is_an_optional_extra_and_the_docker_image_pins_it() -> None:
    import tomllib

    from tests.test_packaging import ROOT, dockerfile_args, extra

    assert extra("nvml")["nvidia-ml-py"].specifier.contains(dockerfile_args()["NVIDIA_ML_PY_VERSION"])
    required = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not [r for r in required if r.startswith("nvidia-ml-py")]  # a CPU install never needs it


def test_the_harness_parent_holding_a_context_is_not_another_process(monkeypatch) -> None:
    """On the first H200 runs every record was flagged `throttled` by one "other" process: the run's own
    parent, which held a context. Named by the parent, it is discounted, in a container (pids from another
    namespace) and out of one (the parent's own pid); a third process still flags the record."""
    from types import SimpleNamespace

    worker, parent, stranger = (SimpleNamespace(pid=p, usedGpuMemory=None) for p in (900001, 900002, 900003))
    monkeypatch.setenv(gpustate.HARNESS_GPUS_VAR, H200.uuid)
    two = gpustate.measurement_sample(H200, NvmlReader(FakeNvml(processes=[worker, parent])))
    assert two["throttled"] is False and two["extra"]["other_gpu_processes"] == 0
    three = gpustate.measurement_sample(H200, NvmlReader(FakeNvml(processes=[worker, parent, stranger])))
    assert three["throttled"] is True and three["extra"]["other_gpu_processes"] == 1
    ours = [SimpleNamespace(pid=os.getpid(), usedGpuMemory=None), SimpleNamespace(pid=os.getppid(), usedGpuMemory=None)]
    same_namespace = gpustate.measurement_sample(H200, NvmlReader(FakeNvml(processes=ours)))
    assert same_namespace["extra"]["other_gpu_processes"] == 0
    monkeypatch.setenv(gpustate.HARNESS_GPUS_VAR, "GPU-some-other-card")  # the parent's context is elsewhere
    elsewhere = gpustate.measurement_sample(H200, NvmlReader(FakeNvml(processes=[worker, parent])))
    assert elsewhere["throttled"] is True and elsewhere["extra"]["other_gpu_processes"] == 1
