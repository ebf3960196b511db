"""Integrity guards on every measured call (docs/conventions.md "Integrity guards"): the work timed is the work done.
A violation is the record's `error`, never a timing. Each check is a handful of tensor operations, whatever the size.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

JOIN_S = 2.0  # longest wait for threads the checked call left running
SAMPLE = 4096  # output elements the stale-output check compares
_BITS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}  # raw bits without a copy


@contextmanager
def one_thread() -> Iterator[None]:
    """Torch's CPU work on this thread alone: waking the intra-op pool costs a time slice on a loaded machine."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _bits(t: torch.Tensor) -> torch.Tensor:
    import torch

    return t.detach().view(getattr(torch, _BITS[t.element_size()]))


def checksum(t: torch.Tensor) -> int:
    """The sum of a tensor's raw bits: any changed element changes it."""
    return int(_bits(t).sum()) if t.numel() else 0


def sign_flipped(t: torch.Tensor) -> torch.Tensor:
    """`t` with every sign bit flipped (exact in every float format); a non-float tensor as it is."""
    if not t.is_floating_point():
        return t
    top = 0x80 if t.element_size() == 1 else -(1 << (8 * t.element_size() - 1))
    return (_bits(t) ^ top).view(t.dtype)


def sample(t: torch.Tensor) -> torch.Tensor:
    """Up to SAMPLE elements, evenly spread, as a new tensor."""
    import torch

    index = torch.linspace(0, t.numel() - 1, min(SAMPLE, t.numel()), device=t.device).long()
    return t.detach().take(index)


class Probe:
    """One call on the inputs sign-flipped, in the timed call's grad mode (no recompile). The checked output is
    sampled now, so a reused buffer is caught; in a forward mode this is the profiled call."""

    def __init__(self, prepared: Any, leaves: Sequence[torch.Tensor], grad: bool, out: torch.Tensor) -> None:
        self.prepared, self.grad = prepared, grad
        with one_thread():
            self.flipped = [sign_flipped(t.detach()).requires_grad_(t.requires_grad) if t.is_floating_point() else t
                            for t in leaves]
            self.before = sample(out)
        self.result: Any = None

    def __call__(self) -> None:
        import torch

        with torch.set_grad_enabled(self.grad):
            self.result = self.prepared.to_tensor(self.prepared.call(*self.flipped))

    def stale(self) -> bool:
        """Whether the call on other inputs returned the first (nonzero) output again."""
        import torch

        if self.result is None:
            self()
        with one_thread():
            after = sample(self.result)
            return bool(torch.equal(self.before, after)) and bool(self.before.ne(0).any())


def other_inputs(prepared: Any, leaves: Sequence[torch.Tensor], grad: bool, out: torch.Tensor) -> Probe | None:
    """None where the call takes no floating input: nothing to change."""
    if not any(t.is_floating_point() for t in leaves):
        return None
    return Probe(prepared, leaves, grad, out)


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr() if t.numel() else 0


class Guard:
    """One measurement's guards on the inputs (`canonical`) and the prepared `leaves` but those it writes by design
    (Prepared.writes); views with one layout are checked once."""

    def __init__(self, canonical: Sequence[torch.Tensor], leaves: Sequence[torch.Tensor],
                 writes: Sequence[int] = ()) -> None:
        named = [*zip(("q", "k", "v"), canonical, strict=False),
                 *((f"{i} of the prepared", t) for i, t in enumerate(leaves) if i not in writes)]
        seen: set[tuple[Any, ...]] = set()
        self.watched = []
        for name, t in named:
            key = (t.data_ptr(), t.dtype, tuple(t.shape), t.stride())
            if key not in seen:
                seen.add(key)
                self.watched.append((name, t))
        with one_thread():
            self.sums = [checksum(t) for _, t in self.watched]
        self.threads = set(threading.enumerate())
        self.deferred: list[str] = []
        self.checks = ["inputs unchanged", "output not an input", "no work after return"]

    def returned(self, out: torch.Tensor) -> None:
        """Where the call left threads running, an output changed before they end (at most JOIN_S) was written late."""
        started = [t for t in threading.enumerate() if t not in self.threads and t.is_alive()]
        if not started:
            return
        with one_thread():
            at_return = checksum(out)
        deadline = time.perf_counter() + JOIN_S
        for thread in started:
            thread.join(max(0.0, deadline - time.perf_counter()))
        with one_thread():
            changed = checksum(out) != at_return
        if changed:
            self.deferred = ["the output changed after the call returned: its work ran past the timed call on "
                             f"{len(started)} thread(s) it started"]

    def problems(self, out: torch.Tensor, other: Probe | None) -> list[str]:
        """Every violation after the last call."""
        found = list(self.deferred)
        with one_thread():
            found += [f"the call wrote into its input {name} (its checksum changed)"
                      for (name, t), before in zip(self.watched, self.sums, strict=False) if checksum(t) != before]
        if _storage(out) in {_storage(t) for _, t in self.watched} - {0}:
            found.append("the output shares memory with an input")
        if other is not None:
            self.checks.append("new output on other inputs")
            if other.stale():
                found.append("a call on different inputs returned the same output (a stale buffer)")
        return found
