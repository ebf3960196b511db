"""A tiny backend that can be told to raise, run out of memory or answer wrongly — for tests and demos.

Not registered by default; `--plugin attnbench.backends.testing:FAULTY` adds those three.
`--plugin attnbench.backends.testing:CRASHING` adds faults that take the whole process with them
(hang, exit, segfault): run those only with `--isolate`, where a worker process absorbs them.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import time
from typing import TYPE_CHECKING, Callable, ClassVar

from attnbench.core import workload
from attnbench.backends.base import Backend, Prepared
from attnbench.verify.inputs import naive_attention

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case


class FaultyBackend(Backend):
    """Naive attention with a planted fault: "raise", "oom", "wrong" (a small error in one element),
    "hang" (sleeps for an hour), "exit" (the process exits with code 3), "segfault" or "none"."""

    fault: ClassVar[str] = "none"
    name = "faulty"
    summary = "test backend with a planted fault"

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
        import torch

        mask = workload.mask(case, device=q.device)
        group = case.group_size

        def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            if self.fault == "raise":
                raise ValueError("planted failure in the faulty backend")
            if self.fault == "oom":
                raise torch.OutOfMemoryError("planted out of memory in the faulty backend")
            if self.fault in PROCESS_FAULTS:
                PROCESS_FAULTS[self.fault]()
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            out = naive_attention(q, k, v, mask)
            if self.fault == "wrong":
                out = out + torch.nn.functional.pad(torch.ones(1, dtype=out.dtype, device=out.device),
                                                    (0, out.numel() - 1)).view_as(out) * 0.01
            return out

        return Prepared(inputs=(q, k, v), call=call, kernel=f"faulty ({self.fault})")


class Raising(FaultyBackend):
    name = "faulty-raise"
    fault = "raise"


class OutOfMemory(FaultyBackend):
    name = "faulty-oom"
    fault = "oom"


class Wrong(FaultyBackend):
    name = "faulty-wrong"
    fault = "wrong"


def _hang() -> None:
    time.sleep(3600)


def _exit() -> None:
    print("planted exit in the faulty backend", file=sys.stderr, flush=True)
    os._exit(EXIT_CODE)


def _segfault() -> None:
    print("planted segmentation fault in the faulty backend", file=sys.stderr, flush=True)
    faulthandler._sigsegv()  # CPython's own way to raise SIGSEGV for tests


EXIT_CODE = 3
PROCESS_FAULTS: dict[str, Callable[[], None]] = {"hang": _hang, "exit": _exit, "segfault": _segfault}


class Hanging(FaultyBackend):
    name = "faulty-hang"
    fault = "hang"


class Exiting(FaultyBackend):
    name = "faulty-exit"
    fault = "exit"


class Segfaulting(FaultyBackend):
    name = "faulty-segfault"
    fault = "segfault"


FAULTY = [Raising, OutOfMemory, Wrong]
CRASHING = [Hanging, Exiting, Segfaulting]
