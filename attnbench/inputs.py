"""Seeded inputs for a case, and the high-precision reference they are checked against."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnbench.backends.naive import naive_attention

if TYPE_CHECKING:
    import torch

    from attnbench.case import Case

# Above these many (batch·head·query·key) pairs the forward check compares a seeded subset of query
# rows and the backward check is skipped: the float64 reference on a CPU costs too much beyond them.
FULL_CHECK_PAIRS = {"cpu": 1 << 24, "cuda": 1 << 32}
SUBSET_ROWS = 256
# Bytes of scores one reference block may hold; keeps the reference's memory bounded at any length.
BLOCK_BYTES = 1 << 28


@dataclass(frozen=True)
class Inputs:
    """The canonical (B, H, S, D) tensors every backend of a case receives, plus the upstream gradient."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    dout: torch.Tensor | None


def dtype_of(name: str) -> torch.dtype:
    import torch

    return getattr(torch, name)


def make_inputs(case: Case) -> Inputs:
    """Standard-normal Q, K, V (and dO for backward modes) in the case's dtype, from the case's seed."""
    import torch

    gen = torch.Generator(device=case.device).manual_seed(case.seed)
    dtype = dtype_of(case.dtype)

    def draw(heads: int, seq: int) -> torch.Tensor:
        shape = (case.batch, heads, seq, case.head_dim)
        return torch.randn(shape, generator=gen, device=case.device, dtype=torch.float32).to(dtype)

    q, k, v = draw(case.heads, case.seq_len), draw(case.kv_heads, case.kv_seq_len), draw(case.kv_heads, case.kv_seq_len)
    dout = draw(case.heads, case.seq_len) if case.needs_grad else None
    return Inputs(q, k, v, dout)


def checked_rows(case: Case) -> torch.Tensor | None:
    """The query rows the forward check compares: None for all of them, else a seeded subset."""
    import torch

    pairs = case.batch * case.heads * case.seq_len * case.kv_seq_len
    if pairs <= FULL_CHECK_PAIRS[case.device] or case.seq_len <= SUBSET_ROWS + 2:
        return None
    gen = torch.Generator().manual_seed(case.seed + 1)
    middle = torch.randperm(case.seq_len - 2, generator=gen)[:SUBSET_ROWS] + 1
    first_last = torch.tensor([0, case.seq_len - 1])  # the rows that see the fewest and the most keys
    return torch.cat([first_last, middle]).sort().values


def grad_checkable(case: Case) -> bool:
    """Whether the backward check runs for this case (it needs the full reference backward)."""
    return case.needs_grad and checked_rows(case) is None


@dataclass(frozen=True)
class Answer:
    """An attention output on the checked rows, and the gradients when a backward check runs."""

    out: torch.Tensor
    grads: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None


def blocked_attention(case: Case, inputs: Inputs, rows: torch.Tensor | None, with_grads: bool) -> Answer:
    """Naive attention on `inputs` as given (any dtype), a block of query rows at a time.

    K/V are broadcast over each KV head's group of query heads, not copied. Memory stays within
    BLOCK_BYTES of scores per block at any sequence length; grads need all rows (`rows` is None).
    """
    import torch

    assert not (with_grads and rows is not None), "gradients need every query row"
    q, k, v = inputs.q, inputs.k, inputs.v
    b, g, kvh = case.batch, case.group_size, case.kv_heads
    elem = q.element_size()
    block = max(1, BLOCK_BYTES // max(1, b * case.heads * case.kv_seq_len * elem))
    row_ids = torch.arange(case.seq_len) if rows is None else rows
    keys = torch.arange(case.kv_seq_len, device=q.device)
    k5, v5 = k.unsqueeze(2), v.unsqueeze(2)  # (B, KVH, 1, Sk, D): one KV head per group
    outs = []
    grads = [torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)] if with_grads else None
    for chunk in row_ids.split(block):
        chunk = chunk.to(q.device)
        qb = q[:, :, chunk].reshape(b, kvh, g, len(chunk), case.head_dim)
        mask = case.allowed(chunk[:, None], keys[None, :]) if case.has_mask else None
        if grads is None:
            with torch.no_grad():
                outs.append(naive_attention(qb, k5, v5, mask).reshape(b, case.heads, len(chunk), case.head_dim))
            continue
        qb, kl, vl = (t.detach().requires_grad_() for t in (qb, k5, v5))
        ob = naive_attention(qb, kl, vl, mask)
        dob = inputs.dout[:, :, chunk].reshape(ob.shape)
        dq, dk, dv = torch.autograd.grad(ob, (qb, kl, vl), dob)
        grads[0][:, :, chunk] = dq.reshape(b, case.heads, len(chunk), case.head_dim)
        grads[1] += dk.squeeze(2)
        grads[2] += dv.squeeze(2)
        outs.append(ob.detach().reshape(b, case.heads, len(chunk), case.head_dim))
    return Answer(torch.cat(outs, dim=2), tuple(grads) if grads is not None else None)


def upcast(inputs: Inputs) -> Inputs:
    """The inputs in the reference's precision: float64 on every device (GUIDE.md's correctness rule).

    An fp32 reference on CUDA would *be* naive in fp32: err(naive) = 0, the bound a bare floor, and a
    correct kernel that computes fp32 on tensor cores (3xTF32) a mismatch at long sequences.
    """
    import torch

    cast = lambda t: None if t is None else t.to(torch.float64)  # noqa: E731
    return Inputs(cast(inputs.q), cast(inputs.k), cast(inputs.v), cast(inputs.dout))


def reference(case: Case, inputs: Inputs, rows: torch.Tensor | None) -> Answer:
    """GUIDE.md's reference: naive attention on the inputs upcast to float64, computed in query blocks."""
    return blocked_attention(case, upcast(inputs), rows, with_grads=grad_checkable(case))
