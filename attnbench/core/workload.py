"""A workload's shared structures beyond the dense case (docs/suites.md "Workloads"), for the reference and
every adapter; random ones from the case's layout seed."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnbench.core.case import STREAM_PAGES

if TYPE_CHECKING:
    import numpy as np
    import torch

    from attnbench.core.case import Case

# axes given a meaning here; another is skipped by every backend
MEANT = ("documents", "kv_lengths", "page_size", "softcap", "alibi", "head_dim_v", "kv_shared")
# in pages where no key lives: finite, and far from randn data so a wrong lookup is loud
JUNK = 30.0
SPARE_SHARE = 4


# a document's queries are the last of its keys (FlashAttention's varlen)
def doc_key_lens(case: Case) -> tuple[int, ...]:
    assert case.doc_lens is not None
    return case.doc_kv_lens if case.doc_kv_lens is not None else case.doc_lens


def _concatenated(lens: tuple[int, ...], rows: int) -> tuple[int, ...]:
    ends = [0]
    for _ in range(rows):
        for length in lens:
            ends.append(ends[-1] + length)
    return tuple(ends)


def cu_seqlens(case: Case) -> tuple[int, ...]:
    """0, then each document's query end, as varlen kernels take them."""
    assert case.doc_lens is not None
    return _concatenated(case.doc_lens, case.batch)


def cu_seqlens_k(case: Case) -> tuple[int, ...]:
    return _concatenated(doc_key_lens(case), case.batch)


def doc_ids(case: Case) -> np.ndarray:
    import numpy as np

    assert case.doc_lens is not None
    return np.repeat(np.arange(len(case.doc_lens)), case.doc_lens)


def key_doc_ids(case: Case) -> np.ndarray:
    import numpy as np

    lens = doc_key_lens(case)
    return np.repeat(np.arange(len(lens)), lens)


def row_kv_lens(case: Case) -> tuple[int, ...]:
    """One entry when all are kv_seq_len, else one per request."""
    return case.kv_lens if case.kv_lens is not None else (case.kv_seq_len,)


def request_kv_lens(case: Case) -> tuple[int, ...]:
    return case.kv_lens if case.kv_lens is not None else (case.kv_seq_len,) * case.batch


@dataclass(frozen=True)
class Pages:
    """Request b's logical page p is `table[b][p]` (-1: none); pool (num_pages, page_size, kv_heads,
    head_dim): FlashAttention's paged `k_cache`, FlashInfer's NHD."""

    page_size: int
    num_pages: int
    table: tuple[tuple[int, ...], ...]
    kv_lens: tuple[int, ...]


