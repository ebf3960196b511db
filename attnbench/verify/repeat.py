"""Repeatability: two calls on the same inputs compared byte for byte (same-bit NaNs equal, ±0.0 not)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from attnbench.verify.check import Verdict

CHUNK = 1 << 24
GRADS_UNCHECKED = ("not compared: the gradients are compared only where they are "
                   "checked (grad_checked is false)")


class KeepFirst:
    """Keeps its first call's result for the comparison after timing."""

    def __init__(self, fn: Callable[[], object]) -> None:
        self.fn = fn
        self.called = False
        self.result: Any = None

    def __call__(self) -> object:
        if self.called:
            return self.fn()
        self.called = True
        self.result = self.fn()
        return self.result


@dataclass(frozen=True)
class Repeat:
    equal: bool
    max_diff: float = 0.0
    tensor: str | None = None


def as_tensors(result: object) -> tuple[torch.Tensor, ...]:
    items = result if isinstance(result, (tuple, list)) else (result,)
    return tuple(t.detach() for t in items)


def aliased(first: Sequence[torch.Tensor], second: Sequence[torch.Tensor]) -> bool:
    """Shared memory: equal by construction."""
    def storage(t: torch.Tensor) -> int:
        return t.untyped_storage().data_ptr() if t.numel() else 0

    mine = {storage(t) for t in first} - {0}
    return any(storage(t) in mine for t in second)


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    return torch.equal(a.detach().contiguous().view(torch.uint8), b.detach().contiguous().view(torch.uint8))


def max_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    """0 for equal values (NaN included); infinite for one NaN or other shapes."""
    if a.shape != b.shape:
        return math.inf
    flat_a, flat_b = a.detach().reshape(-1), b.detach().reshape(-1)
    worst = 0.0
    for start in range(0, flat_a.numel(), CHUNK):
        x, y = flat_a[start:start + CHUNK].double(), flat_b[start:start + CHUNK].double()
        same = (x == y) | (x.isnan() & y.isnan())
        diff = (x - y).abs().masked_fill(same, 0.0).nan_to_num(nan=math.inf)
        worst = max(worst, float(diff.max()))
    return worst


def compare(first: Sequence[torch.Tensor], second: Sequence[torch.Tensor], names: Sequence[str]) -> Repeat:
    differing = [(max_difference(a, b), name) for a, b, name in zip(first, second, names, strict=False)
                 if not bitwise_equal(a, b)]
    if len(first) != len(second):
        differing.append((math.inf, "number of results"))
    if not differing:
        return Repeat(True)
    diff, name = max(differing, key=lambda item: item[0])
    return Repeat(False, diff, name)


def worse(a: Repeat | None, b: Repeat) -> Repeat:
    if a is None or a.equal:
        return b
    if b.equal:
        return a
    return a if a.max_diff >= b.max_diff else b


def repeat_extra(result: Repeat | None, calls: list[str], names: Sequence[str],
                 note: str | None) -> dict[str, Any]:
    if result is None:
        return {"repeat_note": note} if note else {}
    extra: dict[str, Any] = {"repeat_calls": list(calls), "repeat_tensors": list(names)}
    if not result.equal:
        extra.update(repeat_max_diff=result.max_diff if math.isfinite(result.max_diff) else None,
                     repeat_tensor=result.tensor)
    return extra


def finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def summary(verdict: Verdict) -> dict[str, Any]:
    return {"passed": verdict.passed, "max_abs_error": finite(verdict.max_abs_error),
            "error_bound": verdict.error_bound, "worst": verdict.worst}


def judged_extra(judged: list[tuple[str, Verdict]]) -> dict[str, Any]:
    """`agreed`: the mismatch reproduced."""
    extra: dict[str, Any] = {}
    for label, verdict in judged[1:]:
        if label == "second":
            extra["second_check"] = summary(verdict)
        else:
            extra["recheck"] = {**summary(verdict), "agreed": not verdict.passed}
    return extra


def outcome(judged: list[tuple[str, Verdict]]) -> tuple[Verdict, str]:
    """The worst failing judged call, else the checked one; and what the mismatch reason adds."""
    failed = [(label, verdict) for label, verdict in judged if not verdict.passed]
    if not failed:
        return judged[0][1], ""
    label, verdict = max(failed, key=lambda item: item[1].max_abs_error / item[1].error_bound)
    where = "" if label == judged[0][0] else f" on the {label} call"
    others = ", ".join(f"{other} call {'passed' if v.passed else 'failed'}" for other, v in judged
                       if other != label)
    return verdict, where + (f"; {others}" if others else "")
