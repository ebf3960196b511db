"""Backends with planted faults, for tests and demos (not registered): `--plugin
attnbench.backends.testing:FAULTY` (raise, out of memory, wrong), `:CRASHING` (hang, exit, segfault: only with
`--isolate`), `:CHEATING` (cheats the integrity guards must catch). """

from __future__ import annotations

import faulthandler
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from attnbench.backends.base import Backend, Prepared
from attnbench.core import workload
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


LOG2E = 1.4426950408889634


class CheatingBackend(Backend):
    """Naive attention with a planted cheat (docs/conventions.md "Integrity guards"): "stale" (the first
    output again), "writes-query" (scales q in place and back, an ulp off), "overflow" (no max subtracted) or
    "side-stream" (the output returned before another stream or thread writes it)."""

    cheat: ClassVar[str] = "stale"
    name = "cheat-stale"
    summary = "test backend with a planted integrity cheat"

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
        mask = workload.mask(case, device=q.device)
        group, scale = case.group_size, case.head_dim ** -0.5
        kept: list[torch.Tensor] = []

        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return naive_attention(q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1),
                                   mask)

        def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            if self.cheat == "stale":
                if not kept:
                    kept.append(attend(q, k, v).detach())
                # the first values, with a graph to every input
                return kept[0] + 0 * (q.sum() + k.sum() + v.sum())
            if self.cheat == "writes-query":
                q.mul_(LOG2E)  # the exp2 form's factor, applied in place and undone after: not exactly
                out = attend(q / LOG2E, k, v)
                q.div_(LOG2E)
                return out
            if self.cheat == "overflow":
                return _unshifted_softmax(q, k.repeat_interleave(group, dim=1),
                                          v.repeat_interleave(group, dim=1), mask, scale)
            return _deferred(attend, q, k, v)

        return Prepared(inputs=(q, k, v), call=call, kernel=f"cheat ({self.cheat})")


def _unshifted_softmax(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                       scale: float) -> torch.Tensor:
    """exp(s)·V / Σexp(s), no maximum subtracted: overflows past the dtype's log(max) (11.1 in fp16)."""
    p = ((q @ k.transpose(-2, -1)) * scale).exp()
    if mask is not None:
        p = p.masked_fill(~mask, 0)
    return (p @ v) / p.sum(dim=-1, keepdim=True)


def _deferred(attend: Callable[..., torch.Tensor], q: torch.Tensor, k: torch.Tensor,
              v: torch.Tensor) -> torch.Tensor:
    """The attention written into a fresh output after the call returns (a CUDA side stream, or a thread)."""
    import threading

    import torch

    out = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype, device=q.device)
    if q.is_cuda:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(1 << 22)  # ~ms of spinning, so the work lands after the timed stream's events
            out.copy_(attend(q, k, v))
        return out

    def work() -> None:
        time.sleep(0.05)
        out.copy_(attend(q, k, v))

    threading.Thread(target=work, daemon=True).start()
    return out


class StaleOutput(CheatingBackend):
    name = "cheat-stale"
    cheat = "stale"


class WritesQuery(CheatingBackend):
    name = "cheat-writes-query"
    cheat = "writes-query"


class Overflows(CheatingBackend):
    name = "cheat-overflow"
    cheat = "overflow"


class SideStream(CheatingBackend):
    name = "cheat-side-stream"
    cheat = "side-stream"


CHEATING = [StaleOutput, WritesQuery, Overflows, SideStream]
