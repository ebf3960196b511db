"""attnbench.gpu.read: which reader, env.json's "gpu_state" on CUDA, nothing on CPU, and a reason instead of a crash."""

from __future__ import annotations

import sys

import pytest

from attnbench.gpu import read
from attnbench.gpu.sample import measurement_sample
from attnbench.gpu.smi import SmiReader
from tests.fake_smi import H200, smi
from tests.helpers import make_case, measure_one


@pytest.fixture
def fresh_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(read, "_READER", None)
    monkeypatch.setattr(read, "_READER_PROBLEM", None)


def test_without_nvidia_ml_py_nor_nvidia_smi_the_state_says_why(fresh_reader, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    monkeypatch.setattr(read.shutil, "which", lambda name: None)
    state = read.snapshot(H200)
    assert state.to_dict() == {"index": 0, "error": "no NVML: nvidia-ml-py is not installed "
                                                    "(pip install 'attnbench[nvml]'); and no nvidia-smi on PATH"}
    sample = measurement_sample(H200)
    assert sample.error == state.error and sample.record_fields() == {"extra": {"gpu_state_error": state.error}}


def test_nvml_without_its_driver_library_falls_back_to_nvidia_smi(fresh_reader, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("pynvml")  # the real one: this machine has no libnvidia-ml
    monkeypatch.setattr(read.shutil, "which", lambda name: None)
    assert "NVML did not start (NVMLError_LibraryNotFound" in read.snapshot(H200).error
    monkeypatch.setattr(read, "_READER_PROBLEM", None)
    monkeypatch.setattr(read.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    assert isinstance(read.default_reader(), SmiReader)


def test_a_reader_that_breaks_is_recorded_not_raised() -> None:
    class Broken(SmiReader):
        def read(self, gpu, full):  # type: ignore[no-untyped-def]
            raise KeyError("clocks")

    state = read.snapshot(H200, Broken(smi()))
    assert state.to_dict() == {"index": 0, "source": "nvidia-smi", "error": "KeyError: 'clocks'"}


def test_env_json_holds_each_visible_gpus_state_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    states = read.gpu_states(SmiReader(smi()), gpus=[H200])
    assert [s.sm_clock_max_mhz for s in states] == [1980]
    monkeypatch.setattr(read, "gpu_states", lambda: states)
    assert read.env_fields("cuda") == {"gpu_state": [states[0].to_dict()]} and read.env_fields("cpu") == {}
    assert read.env_fields("cuda")["gpu_state"][0]["clocks_lock_evidence"].startswith("the SM clock drops to 345")


def test_a_cpu_measurement_and_env_have_no_gpu_state_at_all() -> None:
    from attnbench.backends.registry import default_registry
    from attnbench.run.env import collect_env

    record = measure_one(make_case(), default_registry().get("naive"))
    assert record.status == "ok" and record.throttled is None
    assert not {"sm_clock_mhz", "clock_event_reasons", "other_gpu_processes", "power_w",
                "gpu_state_error"} & set(record.extra)
    assert "gpu_state" not in collect_env("cpu")
