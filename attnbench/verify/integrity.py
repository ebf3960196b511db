"""Integrity guards on every measured call (docs/conventions.md "Integrity guards"): the work timed is the work done.

A kernel can return a right answer and still be timed on work it did not do: it hands back a buffer from an earlier
call, writes into its inputs, or leaves its work running on another thread past the call's return. `Guard` watches
one measurement: checksums of every input before its first call and after its last, the output's fingerprint at the
call's return and once the threads the call started have ended, the output's storage against the inputs', and one
more call on different inputs (every floating input with its sign flipped: the output must change). A violation is
the record's `error`, with the reason, never a timing. Work queued on another CUDA stream is seen by the profiler
(attnbench.timing.profile.foreign_streams).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    import torch

# How long the guard waits, at most, for threads the checked call started and left running.
JOIN_S = 2.0
# The integer dtype of each element size: a tensor's raw bits, read without a copy.
_BITS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}
CHUNK = 1 << 24  # elements a checksum sums at a time


def _bits(t: torch.Tensor) -> torch.Tensor:
    import torch

    return t.detach().view(getattr(torch, _BITS[t.element_size()]))


def checksum(t: torch.Tensor) -> int:
    """The sum of a tensor's raw bits as integers: any write of a different value to one element changes it. A
    contiguous tensor is summed in chunks, so the int64 temporaries stay small."""
    import torch

    bits = _bits(t)
    if not bits.is_contiguous():
        return int(torch.sum(bits, dtype=torch.int64))
    return sum(int(torch.sum(part, dtype=torch.int64)) for part in bits.reshape(-1).split(CHUNK))


def sign_flipped(t: torch.Tensor) -> torch.Tensor:
    """A new tensor: `t` with every element's sign bit flipped (exact in every float format, FP8 included); a
    non-float tensor (lengths, page tables) is returned as it is."""
    if not t.is_floating_point():
        return t
    top = 0x80 if t.element_size() == 1 else -(1 << (8 * t.element_size() - 1))
    return (_bits(t) ^ top).view(t.dtype)


def again(prepared: Any, leaves: Sequence[torch.Tensor], grad: bool) -> Callable[[], torch.Tensor] | None:
    """One call of the backend on its inputs sign-flipped, for the stale-output guard, in the timed call's grad mode
    (a compiled backend guards on it: another mode would compile again); None where the call takes no floating
    input (a runtime whose inputs are placed in `prepare`): there is nothing to change."""
    import torch

    if not any(t.is_floating_point() for t in leaves):
        return None
    flipped = [sign_flipped(t.detach()).requires_grad_(t.requires_grad) if t.is_floating_point() else t
               for t in leaves]

    def call() -> torch.Tensor:
        with torch.set_grad_enabled(grad):
            return prepared.to_tensor(prepared.call(*flipped)).detach()

    return call


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr() if t.numel() else 0


class Guard:
    """One measurement's guards. `watched`: every tensor the backend can reach (the case's inputs, its prepared
    inputs); `names`: what a reason calls each."""

    def __init__(self, watched: Sequence[torch.Tensor], names: Sequence[str]) -> None:
        self.watched = [(name, t) for name, t in zip(names, watched) if t is not None]
        self.sums = [checksum(t) for _, t in self.watched]
        self.threads = set(threading.enumerate())
        self.deferred: list[str] = []
        self.checks = ["inputs unchanged", "output not an input", "no work after return"]

    def returned(self, out: torch.Tensor) -> None:
        """Right after the checked call returns: the output's checksum, then again once the threads the call started
        have ended (at most JOIN_S): an output that changed in between was written after the call returned."""
        at_return = checksum(out)
        started = [t for t in threading.enumerate() if t not in self.threads and t.is_alive()]
        deadline = time.perf_counter() + JOIN_S
        for thread in started:
            thread.join(max(0.0, deadline - time.perf_counter()))
        if checksum(out) != at_return:
            running = f" on {len(started)} thread(s) it started" if started else ""
            self.deferred = [f"the output changed after the call returned: its work ran past the timed call{running}"]

    def problems(self, out: torch.Tensor, again: Callable[[], torch.Tensor] | None) -> list[str]:
        """Every violation, after the last call: deferred work, written inputs, an aliased output, and (where
        `again`, one call on other inputs, is given) a stale one."""
        found = list(self.deferred)
        found += [f"the call wrote into its input {name} (its checksum changed)"
                  for (name, t), before in zip(self.watched, self.sums) if checksum(t) != before]
        if _storage(out) in {_storage(t) for _, t in self.watched} - {0}:
            found.append("the output shares memory with an input")
        if again is not None:
            found += stale(out, again)
            self.checks.append("new output on other inputs")
        return found


def stale(out: torch.Tensor, again: Callable[[], Any]) -> list[str]:
    """One call on every floating input sign-flipped: attention's output then flips sign too, so an output equal to
    the first call's is a stale buffer; a NaN or Inf where the first output had none fails as well."""
    import torch

    before = out.detach().clone()
    other = again()
    if before.numel() and torch.equal(other, before) and bool(before.ne(0).any()):
        return ["a call on different inputs returned the same output (a stale buffer)"]
    if bool(torch.isfinite(before).all()) and not bool(torch.isfinite(other).all()):
        return ["a call on different (sign-flipped) inputs holds NaN or Inf where the first call's output has none"]
    return []
