"""Integrity guards on every measured call (docs/conventions.md "Integrity guards"): the work timed is the work done.

A kernel can return a right answer and still be timed on work it did not do: it hands back a buffer from an earlier
call, writes into its inputs, or leaves its work running on another thread past the call's return. `Guard` watches
one measurement: checksums of every input before its first call and after its last, the output's checksum at the
call's return and once the threads the call started have ended, the output's storage against the inputs', and one
call on different inputs (`Probe`: every floating input with its sign flipped, so the output must change; in a
forward mode it is the profiled call, which is made anyway). A violation is the record's `error`, with the reason,
never a timing. Work queued on another CUDA stream is seen by the profiler
(attnbench.timing.profile.foreign_streams). Each check is a handful of tensor operations, whatever the case's size:
on a loaded CPU every operation costs its thread pool's wake-up, so their number is what the guards cost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# How long the guard waits, at most, for threads the checked call started and left running.
JOIN_S = 2.0
# Output elements the stale-output check compares, spread evenly over the output.
SAMPLE = 4096
# The integer dtype of each element size: a tensor's raw bits, read without a copy.
_BITS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


@contextmanager
def one_thread() -> Iterator[None]:
    """PyTorch's CPU work on this thread alone for a guard's few small operations: each would otherwise wake the
    intra-op pool, which on a loaded machine waits for a time slice (2.4 ms a checksum on quick, against 0.05 ms)."""
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
    """The sum of a tensor's raw bits as integers (accumulated in int64): any write of a different value to one
    element changes it."""
    return int(_bits(t).sum()) if t.numel() else 0


def sign_flipped(t: torch.Tensor) -> torch.Tensor:
    """A new tensor: `t` with every element's sign bit flipped (exact in every float format, FP8 included); a
    non-float tensor (lengths, page tables) is returned as it is."""
    if not t.is_floating_point():
        return t
    top = 0x80 if t.element_size() == 1 else -(1 << (8 * t.element_size() - 1))
    return (_bits(t) ^ top).view(t.dtype)


def sample(t: torch.Tensor) -> torch.Tensor:
    """Up to SAMPLE elements of `t`, spread evenly in its logical order, as a new tensor."""
    import torch

    index = torch.linspace(0, t.numel() - 1, min(SAMPLE, t.numel()), device=t.device).long()
    return t.detach().take(index)


class Probe:
    """One call of the backend on its inputs sign-flipped, in the timed call's grad mode (a compiled backend guards
    on it: another mode would compile again). The checked call's output is sampled when the probe is made, so a
    backend that reuses one buffer is compared with what that buffer held; the call itself does nothing else, since
    a forward's probe is its profiled call, whose every operation is counted as the kernel's."""

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
        """Whether the call on other inputs returned the first output (a nonzero one) again."""
        import torch

        if self.result is None:
            self()
        with one_thread():
            after = sample(self.result)
            return bool(torch.equal(self.before, after)) and bool(self.before.ne(0).any())


def other_inputs(prepared: Any, leaves: Sequence[torch.Tensor], grad: bool, out: torch.Tensor) -> Probe | None:
    """The stale-output probe, or None where the call takes no floating input (a runtime whose inputs are placed in
    `prepare`): there is nothing to change."""
    if not any(t.is_floating_point() for t in leaves):
        return None
    return Probe(prepared, leaves, grad, out)


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr() if t.numel() else 0


class Guard:
    """One measurement's guards, on every tensor the backend can reach: the case's inputs (`canonical`: q, k, v) and
    its prepared ones (`leaves`) but those it declares it writes by design (`writes`, Prepared.writes); one that views
    another with the same layout is checked once."""

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
        """Right after the checked call returns: where it left threads of its own running, the output's checksum now
        and once they have ended (at most JOIN_S): an output that changed in between was written after the return."""
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
        """Every violation, after the last call: deferred work, written inputs, an aliased output, and (where the
        probe is given) a stale one."""
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
