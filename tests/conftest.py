"""Shared test helpers: a fast runner, a case factory, and the `gpu` marker's skip."""

from __future__ import annotations

import pytest

from attnbench.backends.base import Backend
from attnbench.case import Case
from attnbench.results import Record
from attnbench.runner import CaseData, RunInfo, Runner
from attnbench.timing import TimingSettings, timer_for

ONE_SAMPLE = TimingSettings(warmup_ms=0, budget_ms=0, min_samples=1, max_samples=1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run scripts/gpu-check.sh on one)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def make_case(**overrides: object) -> Case:
    """A small CPU case; any field can be overridden."""
    fields: dict[str, object] = dict(device="cpu", dtype="float32", batch=1, seq_len=64, kv_seq_len=None, heads=4,
                                     kv_heads=4, head_dim=32, causal=False, window=None, mode="fwd")
    fields.update(overrides)
    if fields["kv_seq_len"] is None:
        fields["kv_seq_len"] = fields["seq_len"]
    return Case(**fields)  # type: ignore[arg-type]


def measure(case: Case, backend: Backend, data: CaseData | None = None) -> Record:
    """One measurement with a single timed sample, on the case's device's own timer (CUDA events on a GPU)."""
    runner = Runner(RunInfo("test", "test"), timer_for(case.device), ONE_SAMPLE)
    return runner.measure(data or CaseData(case), backend)