@functools.lru_cache(maxsize=64)
def pages(case: Case) -> Pages:
    """Seeded and shuffled, never the identity, with spare pages."""
    import numpy as np

    assert case.page_size is not None
    lens = request_kv_lens(case)
    need = [-(-n // case.page_size) for n in lens]
    total = sum(need)
    num_pages = total + max(1, total // SPARE_SHARE)
    perm = np.random.default_rng([case.layout_seed, STREAM_PAGES, case.page_size]).permutation(num_pages)
    if (perm[:total] == np.arange(total)).all():  # contiguous is only the best case
        perm[[0, total]] = perm[[total, 0]]
    width = -(-case.kv_seq_len // case.page_size)
    table, used = [], 0
    for n in need:
        table.append(tuple(int(p) for p in perm[used:used + n]) + (-1,) * (width - n))
        used += n
    return Pages(case.page_size, num_pages, tuple(table), lens)


def to_pages(x: torch.Tensor, layout: Pages) -> torch.Tensor:
    """Differentiable; unused slots hold JUNK."""
    import torch

    b, kvh, sk, d = x.shape
    p = layout.page_size
    width = len(layout.table[0])
    rows = x.transpose(1, 2)  # (B, Sk, KVH, D)
    rows = torch.nn.functional.pad(rows, (0, 0, 0, 0, 0, width * p - sk))
    lens = torch.tensor(layout.kv_lens, device=x.device)
    real = torch.arange(width * p, device=x.device)[None, :] < lens[:, None]  # (B, width·P)
    rows = torch.where(real[:, :, None, None], rows, torch.full_like(rows, JUNK))
    logical = rows.reshape(b, width, p, kvh, d)
    table = torch.tensor(layout.table, device=x.device)
    used = table >= 0
    pool = torch.full((layout.num_pages, p, kvh, d), JUNK, dtype=x.dtype, device=x.device)
    return pool.index_copy(0, table[used], logical[used])


def table_tensor(layout: Pages, device: Any = None) -> torch.Tensor:
    """Unused entries point at page 0."""
    import torch

    return torch.tensor(layout.table, dtype=torch.long, device=device).clamp(min=0)


def gather(pool: torch.Tensor, table: torch.Tensor, kv_seq_len: int) -> torch.Tensor:
    """Back to canonical (B, KVH, Sk, D)."""
    b, width = table.shape
    _, p, kvh, d = pool.shape
    return pool[table].reshape(b, width * p, kvh, d)[:, :kv_seq_len].transpose(1, 2)


def from_pages(pool: torch.Tensor, layout: Pages, kv_seq_len: int) -> torch.Tensor:
    return gather(pool, table_tensor(layout, pool.device), kv_seq_len)


def alibi_slopes(heads: int) -> tuple[float, ...]:
    """2^(-8(h+1)/H), else the paper's recipe."""

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    if heads & (heads - 1) == 0:
        return tuple(power_of_two(heads))
    closest = 2 ** int(math.floor(math.log2(heads)))
    return tuple(power_of_two(closest) + power_of_two(2 * closest)[0::2][: heads - closest])


def case_slopes(case: Case) -> tuple[float, ...]:
    """Under tensor parallelism, rank 0's share."""
    return alibi_slopes(case.heads * (case.tp or 1))[: case.heads]


def window_bounds(pos: Any, causal: bool, window: int | None) -> tuple[Any, Any]:
    """First and last key a query at `pos` may see (None: unbounded); docs/conventions.md."""
    first = None if window is None else pos - window
    if causal:
        last = pos
    elif window is None:
        last = None
    else:
        last = pos + window
    return first, last


def allowed(q_idx: Any, k_idx: Any, offset: int, causal: bool, window: int | None) -> Any:
    """The one predicate; queries are the last positions (offset = Sk - Sq)."""
    first, last = window_bounds(q_idx + offset, causal, window)
    keep = k_idx >= (0 if first is None else first)
    return keep if last is None else keep & (k_idx <= last)


@functools.lru_cache(maxsize=64)
def query_positions(case: Case) -> np.ndarray:
    """(R, Sq): each query's position among its keys."""
    import numpy as np

    if case.doc_lens is not None:
        shift = np.cumsum(doc_key_lens(case)) - np.cumsum(case.doc_lens)
        pos = (np.arange(case.seq_len, dtype=np.int64) + shift[doc_ids(case)])[None, :]
    else:
        lens = np.array(row_kv_lens(case), dtype=np.int64)[:, None]
        pos = np.arange(case.seq_len, dtype=np.int64)[None, :] + (lens - case.seq_len)
    pos.flags.writeable = False  # cached
    return pos


@functools.lru_cache(maxsize=64)
def key_ranges(case: Case) -> tuple[np.ndarray, np.ndarray]:
    """Inclusive [lo, hi] per query, (R, Sq); R = 1, or batch when ragged. lo > hi: no key."""
    import numpy as np

    pos = query_positions(case)
    if case.doc_lens is not None:
        ends = np.cumsum(doc_key_lens(case))
        ids = doc_ids(case)
        lo, hi = (ends - np.array(doc_key_lens(case)))[ids][None, :], (ends - 1)[ids][None, :]
    else:
        lens = np.array(row_kv_lens(case), dtype=np.int64)[:, None]
        lo, hi = np.zeros_like(pos), np.broadcast_to(lens - 1, pos.shape).copy()
    first, last = window_bounds(pos, case.causal, case.window)
    lo = lo if first is None else np.maximum(lo, first)
    hi = hi if last is None else np.minimum(hi, last)
    lo.flags.writeable = hi.flags.writeable = False  # cached
    return lo, hi


def allowed_fn(case: Case, device: Any = None) -> Callable[[Any, Any, Any], Any]:
    """`fn(row, q_idx, k_idx)` from docs/conventions.md directly, not key_ranges, so each checks the other."""
    import numpy as np
    import torch

    causal, window = case.causal, case.window
    if case.doc_lens is not None and case.doc_kv_lens is None:
        doc = torch.as_tensor(doc_ids(case), device=device)
        return lambda row, q, k: allowed(q, k, 0, causal, window) & (doc[q] == doc[k])
    if case.doc_lens is not None:
        q_lens, k_lens = np.array(case.doc_lens), np.array(doc_key_lens(case))

        def as_tensor(a: Any) -> Any:
            return torch.as_tensor(a, device=device)

        q_doc, k_doc = as_tensor(doc_ids(case)), as_tensor(key_doc_ids(case))
        q_first, k_first = as_tensor(np.cumsum(q_lens) - q_lens), as_tensor(np.cumsum(k_lens) - k_lens)
        off = as_tensor(k_lens - q_lens)

        def in_document(row: Any, q: Any, k: Any) -> Any:
            d = q_doc[q]
            return allowed(q - q_first[d], k - k_first[k_doc[k]], off[d], causal, window) & (d == k_doc[k])

        return in_document
    lens, seq = torch.tensor(request_kv_lens(case), device=device), case.seq_len
    return lambda row, q, k: allowed(q, k, lens[row] - seq, causal, window) & (k < lens[row])


def visibility(case: Case, rows: torch.Tensor | None = None, device: Any = None) -> torch.Tensor | None:
    """(R, rows, Sk), or None when nothing is masked."""
    import torch

    if not has_mask(case):
        return None
    q = (torch.arange(case.seq_len, device=device) if rows is None else rows.to(device))[None, :, None]
    k = torch.arange(case.kv_seq_len, device=device)[None, None, :]
    row = torch.arange(len(row_kv_lens(case)), device=device)[:, None, None]
    return allowed_fn(case, device)(row, q, k)


def alibi_bias(case: Case, rows: torch.Tensor | None = None, device: Any = None,
               dtype: Any = None) -> torch.Tensor | None:
    """(R, H, rows, Sk) ALiBi bias, or None."""
    import torch

    if not case.alibi:
        return None
    pos = torch.tensor(query_positions(case), device=device)
    pos = (pos if rows is None else pos[:, rows.to(device)])[:, None, :, None]
    k = torch.arange(case.kv_seq_len, device=device)[None, None, None, :]
    slopes = torch.tensor(case_slopes(case), dtype=torch.float64, device=device)[None, :, None, None]
    return (-slopes * (pos - k).abs()).to(dtype or torch.float64)


def mask(case: Case, rows: torch.Tensor | None = None, device: Any = None) -> torch.Tensor | None:
    assert case.doc_lens is None and case.kv_lens is None, "a per-row mask: use visibility"
    full = visibility(case, rows, device)
    return None if full is None else full[0]


@functools.lru_cache(maxsize=4096)
def visible_total(case: Case) -> int:
    """docs/conventions.md's `visible` over the batch."""
    import numpy as np

    lo, hi = key_ranges(case)
    per_rows = int(np.maximum(hi - lo + 1, 0).sum())
    return per_rows * (case.batch if len(lo) == 1 else 1)


def visible_pairs(case: Case) -> int:
    """Per row, rounded down when ragged."""
    return visible_total(case) // case.batch


def has_mask(case: Case) -> bool:
    return visible_total(case) < case.batch * case.seq_len * case.kv_seq_len
