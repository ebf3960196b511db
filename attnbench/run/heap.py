"""The run's heap: what it keeps out of garbage collection (frozen_heap), and what it frees between measurements
(release_memory)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

_frozen = 0  # frozen_heap()s open in this process


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep the objects alive before the run (torch, libraries, the plan) out of every garbage collection.

    The runner collects garbage between cases, and with torch imported a full collection is slow. Garbage is
    collected first, so only live objects are frozen; the heap is unfrozen when the outermost one ends.
    """
    global _frozen
    gc.collect()
    gc.freeze()
    _frozen += 1
    try:
        yield
    finally:
        _frozen -= 1
        if not _frozen:
            gc.unfreeze()


def release_memory(device: str, collect: bool = False) -> None:
    """Drop what a finished measurement left behind, so the next one starts from the same state.

    Inside a frozen heap (frozen_heap) what survives a full collection is the run's own state, and it is frozen too,
    so the next collection walks only what was made since."""
    if collect:
        gc.collect()
        if _frozen:  # a flag: gc.get_freeze_count() walks every frozen object
            gc.freeze()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()
