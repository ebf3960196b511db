"""`deterministic: true` (docs/suites.md "Deterministic kernels"): PyTorch's deterministic mode, and the words
of a backend's answer."""

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
TORCH_REFUSAL = "does not have a deterministic implementation"


def is_refusal(how: str) -> bool:
    return how.startswith(REFUSED)


def use_cublas_workspace() -> None:
    """Deterministic mode refuses cuBLAS without a fixed workspace."""
    os.environ.setdefault(CUBLAS_VARIABLE, CUBLAS_DETERMINISTIC)


@contextlib.contextmanager
def deterministic_mode(on: bool) -> Iterator[None]:
    """fill_uninitialized_memory off: it would add a write to the timed call."""
    if not on:
        yield
        return
    import torch
    import torch.utils.deterministic as settings

    was = (torch.are_deterministic_algorithms_enabled(),
           torch.is_deterministic_algorithms_warn_only_enabled(), settings.fill_uninitialized_memory)
    torch.use_deterministic_algorithms(True)
    settings.fill_uninitialized_memory = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was[0], warn_only=was[1])
        settings.fill_uninitialized_memory = was[2]


def torch_ops(case: Case, what: str = "PyTorch's own operations") -> str:
    if case.device != "cuda":
        return f"{NOT_APPLICABLE} ({what} on a CPU: no atomics)"
    return (f"{HONOURED} ({what} under torch.use_deterministic_algorithms(True), cuBLAS with "
            f"{CUBLAS_VARIABLE}={os.environ.get(CUBLAS_VARIABLE, CUBLAS_DETERMINISTIC)})")
