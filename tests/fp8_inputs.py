"""Inputs for the FP8 stand-in tests whose descale factors differ: every (batch row, head) of Q, K and V scaled by its
own power of two, K and V by different ones. Standard-normal inputs give every granule nearly the same amax, so a
swapped or doubled factor would barely move the output; with these, each wrong mapping is far over the bound."""

from __future__ import annotations

from typing import Any

import torch

import attnbench.verify.quant_data as quant_data
from attnbench.verify.inputs import Inputs


def head_factors(batch: int, heads: int, base: float, device: Any) -> torch.Tensor:
    """(batch, heads, 1, 1): base · 2^((b + 2h) mod 3 − 1), one of base/2, base, 2·base per (row, head) (wide
    enough to tell factors apart, narrow enough not to saturate the softmax)."""
    b = torch.arange(batch)[:, None]
    h = torch.arange(heads)[None, :]
    return (base * 2.0 ** (((b + 2 * h) % 3) - 1)).to(device)[..., None, None]


def block_factors(seq: int, block: int, device: Any) -> torch.Tensor:
    """(1, 1, seq, 1): 2^((s // block) mod 3 − 1), a different power of two for neighbouring blocks of tokens."""
    return (2.0 ** ((torch.arange(seq) // block) % 3 - 1)).to(device)[None, None, :, None]


def distinct_scales(monkeypatch: Any, block: int | None = None) -> None:
    """Make every quantized case's originals scaled per (row, head), at base 1 for Q and K and 4 for V, and with
    `block`, per block of that many tokens too."""
    real = quant_data.make_inputs

    def factor(t: torch.Tensor, base: float) -> torch.Tensor:
        f = head_factors(t.shape[0], t.shape[1], base, t.device)
        if block:
            f = f * block_factors(t.shape[2], block, t.device)
        return (t.float() * f).to(t.dtype)

    def scaled(case: Any) -> Inputs:
        i = real(case)
        return Inputs(factor(i.q, 1.0), factor(i.k, 1.0), factor(i.v, 4.0), i.dout)

    monkeypatch.setattr(quant_data, "make_inputs", scaled)
