"""What env.json says about the machine (attnbench.run.env): enough for a reader to reproduce or compare a run."""

from __future__ import annotations

import platform

import pytest
import torch

from attnbench.core.errors import AttnbenchError
from attnbench.run import env
from attnbench.run.env import collect_env, resolve_device, slurm_job


def test_a_cpu_env_names_the_software_and_the_machine() -> None:
    recorded = collect_env("cpu")
    assert recorded["torch"] == torch.__version__ and recorded["python"] == platform.python_version()
    assert recorded["device"] == "cpu" and recorded["device_name"] == env.cpu_name()
    assert recorded["cpu_count"] >= 1 and recorded["torch_threads"] == torch.get_num_threads()
    assert recorded["gpu_count"] == 0 and recorded["gpus"] == [] and recorded["driver"] is None
    assert "gpu_state" not in recorded  # the GPU's state is recorded on CUDA only
    assert recorded["libraries"]["torch"] == torch.__version__  # and every kernel library, installed or None:
    assert {"flash-attn", "flash-attn-4", "xformers", "flashinfer-python", "nvidia-cudnn-frontend"} <= set(
        recorded["libraries"])
    commit = recorded["git_commit"]
    assert commit is None or len(commit.removesuffix("-dirty")) == 40  # this checkout's commit, marked when dirty


def test_auto_is_cuda_only_where_there_is_one_and_cuda_without_one_is_a_user_error() -> None:
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    from attnbench.run.env import cpu_only_torch

    if cpu_only_torch():  # what lets `auto` answer without importing torch is true of this torch
        assert torch.version.cuda is None and not torch.cuda.is_available()
    if not torch.cuda.is_available():
        with pytest.raises(AttnbenchError, match="cuda"):
            resolve_device("cuda")


def test_env_json_names_the_slurm_job_array_task_and_node() -> None:
    assert slurm_job({"SLURM_JOB_ID": "57", "SLURM_ARRAY_JOB_ID": "55", "SLURM_ARRAY_TASK_ID": "2",
                      "SLURMD_NODENAME": "gpu-a17"}) == {"job_id": "57", "array_job_id": "55",
                                                         "array_task_id": "2", "node": "gpu-a17"}
    assert slurm_job({"SLURM_JOB_ID": "9", "SLURMD_NODENAME": "n1"})["array_task_id"] is None
    assert slurm_job({"HOME": "/root"}) is None


def test_env_records_the_library_of_every_registered_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend's `library` is all it takes for env.json to record that library's version (None: not installed)."""
    from attnbench.backends.base import Backend
    from attnbench.backends.registry import default_registry
    from attnbench.run import env as env_mod

    class Fake(Backend):
        name = "fake-kernels-backend"
        library = "fake-kernels"

    monkeypatch.setitem(default_registry()._targets, Fake.name, Fake)
    versions = env_mod.library_versions()
    assert versions["fake-kernels"] is None and versions["torch"] is not None
    assert {"flash-attn", "xformers", "flashinfer-python", "nvidia-cudnn-frontend", "sageattention"} <= set(versions)
