"""A tiny backend that can be told to raise, run out of memory or answer wrongly — for tests and demos.

Not registered by default; `--plugin attnbench.backends.testing:FAULTY` adds all three.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from attnbench.backends.base import Backend, Prepared
from attnbench.backends.naive import naive_attention

if TYPE_CHECKING:
    import torch

    from attnbench.case import Case


class FaultyBackend(Backend):
    """Naive attention with a planted fault: "raise", "oom", "wrong" (a small error in one element) or "none"."""

    fault: ClassVar[str] = "none"
    name = "faulty"
    summary = "test backend with a planted fault"

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
        import torch

        mask = case.mask(device=q.device)
        group = case.group_size

        def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            if self.fault == "raise":
                raise ValueError("planted failure in the faulty backend")
            if self.fault == "oom":
                raise torch.OutOfMemoryError("planted out of memory in the faulty backend")
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


FAULTY = [Raising, OutOfMemory, Wrong]
