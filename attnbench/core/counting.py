"""How work is counted (docs/conventions.md "Work")."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnbench.core import quant
from attnbench.core.axes import HALF_DTYPES
from attnbench.core.case import DTYPE_BYTES
from attnbench.core.workload import key_ranges, visible_total

if TYPE_CHECKING:
    from attnbench.core.case import Case

MODE_FLOP_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}  # FlashAttention's accounting
MODE_BYTE_FACTOR = {"fwd": (1, 1), "bwd": (2, 2), "fwd_bwd": (3, 3)}  # passes over Q + K + V, and O


def forward_flops_per_pair(case: Case) -> int:
    """Q·Kᵀ (2·D) and P·V (2·Dv)."""
    return 2 * (case.head_dim + case.v_dim)


def flops(case: Case) -> int:
    forward = case.heads * forward_flops_per_pair(case) * visible_total(case)
    return int(forward * MODE_FLOP_FACTOR[case.mode])


def tensor_bytes(case: Case) -> dict[str, int]:
    """FP8 tensors take one byte."""
    elem_q, elem_kv, elem_o = quant.element_bytes(case) if case.quantized else (DTYPE_BYTES[case.dtype],) * 3
    rows = case.batch * case.seq_len * case.heads
    keys = case.batch * case.kv_heads * case.kv_seq_len * elem_kv
    return {"q": rows * case.head_dim * elem_q, "k": keys * case.head_dim, "v": keys * case.v_dim,
            "o": rows * case.v_dim * elem_o}


def io_bytes(case: Case) -> int:
    return sum(tensor_bytes(case).values())


def bytes_moved(case: Case) -> int:
    """The traffic floor of the measured mode, over the K/V rows some query sees."""
    sizes = tensor_bytes(case)
    kv = (sizes["k"] + sizes["v"]) * key_rows_read(case) // (case.batch * case.kv_seq_len)
    qkv, out = MODE_BYTE_FACTOR[case.mode]
    return qkv * (sizes["q"] + kv) + out * sizes["o"]


# a materialising backward: reads P, writes and reads dP, writes dS, reads it twice
SCORE_PASSES_BWD = 7


def score_traffic(case: Case, memory: MemoryCost) -> int:
    """Bytes a materialising kernel moves through its scores beyond the floor (0 when fused)."""
    if not memory.score_copies_fwd:
        return 0
    halves = memory.upcast_halves and case.dtype in HALF_DTYPES
    matrix = case.batch * case.heads * case.seq_len * case.kv_seq_len * (4 if halves
                                                                         else DTYPE_BYTES[case.dtype])
    passes = {"fwd": 2 * memory.score_copies_fwd, "bwd": SCORE_PASSES_BWD,
              "fwd_bwd": 2 * memory.score_copies_fwd + SCORE_PASSES_BWD}[case.mode]
    return int(passes * matrix)


def key_rows_read(case: Case) -> int:
    """With pages, every row of each page holding a seen key."""
    if case.page_size is None:
        return _seen_total(case)
    pages = _seen_pages(case)
    return sum(len(row) for row in pages) * case.page_size * (case.batch if len(pages) == 1 else 1)


@functools.lru_cache(maxsize=1024)
def _seen_total(case: Case) -> int:
    keys = _seen_keys(case)
    per_rows = sum(int(row.sum()) for row in keys)
    return per_rows * (case.batch if len(keys) == 1 else 1)


@functools.lru_cache(maxsize=64)
def _seen_keys(case: Case) -> list[Any]:
    import numpy as np

    lo, hi = key_ranges(case)
    rows = []
    for row_lo, row_hi in zip(lo, hi, strict=False):
        keep = row_hi >= row_lo
        marks = np.zeros(case.kv_seq_len + 1, dtype=np.int64)
        np.add.at(marks, row_lo[keep], 1)
        np.add.at(marks, row_hi[keep] + 1, -1)
        rows.append(np.cumsum(marks[:-1]) > 0)
    return rows


def _seen_pages(case: Case) -> list[set[int]]:
    import numpy as np

    assert case.page_size is not None
    return [set((np.flatnonzero(keys) // case.page_size).tolist()) for keys in _seen_keys(case)]


@dataclass(frozen=True)
class MemoryCost:
    """What a kernel holds beyond inputs, output and gradients (Backend.cost); defaults: fused."""

    score_copies_fwd: float = 0.0  # (Sq, Sk) buffers at the forward's peak
    score_copies_bwd: float = 0.0
    upcast_halves: bool = False  # fp16/bf16 computed in float32
    expands_kv: bool = False  # K/V repeated per query head
    bwd_workspace: float = 0.0  # Q-sized buffers in the case's dtype
    bwd_expands_kv: bool = False  # dK, dV per query head in the case's dtype under GQA, summed after
    bwd_dq_accum: bool = False  # a float32 dQ accumulator of Q's shape
    bwd_dkv_accum: bool = False  # float32 dK, dV accumulators of K's and V's shape under GQA
    bwd_out_copies: int = 0  # O-sized copies the backward makes (dO, O made contiguous)


FUSED = MemoryCost()
FLOAT32_BYTES = 4


def memory_estimate(case: Case, memory: MemoryCost = FUSED) -> int:
    sizes = tensor_bytes(case)
    estimate = sizes["o"] + (expanded_kv_bytes(case) if memory.expands_kv else 0)
    if case.needs_grad:
        estimate += sizes["q"] + sizes["k"] + sizes["v"] + backward_workspace(case, memory)
    halves = memory.upcast_halves and case.dtype in HALF_DTYPES
    copies = memory.score_copies_bwd if case.needs_grad else memory.score_copies_fwd
    if copies:
        score_elem = FLOAT32_BYTES if halves else DTYPE_BYTES[case.dtype]
        estimate += int(copies * case.batch * case.heads * case.seq_len * case.kv_seq_len * score_elem)
    if halves:  # float32 copies of Q, K, V
        kv = sizes["k"] + sizes["v"]
        if memory.expands_kv and case.kv_heads != case.heads:
            kv = expanded_kv_bytes(case)
        estimate += 2 * (sizes["q"] + kv)
    return estimate


def expanded_kv_bytes(case: Case) -> int:
    """K and V repeated per query head, in the case's dtype; 0 without GQA."""
    if case.kv_heads == case.heads:
        return 0
    return case.batch * case.heads * case.kv_seq_len * (case.head_dim + case.v_dim) * DTYPE_BYTES[case.dtype]


def backward_workspace(case: Case, memory: MemoryCost) -> int:
    """What a backward holds beyond dQ, dK and dV."""
    sizes = tensor_bytes(case)
    held = memory.bwd_workspace * sizes["q"] + memory.bwd_out_copies * sizes["o"]
    if memory.bwd_dq_accum:
        held += FLOAT32_BYTES * case.batch * case.heads * case.seq_len * case.head_dim
    if memory.bwd_expands_kv:
        held += expanded_kv_bytes(case)
    if memory.bwd_dkv_accum and case.kv_heads != case.heads:
        held += FLOAT32_BYTES * case.batch * case.kv_heads * case.kv_seq_len * (case.head_dim + case.v_dim)
    return int(held)
