"""The correctness rule: err(backend) <= 2 * err(naive in the case's dtype) + floor(dtype) (docs/conventions.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from attnbench.core import policy

if TYPE_CHECKING:
    import torch

FLOOR = policy.ERROR_FLOOR  # keeps an exact float32 naive run from making the bound zero
NAMES = ("out", "dq", "dk", "dv")
DTYPE_LIMITED = policy.DTYPE_LIMITED


@dataclass(frozen=True)
class Answer:
    out: torch.Tensor
    grads: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None


@dataclass(frozen=True)
class Verdict:
    passed: bool
    max_abs_error: float
    error_bound: float
    worst: str
    errors: dict[str, float] = field(default_factory=dict)
    bounds: dict[str, float] = field(default_factory=dict)


def max_abs_error(x: torch.Tensor, ref: torch.Tensor) -> float:
    """Infinite when x holds NaN or Inf."""
    value = float((x.to(ref.dtype) - ref).abs().max())
    return value if math.isfinite(value) else math.inf


def relative(error: float, ref: torch.Tensor) -> float | None:
    """None for an infinite error."""
    scale = float(ref.abs().max()) if ref.numel() else 0.0
    if not math.isfinite(error):
        return None
    return error / scale if scale > 0 else 0.0


def naive_errors(ref: Answer, naive: Answer) -> dict[str, float]:
    """The same for every backend of a case."""
    import torch

    assert all(bool(torch.isfinite(t).all()) for t in (ref.out, *(ref.grads or ()))), "non-finite reference"
    errors = {"out": max_abs_error(naive.out, ref.out)}
    if ref.grads is not None and naive.grads is not None:
        errors.update(zip(NAMES[1:], (max_abs_error(low, want)
                                      for low, want in zip(naive.grads, ref.grads, strict=False)), strict=False))
    return errors


def judge(answer: Answer, ref: Answer, naive: Answer, dtype: str,
          naive_err: dict[str, float] | None = None) -> Verdict:
    """`naive_err`: naive_errors(ref, naive), when kept."""
    pairs = [("out", answer.out, ref.out, naive.out)]
    if ref.grads is not None and answer.grads is not None and naive.grads is not None:
        pairs += zip(NAMES[1:], answer.grads, ref.grads, naive.grads, strict=False)
    errors, bounds = {}, {}
    for name, got, want, low in pairs:
        errors[name] = max_abs_error(got, want)
        low_error = naive_err[name] if naive_err is not None and name in naive_err else max_abs_error(low, want)
        bounds[name] = policy.ERROR_FACTOR * low_error + FLOOR[dtype]
    worst = max(errors, key=lambda n: errors[n] / bounds[n] if math.isfinite(bounds[n]) else errors[n])
    return Verdict(
        passed=all(math.isfinite(errors[n]) and errors[n] <= bounds[n] for n in errors),
        max_abs_error=errors[worst],
        error_bound=bounds[worst],
        worst=worst,
        errors=errors,
        bounds=bounds,
    )
