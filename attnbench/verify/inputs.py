"""Seeded inputs, and the float64 reference they are checked against."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from attnbench.core import workload
from attnbench.verify import distributions, vml
from attnbench.verify.check import Answer, naive_errors  # noqa: F401 - Answer: the rule judges it

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case

# above these pairs: a seeded subset of rows, no backward check
FULL_CHECK_PAIRS = {"cpu": 1 << 24, "cuda": 1 << 32}
SUBSET_ROWS = 256
BLOCK_BYTES = 1 << 28


@dataclass(frozen=True)
class Inputs:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    dout: torch.Tensor | None
    params: dict[str, Any] = field(default_factory=dict, compare=False)


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                    softcap: float | None = None, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Scale, soft-cap, ALiBi, mask (docs/conventions.md); a row that sees no key outputs zeros, never NaN."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if softcap is not None:
        scores = scores.div(softcap).tanh().mul(softcap)
    if bias is not None:
        scores = scores + bias
    if mask is None:
        return scores.softmax(dim=-1) @ v
    seen = mask.any(dim=-1, keepdim=True)
    scores = scores.masked_fill(~mask & seen, float("-inf"))
    return (scores.softmax(dim=-1) @ v) * seen


def dtype_of(name: str) -> torch.dtype:
    import torch

    return getattr(torch, name)


def make_inputs(case: Case) -> Inputs:
    """Settles VML's dispatch first (verify.vml)."""
    import torch

    vml.warm()
    gen = torch.Generator(device=case.device).manual_seed(case.seed)
    dtype = dtype_of(case.dtype)

    def draw(heads: int, seq: int, dim: int) -> torch.Tensor:
        shape = (case.batch, heads, seq, dim)
        return torch.randn(shape, generator=gen, device=case.device, dtype=torch.float32)

    q, k = draw(case.heads, case.seq_len, case.head_dim), draw(case.kv_heads, case.kv_seq_len, case.head_dim)
    v = None if case.kv_shared else draw(case.kv_heads, case.kv_seq_len, case.v_dim)
    dout = draw(case.heads, case.seq_len, case.v_dim).to(dtype) if case.needs_grad else None
    (q, k, v), params = distributions.transform(case, q, k, v)
    q, k = q.to(dtype), k.to(dtype)
    v = k[..., :case.v_dim].clone() if v is None else v.to(dtype)
    return Inputs(q, k, v, dout, params)


def checked_rows(case: Case) -> torch.Tensor | None:
    """None for all rows."""
    import torch

    pairs = case.batch * case.heads * case.seq_len * case.kv_seq_len
    if pairs <= FULL_CHECK_PAIRS[case.device] or case.seq_len <= SUBSET_ROWS + 2:
        return None
    gen = torch.Generator().manual_seed(case.seed + 1)
    middle = torch.randperm(case.seq_len - 2, generator=gen)[:SUBSET_ROWS] + 1
    first_last = torch.tensor([0, case.seq_len - 1])
    return torch.cat([first_last, middle]).sort().values


def grad_checkable(case: Case) -> bool:
    return case.needs_grad and checked_rows(case) is None


