"""Error metrics, and the emulation of a kernel's declared numerics that bounds its error: its rounding
points, not its tiling."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from attnbench.core import workload
from attnbench.verify.inputs import BLOCK_BYTES, Answer

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case
    from attnbench.core.quant import Numerics

METRICS = ("max_abs", "rel_l2", "cosine")
# SageAttention 1.0.6: per_block_int8 (quant_per_block.py: BLKQ=128, BLKK=64); P·V per BLOCK_N=64 keys in fp16
SAGE_BLOCK_Q, SAGE_BLOCK_K = 128, 64
LOG2E = 1.44269504  # sageattn's sm_scale factor (quant_per_block.py)


def metrics(x: torch.Tensor, ref: torch.Tensor) -> dict[str, float]:
    """NaN or Inf in x: inf, inf, 0."""
    import torch

    a, b = x.detach().to(torch.float64).flatten(), ref.detach().to(torch.float64).flatten()
    diff = a - b
    if not bool(torch.isfinite(a).all()):
        return {"max_abs": math.inf, "rel_l2": math.inf, "cosine": 0.0}
    ref_norm, x_norm = float(b.norm()), float(a.norm())
    diff_norm = float(diff.norm())
    if ref_norm > 0:
        rel = diff_norm / ref_norm
    else:
        rel = 0.0 if diff_norm == 0 else math.inf
    cosine = float(a @ b) / (x_norm * ref_norm) if x_norm > 0 and ref_norm > 0 else float(x_norm == ref_norm)
    return {"max_abs": float(diff.abs().max()) if diff.numel() else 0.0, "rel_l2": rel, "cosine": cosine}


def round_to(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """FP8 saturated, as a kernel's conversion does."""
    import torch

    from attnbench.core.quant import FP8_MAX

    if fmt in FP8_MAX:
        x = x.clamp(-FP8_MAX[fmt], FP8_MAX[fmt])
    return x.to(getattr(torch, fmt)).to(x.dtype)


def sage_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What sageattn 1.0.6 multiplies (core.py, quant_per_block.py), in float64;
    ×ln 2 in Q for a natural softmax."""
    import torch

    k = k - k.float().mean(dim=2, keepdim=True).to(k.dtype)  # `k -= km`

    def int8_blocks(x: torch.Tensor, rows: int, factor: float) -> torch.Tensor:
        b, h, s, d = x.shape
        pad = (-s) % rows
        xf = torch.nn.functional.pad(x.float() * factor, (0, 0, 0, pad)).reshape(b, h, -1, rows, d)
        f = xf.abs().amax(dim=(-1, -2), keepdim=True) / 127.0
        f = torch.where(f > 0, f, torch.ones_like(f))
        scaled = xf / f
        stored = (scaled + 0.5 * torch.where(scaled >= 0, 1.0, -1.0)).trunc()  # .to(tl.int8) truncates
        return (stored.double() * f.double()).reshape(b, h, -1, d)[:, :, :s]

    q_values = int8_blocks(q, SAGE_BLOCK_Q, scale * LOG2E) * math.log(2.0)
    return q_values, int8_blocks(k, SAGE_BLOCK_K, 1.0), v.to(torch.float16).double()


def emulate(case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, numerics: Numerics,
            rows: torch.Tensor | None, score_scale: float, v_after: float | None = None) -> Answer:
    """`v_after`: V's descale on the rounded output (FlashInfer's `out *= v_scale`)."""
    import torch

    acc = getattr(torch, numerics.accumulate)
    acc = torch.float32 if acc == torch.float16 else acc  # fp16: per block in _pv
    out_dtype = getattr(torch, numerics.out_dtype)
    b, g, kvh, dv = case.batch, case.group_size, case.kv_heads, case.v_dim
    k_acc, v_acc = k.to(acc).unsqueeze(2), v.to(acc).unsqueeze(2)
    block = max(1, BLOCK_BYTES // max(1, b * case.heads * case.kv_seq_len * 8))
    row_ids = torch.arange(case.seq_len) if rows is None else rows
    outs = []
    for chunk in row_ids.split(block):
        chunk = chunk.to(q.device)
        qb = q[:, :, chunk].to(acc).reshape(b, kvh, g, len(chunk), case.head_dim)
        s = (qb @ k_acc.transpose(-2, -1)) * score_scale
        if case.softcap is not None:
            s = s.div(case.softcap).tanh().mul(case.softcap)
        bias = workload.alibi_bias(case, chunk, chunk.device, acc)
        if bias is not None:
            s = s + bias.reshape(bias.shape[0], kvh, g, *bias.shape[2:])
        keep = workload.visibility(case, chunk, chunk.device)
        if keep is not None:
            s = s.masked_fill(~keep[:, None, None], float("-inf"))
        top = s.amax(dim=-1, keepdim=True)
        p = torch.exp(s - torch.where(torch.isfinite(top), top, torch.zeros_like(top)))
        total = p.sum(dim=-1, keepdim=True)
        if numerics.p_format is not None:
            p = round_to(p * numerics.p_scale, numerics.p_format) / numerics.p_scale
        o = _pv(p, v_acc, numerics)
        o = torch.where(total > 0, o / total.clamp_min(torch.finfo(acc).tiny), torch.zeros_like(o))
        o = o.to(out_dtype)
        if v_after is not None:
            o = (o.float() * v_after).to(out_dtype)
        outs.append(o.reshape(b, case.heads, len(chunk), dv))
    return Answer(torch.cat(outs, dim=2), None)


def _pv(p: torch.Tensor, v: torch.Tensor, numerics: Numerics) -> torch.Tensor:
    import torch

    if numerics.pv_block is None and numerics.accumulate != "float16":
        return p @ v
    step = numerics.pv_block or p.shape[-1]
    acc16 = getattr(torch, numerics.accumulate)
    total = torch.zeros(*p.shape[:-1], v.shape[-1], dtype=p.dtype, device=p.device)
    for start in range(0, p.shape[-1], step):
        part = p[..., start:start + step] @ v[..., start:start + step, :]
        total = total + part.to(acc16).to(p.dtype)
    return total
