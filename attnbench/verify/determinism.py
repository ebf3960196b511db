"""`deterministic: true` (a suite's top-level option, or `run --deterministic`): PyTorch's deterministic mode around
each measurement, and the words a backend's `Backend.deterministic` answers with.

The mode is `torch.use_deterministic_algorithms(True)` (not warn-only: an operation with no deterministic
implementation raises, and is recorded `skipped` naming it), with `torch.utils.deterministic.fill_uninitialized_memory`
off, since filling every new tensor with NaN would add a write of each output to the timed call. It is set for the
whole measurement (prepare, check, timing), so a compiled backend compiles and runs under the same global state.
On CUDA, cuBLAS is deterministic only with a fixed workspace: `CUBLAS_WORKSPACE_CONFIG=:4096:8` is set for the run
(PyTorch refuses cuBLAS calls in deterministic mode without it) unless the environment already sets it.

A backend says, per case, one of: "honoured (how)", "not applicable (why: forward only, no atomics)", or "refused:
why" — then the measurement is skipped with that reason before any tensor exists (attnbench.run.skip), so a run that
asked for determinism never times a non-deterministic kernel under a record that does not say so.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnbench.core.case import Case

HONOURED = "honoured"
NOT_APPLICABLE = "not applicable"
REFUSED = "refused"
CUBLAS_VARIABLE = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_DETERMINISTIC = ":4096:8"
# PyTorch's words when an operation has no deterministic implementation and the mode is not warn-only.
TORCH_REFUSAL = "does not have a deterministic implementation"


def is_refusal(how: str) -> bool:
    """Whether a backend's answer refuses the mode."""
    return how.startswith(REFUSED)


def use_cublas_workspace() -> None:
    """Fix cuBLAS's workspace for the run (and the workers it starts), before any cuBLAS call."""
    os.environ.setdefault(CUBLAS_VARIABLE, CUBLAS_DETERMINISTIC)


@contextlib.contextmanager
def deterministic_mode(on: bool) -> Iterator[None]:
    """PyTorch's deterministic mode while the block runs (nothing when `on` is false); the previous state after."""
    if not on:
        yield
        return
    import torch
    import torch.utils.deterministic as settings

    was = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
           settings.fill_uninitialized_memory)
    torch.use_deterministic_algorithms(True)
    settings.fill_uninitialized_memory = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was[0], warn_only=was[1])
        settings.fill_uninitialized_memory = was[2]


def torch_ops(case: Case, what: str = "PyTorch's own operations") -> str:
    """The answer of a backend made of PyTorch operations that have deterministic implementations: nothing is needed
    on a CPU; on CUDA the mode and a fixed cuBLAS workspace (an operation without one raises, named in the skip)."""
    if case.device != "cuda":
        return f"{NOT_APPLICABLE} ({what} on a CPU: no atomics)"
    return (f"{HONOURED} ({what} under torch.use_deterministic_algorithms(True), cuBLAS with "
            f"{CUBLAS_VARIABLE}={os.environ.get(CUBLAS_VARIABLE, CUBLAS_DETERMINISTIC)})")
