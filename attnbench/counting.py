"""How work is counted (GUIDE.md "Counting work"): FLOPs from the exact visible pairs, the memory-traffic floor, and
the analytic memory a kernel needs above its inputs. Every record, the forecast and the report count this way."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from attnbench.case import DTYPE_BYTES
from attnbench.workload import key_ranges, visible_total

if TYPE_CHECKING:
    from attnbench.case import Case

# Backward = 2.5x forward, fwd_bwd = 3.5x: FlashAttention's benchmark accounting (GUIDE.md).
MODE_FLOP_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}
# How many times each of (Q + K + V) and O's size is moved per mode (the traffic floor, GUIDE.md "Counting work"):
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
    """Bytes of Q, K, V and O in the case's dtype (V and O with head_dim_v)."""
    elem = DTYPE_BYTES[case.dtype]
    rows = case.batch * case.seq_len * case.heads * elem
    keys = case.batch * case.kv_heads * case.kv_seq_len * elem
    return {"q": rows * case.head_dim, "k": keys * case.head_dim, "v": keys * case.v_dim, "o": rows * case.v_dim}


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


def keys_seen(case: Case) -> int:
    """How many keys at least one query of a batch row may see: the rows of K and V a kernel must read (a
    window skips the rest). With ragged cache lengths, the batch's total over `batch`, rounded down."""
    return _seen_total(case) // case.batch


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
    for row_lo, row_hi in zip(lo, hi):
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


def memory_estimate(case: Case, materialises_scores: bool, expands_kv: bool = False) -> int:
    """Analytic peak bytes above the inputs: the output (and grads), plus scores when materialised."""
    sizes = tensor_bytes(case)
    elem = DTYPE_BYTES[case.dtype]
    estimate = sizes["o"]
    if expands_kv and case.kv_heads != case.heads:
        estimate += case.batch * case.heads * case.kv_seq_len * (case.head_dim + case.v_dim) * elem
    if case.needs_grad:
        estimate += sizes["q"] + sizes["k"] + sizes["v"]
    if materialises_scores:
        scores = case.batch * case.heads * case.seq_len * case.kv_seq_len * elem
        # scores and probabilities live together; backward keeps both and their gradient
        estimate += scores * (3 if case.needs_grad else 2)
    return estimate
