"""attnbench.cli.doctor's GPU lines: the state in words, the warnings, and the commands that lock floating clocks."""

from __future__ import annotations

import json

import pytest

from attnbench.cli import doctor
from attnbench.gpu.nvml import NvmlReader
from attnbench.gpu.read import snapshot
from attnbench.gpu.smi import SmiReader
from attnbench.gpu.state import GpuState
from tests.fake_nvml import FakeNvml
from tests.fake_smi import H200, QUERY, smi


def stored(state: GpuState) -> dict:
    """As doctor gets it: env.json's "gpu_state" entry."""
    return state.to_dict()


def test_doctor_warns_that_floating_clocks_are_not_locked_and_prints_the_commands() -> None:
    state = stored(snapshot(H200, SmiReader(smi())))
    lines = doctor.gpu_lines([state])
    assert lines[0].startswith("GPU 0 state (nvidia-smi): SM clock 345 MHz (application 1980, max 1980)")
    assert "81 W of 700 W" in lines[0] and "34 °C" in lines[0] and "no other processes" in lines[0]
    assert any(line.startswith("warning: GPU 0: its SM clocks are not locked (the SM clock drops to 345 MHz")
               for line in lines)
    text = "\n".join(lines)
    for command in ("nvidia-smi -i 0 -pm 1", "--lock-gpu-clocks=1980,1980", "--lock-memory-clocks=3201,3201",
                    "--reset-gpu-clocks", "--reset-memory-clocks"):
        assert command in text
    [advice] = doctor.gpu_advice([state])
    assert advice["clocks_locked"] is False and "--lock-gpu-clocks=1980,1980" in advice["lock_commands"][1]


def test_doctor_stays_quiet_about_clocks_held_at_their_target_while_idle() -> None:
    locked = QUERY.replace("345 MHz", "1980 MHz")  # idle, yet at 1980 MHz: locked with -lgc
    state = stored(snapshot(H200, SmiReader(smi(locked))))
    assert state["clocks_locked"] is True
    assert doctor.gpu_warnings(GpuState.from_dict(state)) == [] and doctor.gpu_advice([state])[0]["lock_commands"] == []
    assert not any("lock" in line for line in doctor.gpu_lines([state])[1:])


def test_doctor_names_other_processes_mig_and_an_unread_state() -> None:
    from types import SimpleNamespace

    host = [SimpleNamespace(pid=900001, usedGpuMemory=None), SimpleNamespace(pid=900002, usedGpuMemory=None)]
    mig = GpuState.from_dict(stored(snapshot(H200, NvmlReader(FakeNvml(mig=True, processes=host)))))
    warnings = doctor.gpu_warnings(mig)
    assert "GPU 0: 2 other process(es) on it (900001 ?, 900002 ?): their work shares the GPU" in warnings[1]
    assert any("MIG is on" in warning for warning in warnings)
    unread = GpuState(0, error="no NVML: nvidia-ml-py is not installed")
    assert doctor.gpu_warnings(unread) == [
        "GPU 0: its state (clocks, throttling, other processes) is not recorded: no NVML: nvidia-ml-py is not "
        "installed (pip install 'attnbench[nvml]', or put nvidia-smi on PATH)"]
    assert doctor.gpu_advice([unread.to_dict()]) == [{"index": 0, "clocks_locked": None, "warnings":
                                                      doctor.gpu_warnings(unread), "lock_commands": []}]


def test_attnbench_doctor_shows_the_state_and_the_lock_commands_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    import attnbench.run.env as env

    state = stored(snapshot(H200, SmiReader(smi())))
    monkeypatch.setattr(env, "collect_env", lambda device, **_: {"device": device, "gpu_state": [state]})
    monkeypatch.setattr(doctor, "sdpa_kernel_usability", lambda device: {})
    diagnosis = doctor.diagnose("cuda")
    text = "\n".join(doctor.format_text(diagnosis))
    assert "GPU 0 state (nvidia-smi): SM clock 345 MHz" in text and "its SM clocks are not locked" in text
    assert "sudo nvidia-smi -i 0 --lock-gpu-clocks=1980,1980" in text
    advice = diagnosis.to_dict()["gpu_advice"]
    assert advice[0]["clocks_locked"] is False and len(advice[0]["lock_commands"]) == 4
    assert diagnosis.to_dict()["environment"]["gpu_state"][0]["sm_clock_max_mhz"] == 1980


def test_attnbench_doctor_on_cpu_says_nothing_about_gpu_clocks() -> None:
    from typer.testing import CliRunner

    from attnbench.cli.main import app

    report = CliRunner().invoke(app, ["doctor", "--device", "cpu", "--json"])
    data = json.loads(report.output[report.output.index("{"):])
    assert data["gpu_advice"] == [] and "gpu_state" not in data["environment"]
    text = CliRunner().invoke(app, ["doctor", "--device", "cpu"]).output
    assert "state (" not in text and "--lock-gpu-clocks" not in text


def test_doctor_json_on_the_h200s_gives_the_advice_it_gave_there() -> None:
    from pathlib import Path

    runs = json.loads((Path(__file__).parent / "data" / "gpu" / "h200-runs.json").read_text())["runs"]
    for run in runs.values():
        assert doctor.gpu_advice(run["doctor"]["gpu_state"]) == run["doctor"]["gpu_advice"]
        [advice] = run["doctor"]["gpu_advice"]
        assert advice["clocks_locked"] is None and "may not be locked" in advice["warnings"][0]
