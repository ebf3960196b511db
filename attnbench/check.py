"""The correctness rule: err(backend) <= 2 * err(naive in the case's dtype) + floor(dtype)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from attnbench.inputs import Answer

# An absolute term so that an exact float32 naive run does not make the bound zero; about 1/10 of
# the dtype's machine epsilon at magnitude 1 for the half types, and well above float32 rounding.
FLOOR = {"float32": 1e-5, "float16": 1e-4, "bfloat16": 1e-3}
NAMES = ("out", "dq", "dk", "dv")


@dataclass(frozen=True)
class Verdict:
    """The outcome of checking one backend's answer; the worst tensor (by error/bound) is reported."""

    passed: bool
    max_abs_error: float
    error_bound: float
    worst: str
    errors: dict[str, float] = field(default_factory=dict)
    bounds: dict[str, float] = field(default_factory=dict)


def max_abs_error(x: torch.Tensor, ref: torch.Tensor) -> float:
    """max |x - ref| over every element; infinite when x holds NaN or Inf anywhere."""
    import torch

    if not torch.isfinite(x).all():
        return float("inf")
    return float((x.to(ref.dtype) - ref).abs().max())


def judge(answer: Answer, ref: Answer, naive: Answer, dtype: str) -> Verdict:
    """Apply the rule to the output and, when the answers carry them, to dq, dk and dv."""
    pairs = [("out", answer.out, ref.out, naive.out)]
    if ref.grads is not None and answer.grads is not None and naive.grads is not None:
        pairs += zip(NAMES[1:], answer.grads, ref.grads, naive.grads)
    errors, bounds = {}, {}
    for name, got, want, low in pairs:
        errors[name] = max_abs_error(got, want)
        bounds[name] = 2 * max_abs_error(low, want) + FLOOR[dtype]
    worst = max(errors, key=lambda n: errors[n] / bounds[n])
    return Verdict(
        passed=all(errors[n] <= bounds[n] for n in errors),
        max_abs_error=errors[worst],
        error_bound=bounds[worst],
        worst=worst,
        errors=errors,
        bounds=bounds,
    )
