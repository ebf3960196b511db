"""Sharding: a run's measurements split into N deterministic parts of about equal estimated cost, so shard I of N
runs anywhere with no coordination."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnbench.core import counting
from attnbench.core.errors import AttnbenchError

if TYPE_CHECKING:
    from attnbench.backends.base import Backend
    from attnbench.core.case import Case

Task = tuple["Case", "Backend"]
# Backends that materialise the (Sq, Sk) scores move that much more memory per FLOP.
MATERIALISING_FACTOR = 4


@dataclass(frozen=True)
class Shard:
    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not match:
        raise AttnbenchError(f"--shard {text!r}: expected I/N, e.g. 0/4 (I counts from 0)")
    index, count = int(match[1]), int(match[2])
    if count < 1 or not 0 <= index < count:
        raise AttnbenchError(f"--shard {text!r}: I must be in 0..N-1 and N at least 1 (got I={index}, N={count})")
    return Shard(index, count)


def cost(case: Case, backend: Backend) -> int:
    """The case's FLOPs, weighted for backends that materialise scores; never this machine's, so every shard computes
    the same split."""
    if case.device not in backend.capabilities.devices:
        return 1
    return max(1, counting.flops(case)) * (MATERIALISING_FACTOR if backend.materialises_scores else 1)


def assign(tasks: list[Task], count: int) -> list[int]:
    """Greedy longest-processing-time: costliest first, to the lightest shard."""
    order = sorted(range(len(tasks)), key=lambda i: -cost(*tasks[i]))  # stable: ties keep suite order
    loads = [0] * count
    owner = [0] * len(tasks)
    for i in order:
        target = min(range(count), key=lambda s: (loads[s], s))
        owner[i] = target
        loads[target] += cost(*tasks[i])
    return owner


def select(tasks: list[Task], shard: Shard) -> list[Task]:
    """In suite order, so a worker reuses one case's inputs across its backends."""
    owner = assign(tasks, shard.count)
    return [task for task, s in zip(tasks, owner, strict=False) if s == shard.index]