def blocked_attention(case: Case, inputs: Inputs, rows: torch.Tensor | None, with_grads: bool) -> Answer:
    """Naive attention on `inputs` as given, in blocks of query rows; pages round-trip outside any timing."""
    import torch

    assert not (with_grads and rows is not None), "gradients need every query row"
    q, k, v = inputs.q, inputs.k, inputs.v
    b, g, kvh, dv = case.batch, case.group_size, case.kv_heads, case.v_dim
    elem = q.element_size()
    block = max(1, BLOCK_BYTES // max(1, b * case.heads * case.kv_seq_len * elem))
    row_ids = torch.arange(case.seq_len) if rows is None else rows
    outs = []
    grads = [torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)] if with_grads else None
    if grads is None:
        with torch.no_grad():
            k_seen, v_seen = paged_round_trip(case, k, v)
    for chunk in row_ids.split(block):
        chunk = chunk.to(q.device)
        qb = q[:, :, chunk].reshape(b, kvh, g, len(chunk), case.head_dim)
        mask, bias = _mask_and_bias(case, chunk, q.dtype)
        if grads is None:
            with torch.no_grad():
                out = naive_attention(qb, k_seen.unsqueeze(2), v_seen.unsqueeze(2), mask, case.softcap, bias)
                outs.append(out.reshape(b, case.heads, len(chunk), dv))
            continue
        qb, kl, vl = (t.detach().requires_grad_() for t in (qb, k, v))
        kp, vp = paged_round_trip(case, kl, vl)
        ob = naive_attention(qb, kp.unsqueeze(2), vp.unsqueeze(2), mask, case.softcap, bias)
        dob = inputs.dout[:, :, chunk].reshape(ob.shape)
        dq, dk, dv_ = torch.autograd.grad(ob, (qb, kl, vl), dob)
        grads[0][:, :, chunk] = dq.reshape(b, case.heads, len(chunk), case.head_dim)
        grads[1] += dk
        grads[2] += dv_
        outs.append(ob.detach().reshape(b, case.heads, len(chunk), dv))
    return Answer(torch.cat(outs, dim=2), tuple(grads) if grads is not None else None)


def _mask_and_bias(case: Case, chunk: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor | None, ...]:
    mask = workload.visibility(case, chunk, chunk.device)
    if mask is not None:
        mask = mask[:, None, None]
    bias = workload.alibi_bias(case, chunk, chunk.device, dtype)
    if bias is not None:
        bias = bias.reshape(bias.shape[0], case.kv_heads, case.group_size, *bias.shape[2:])
    return mask, bias


def paged_round_trip(case: Case, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if case.page_size is None:
        return k, v
    layout = workload.pages(case)
    return tuple(workload.from_pages(workload.to_pages(t, layout), layout, case.kv_seq_len) for t in (k, v))


def upcast(inputs: Inputs) -> Inputs:
    """float64 everywhere: an fp32 reference would be naive in fp32, its bound a bare floor."""
    import torch

    def cast(t: torch.Tensor | None) -> torch.Tensor | None:
        if t is None:
            return None
        return t.to(torch.float64)

    return Inputs(cast(inputs.q), cast(inputs.k), cast(inputs.v), cast(inputs.dout))


def reference(case: Case, inputs: Inputs, rows: torch.Tensor | None) -> Answer:
    return blocked_attention(case, upcast(inputs), rows, with_grads=grad_checkable(case))


class CaseData:
    """What a case's backends share, made when first needed; `reference_s`: what checking cost."""

    def __init__(self, case: Case) -> None:
        self.case = case
        self.reference_s = 0.0

    @cached_property
    def inputs(self) -> Inputs:
        return make_inputs(self.case)

    @cached_property
    def rows(self) -> torch.Tensor | None:
        return checked_rows(self.case)

    @cached_property
    def reference(self) -> Answer:
        inputs, rows = self.inputs, self.rows
        with self._timed():
            return reference(self.case, inputs, rows)

    @cached_property
    def naive(self) -> Answer:
        """What rounding the case's dtype must be allowed."""
        inputs, rows = self.inputs, self.rows
        with self._timed():
            return blocked_attention(self.case, inputs, rows, grad_checkable(self.case))

    @cached_property
    def naive_errors(self) -> dict[str, float]:
        return naive_errors(self.reference, self.naive)

    def _timed(self) -> _Stopwatch:
        return _Stopwatch(self)


class _Stopwatch:
    def __init__(self, data: CaseData) -> None:
        self.data = data

    def __enter__(self) -> None:
        synchronize(self.data.case.device)
        self.start = time.perf_counter()

    def __exit__(self, kind: type | None, *exc: object) -> None:
        if kind is None:  # after a sticky CUDA error it would raise again
            synchronize(self.data.case.device)
        self.data.reference_s += time.perf_counter() - self.start


def synchronize(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
