"""What the run keeps out of garbage collection, and what it frees between measurements."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

_frozen = 0  # frozen_heap()s open


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep the objects alive before the run (torch, the plan) out of every collection: with torch imported a full
    collection between cases is slow. Collected first, so only live objects are frozen."""
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
    """Drop what a measurement left behind, so the next starts from the same state. Inside frozen_heap, what
    survives is frozen too, so the next collection walks only what was made since."""
    if collect:
        gc.collect()
        if _frozen:  # gc.get_freeze_count() walks every frozen object
            gc.freeze()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()
