"""The correctness rule: err(backend) <= 2 * err(naive in the case's dtype) + floor(dtype).

A query row that sees no key (a zero-length document's neighbour, a cache shorter than the queries) is expected
to output zeros, FlashAttention's convention, which the float64 reference follows (attnbench.verify.inputs); a backend
that answers NaN there fails like NaN anywhere, and one that answers a uniform average over masked keys is over
the bound, since naive's own error on such a row is exactly zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# An absolute term so that an exact float32 naive run does not make the bound zero; about 1/10 of
# the dtype's machine epsilon at magnitude 1 for the half types, and well above float32 rounding.
FLOOR = {"float32": 1e-5, "float16": 1e-4, "bfloat16": 1e-3}
NAMES = ("out", "dq", "dk", "dv")
# Naive attention in the case's own dtype off by more than this share of the reference's largest |value|: the dtype
# cannot hold the inputs' arithmetic, and the bound it gives says little about a kernel (the record's
# extra.naive_relative_error; docs/conventions.md "Input distributions").
DTYPE_LIMITED = 0.1


@dataclass(frozen=True)
class Answer:
    """An attention output on the checked rows, and the gradients when a backward check runs."""

    out: torch.Tensor
    grads: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None


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
    """max |x - ref| over every element; infinite when x holds NaN or Inf anywhere (one pass: a NaN or an Inf in
    x makes the difference's maximum NaN or Inf)."""
    value = float((x.to(ref.dtype) - ref).abs().max())
    return value if math.isfinite(value) else math.inf


def relative(error: float, ref: torch.Tensor) -> float | None:
    """`error` over the reference's largest |value| (None for an infinite error: NaN or Inf in the answer)."""
    scale = float(ref.abs().max()) if ref.numel() else 0.0
    if not math.isfinite(error):
        return None
    return error / scale if scale > 0 else 0.0


def naive_errors(ref: Answer, naive: Answer) -> dict[str, float]:
    """err(naive in the case's dtype) per tensor: the same for every backend of a case, so computed once."""
    import torch

    # Our invariant, not a user's error: the reference is finite everywhere (a row with no key is zeros).
    assert all(bool(torch.isfinite(t).all()) for t in (ref.out, *(ref.grads or ()))), "non-finite reference"
    errors = {"out": max_abs_error(naive.out, ref.out)}
    if ref.grads is not None and naive.grads is not None:
        errors.update(zip(NAMES[1:], (max_abs_error(low, want) for low, want in zip(naive.grads, ref.grads, strict=False)), strict=False))
    return errors


def judge(answer: Answer, ref: Answer, naive: Answer, dtype: str,
          naive_err: dict[str, float] | None = None) -> Verdict:
    """Apply the rule to the output and, when the answers carry them, to dq, dk and dv. `naive_err` is
    naive_errors(ref, naive) when the caller keeps it (a case's backends share it)."""
    pairs = [("out", answer.out, ref.out, naive.out)]
    if ref.grads is not None and answer.grads is not None and naive.grads is not None:
        pairs += zip(NAMES[1:], answer.grads, ref.grads, naive.grads, strict=False)
    errors, bounds = {}, {}
    for name, got, want, low in pairs:
        errors[name] = max_abs_error(got, want)
        low_error = naive_err[name] if naive_err is not None and name in naive_err else max_abs_error(low, want)
        bounds[name] = 2 * low_error + FLOOR[dtype]
    worst = max(errors, key=lambda n: errors[n] / bounds[n] if math.isfinite(bounds[n]) else errors[n])
    return Verdict(
        passed=all(math.isfinite(errors[n]) and errors[n] <= bounds[n] for n in errors),
        max_abs_error=errors[worst],
        error_bound=bounds[worst],
        worst=worst,
        errors=errors,
        bounds=bounds,
    )
