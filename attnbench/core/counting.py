"""How work is counted (docs/conventions.md "Work"): FLOPs from the exact visible pairs, the memory-traffic floor, and
the analytic memory a kernel needs above its inputs. Every record, the forecast and the report count this way."""

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

# Backward = 2.5x forward, fwd_bwd = 3.5x: FlashAttention's benchmark accounting (docs/conventions.md).
MODE_FLOP_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}
# How many times each of (Q + K + V) and O's size is moved per mode (the traffic floor, docs/conventions.md "Work"):
# fwd reads Q, K, V and writes O; bwd reads Q, K, V, O and dO and writes dQ, dK, dV; fwd_bwd does both.
MODE_BYTE_FACTOR = {"fwd": (1, 1), "bwd": (2, 2), "fwd_bwd": (3, 3)}


def forward_flops_per_pair(case: Case) -> int:
    """FLOPs of one (query, key) pair in one head, forward: Q·Kᵀ (2·D) and P·V (2·Dv)."""
    return 2 * (case.head_dim + case.v_dim)


def flops(case: Case) -> int:
    """FLOPs of the measured mode: 2·H·(D + Dv)·visible over the batch for forward (4·B·H·D·visible per row
    when the head sizes agree), ×2.5 backward, ×3.5 fwd+bwd."""
    forward = case.heads * forward_flops_per_pair(case) * visible_total(case)
    return int(forward * MODE_FLOP_FACTOR[case.mode])


def tensor_bytes(case: Case) -> dict[str, int]:
    """Bytes of Q, K, V and O in the case's dtype (V and O with head_dim_v); a quantized case's FP8 tensors take one
    byte an element, its output its original dtype's (attnbench.core.quant.element_bytes)."""
    elem_q, elem_kv, elem_o = quant.element_bytes(case) if case.quantized else (DTYPE_BYTES[case.dtype],) * 3
    rows = case.batch * case.seq_len * case.heads
    keys = case.batch * case.kv_heads * case.kv_seq_len * elem_kv
    return {"q": rows * case.head_dim * elem_q, "k": keys * case.head_dim, "v": keys * case.v_dim,
            "o": rows * case.v_dim * elem_o}


def io_bytes(case: Case) -> int:
    """Bytes of Q, K, V read and O written once: the memory traffic floor of one forward call."""
    return sum(tensor_bytes(case).values())


def bytes_moved(case: Case) -> int:
    """The memory traffic floor of the measured mode: every tensor read or written exactly once.

    fwd: Q, K, V read, O written (io_bytes). bwd: Q, K, V, O and dO read, dQ, dK, dV written
    (softmax statistics are a row each, left out). fwd_bwd: the two together. Only the K/V rows some
    query may see count: a decode step with a window reads W + 1 keys of its cache, not all of it.
    """
    sizes = tensor_bytes(case)
    kv = (sizes["k"] + sizes["v"]) * key_rows_read(case) // (case.batch * case.kv_seq_len)
    qkv, out = MODE_BYTE_FACTOR[case.mode]
    return qkv * (sizes["q"] + kv) + out * sizes["o"]


# A materialising kernel's backward reads P, writes and reads dP, writes dS and reads it twice (for dQ and dK).
SCORE_PASSES_BWD = 7


def score_traffic(case: Case, memory: MemoryCost) -> int:
    """Bytes a kernel that materialises the (Sq, Sk) scores moves through them, beyond the inputs' floor: each
    score-sized buffer of its forward written once and read once, and SCORE_PASSES_BWD passes backward (0 for a
    fused kernel). These, not Q, K and V, bound such a kernel: without them the roofline draws naive attention on
    the compute-bound side."""
    if not memory.score_copies_fwd:
        return 0
    halves = memory.upcast_halves and case.dtype in HALF_DTYPES
    matrix = case.batch * case.heads * case.seq_len * case.kv_seq_len * (4 if halves else DTYPE_BYTES[case.dtype])
    passes = {"fwd": 2 * memory.score_copies_fwd, "bwd": SCORE_PASSES_BWD,
              "fwd_bwd": 2 * memory.score_copies_fwd + SCORE_PASSES_BWD}[case.mode]
    return int(passes * matrix)


def key_rows_read(case: Case) -> int:
    """K/V rows (per KV head) read over the whole batch: the keys some query sees, or with pages, every row
    of each page holding such a key (a kernel reads whole pages)."""
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
    """Per distinct row, a boolean over the keys: seen by some query (ranges marked with a difference array)."""
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
    """What a kernel holds above its inputs, beside its output and gradients: a backend declares it (Backend.cost).

    The defaults are a fused kernel's: nothing score-sized. Fitted on the H200 runs (torch 2.11, bf16) where each
    backend's peak was measured; tests/test_counting.py holds every `ok` record there within 1.5x of its estimate.
    """

    score_copies_fwd: float = 0.0  # (Sq, Sk) buffers alive at the forward's peak (scores and probabilities: 2)
    score_copies_bwd: float = 0.0  # the same through forward and backward (P kept, dP and dS made: 4)
    upcast_halves: bool = False  # fp16/bf16 inputs computed in float32: scores and a float32 copy of Q, K, V
    expands_kv: bool = False  # K/V repeated per query head before the call (GQA/MQA)
    bwd_workspace: float = 0.0  # Q-sized buffers the backward adds (an fp32 dQ accumulator is 2)
    bwd_expands_kv: bool = False  # dK/dV computed per query head for GQA/MQA, then summed


FUSED = MemoryCost()


def memory_estimate(case: Case, memory: MemoryCost = FUSED) -> int:
    """Analytic peak bytes above the inputs: the output (and gradients), plus what the kernel declares it holds."""
    sizes = tensor_bytes(case)
    elem = DTYPE_BYTES[case.dtype]
    expanded_kv = case.batch * case.heads * case.kv_seq_len * (case.head_dim + case.v_dim) * elem
    grouped = case.kv_heads != case.heads
    estimate = sizes["o"]
    if memory.expands_kv and grouped:
        estimate += expanded_kv
    if case.needs_grad:
        estimate += sizes["q"] + sizes["k"] + sizes["v"] + memory.bwd_workspace * sizes["q"]
        if memory.bwd_expands_kv and grouped:
            estimate += expanded_kv
    halves = memory.upcast_halves and case.dtype in HALF_DTYPES
    copies = memory.score_copies_bwd if case.needs_grad else memory.score_copies_fwd
    if copies:
        score_elem = 4 if halves else elem
        estimate += int(copies * case.batch * case.heads * case.seq_len * case.kv_seq_len * score_elem)
    if halves:  # float32 copies of Q and of the (expanded) K and V the math runs on
        kv = expanded_kv if memory.expands_kv and grouped else sizes["k"] + sizes["v"]
        estimate += 2 * (sizes["q"] + kv)
    return estimate
