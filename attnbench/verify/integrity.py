"""Integrity guards on every measured call (docs/conventions.md "Integrity guards"): the work timed is the
work done; a violation is the record's `error`, never a timing."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

JOIN_S = 2.0  # longest wait for threads the call left running
SAMPLE = 4096
_BITS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


@contextmanager
def one_thread() -> Iterator[None]:
    """Waking the intra-op pool costs a time slice on a loaded machine."""
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
    """Any changed element changes it."""
    return int(_bits(t).sum()) if t.numel() else 0


def sign_flipped(t: torch.Tensor) -> torch.Tensor:
    """Exact in every float format; a non-float tensor as it is."""
    if not t.is_floating_point():
        return t
    top = 0x80 if t.element_size() == 1 else -(1 << (8 * t.element_size() - 1))
    return (_bits(t) ^ top).view(t.dtype)


def sample_index(numel: int, device: Any = "cpu") -> torch.Tensor:
    """SAMPLE evenly spread flat positions from the first to the last, in int64
    (float32 is exact below 2^24 only)."""
    import torch

    count = min(SAMPLE, numel)
    if count <= 1:
        return torch.zeros(count, dtype=torch.int64, device=device)
    steps = torch.arange(count, dtype=torch.int64, device=device)
    return steps * (numel - 1) // (count - 1)


def sample(t: torch.Tensor) -> torch.Tensor:
    return t.detach().take(sample_index(t.numel(), t.device))


class Probe:
    """One call on sign-flipped inputs in the timed call's grad mode; in a forward mode, the profiled call."""

    def __init__(self, prepared: Any, leaves: Sequence[torch.Tensor], grad: bool, out: torch.Tensor) -> None:
        self.prepared, self.grad = prepared, grad
        with one_thread():
            self.flipped = [sign_flipped(t.detach()).requires_grad_(t.requires_grad) if t.is_floating_point()
                            else t
                            for t in leaves]
            self.before = sample(out)
        self.result: Any = None

    def __call__(self) -> None:
        import torch

        with torch.set_grad_enabled(self.grad):
            self.result = self.prepared.to_tensor(self.prepared.call(*self.flipped))

    def stale(self) -> bool:
        """Whether other inputs gave the first (nonzero) output again."""
        import torch

        if self.result is None:
            self()
        with one_thread():
            after = sample(self.result)
            return bool(torch.equal(self.before, after)) and bool(self.before.ne(0).any())


def other_inputs(prepared: Any, leaves: Sequence[torch.Tensor], grad: bool,
                 out: torch.Tensor) -> Probe | None:
    if not any(t.is_floating_point() for t in leaves):
        return None
    return Probe(prepared, leaves, grad, out)


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr() if t.numel() else 0


class Guard:
    """One measurement's guards on the inputs and the prepared `leaves` but Prepared.writes."""

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
        """An output changed before threads the call left end (at most JOIN_S) was written late."""
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
            self.deferred = ["the output changed after the call returned: its work ran past the timed call "
                             f"on {len(started)} thread(s) it started"]

    def problems(self, out: torch.Tensor, other: Probe | None) -> list[str]:
        found = list(self.deferred)
        with one_thread():
            found += [f"the call wrote into its input {name} (its checksum changed)"
                      for (name, t), before in zip(self.watched, self.sums, strict=False)
                      if checksum(t) != before]
        if _storage(out) in {_storage(t) for _, t in self.watched} - {0}:
            found.append("the output shares memory with an input")
        if other is not None:
            self.checks.append("new output on other inputs")
            if other.stale():
                found.append("a call on different inputs returned the same output (a stale buffer)")
        return found
