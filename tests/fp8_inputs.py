"""Inputs for the FP8 stand-in tests whose descale factors differ: every (batch row, head) of Q, K and V scaled by its
own power of two, K and V by different ones. Standard-normal inputs give every granule nearly the same amax, so a
swapped or doubled factor would barely move the output; with these, each wrong mapping is far over the bound."""

from __future__ import annotations

from typing import Any

import torch

import attnbench.quant_data as quant_data
from attnbench.inputs import Inputs


def head_factors(batch: int, heads: int, base: float, device: Any) -> torch.Tensor:
    """(batch, heads, 1, 1): base · 2^((b + 2h) mod 3 − 1), one of base/2, base, 2·base per (row, head) (wide
    enough to tell factors apart, narrow enough not to saturate the softmax)."""
    b = torch.arange(batch)[:, None]
    h = torch.arange(heads)[None, :]
    return (base * 2.0 ** (((b + 2 * h) % 3) - 1)).to(device)[..., None, None]


def distinct_scales(monkeypatch: Any) -> None:
    """Make every quantized case's originals scaled per (row, head), at base 1 for Q and K and 4 for V."""
    real = quant_data.make_inputs

    def scaled(case: Any) -> Inputs:
        i = real(case)
        factor = lambda t, base: (t.float() * head_factors(t.shape[0], t.shape[1], base, t.device)).to(t.dtype)  # noqa: E731
        return Inputs(factor(i.q, 1.0), factor(i.k, 1.0), factor(i.v, 4.0), i.dout)

    monkeypatch.setattr(quant_data, "make_inputs", scaled)
