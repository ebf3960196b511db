"""The shared structures of a workload beyond the dense case (docs/suites.md "Workloads"), made once per case.

Documents (`doc_lens` and their keys `doc_key_lens`, `cu_seqlens` / `cu_seqlens_k`), ragged cache lengths
(`kv_lens`), each query's position among its keys, the page pool and its shuffled page table, ALiBi slopes, and the
per-row visibility mask and score bias. A query that sees no key (a document without keys, a cache shorter than its
queries) is a row of the mask with nothing in it; the reference outputs zeros there (attnbench.verify.inputs). The
reference, naive and every adapter take them from here, so no backend rebuilds them its own way. Everything random is drawn from the case's
layout seed (its batch and lengths: the same with or without pages or score modifiers), each structure from its
own stream.
"""

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

# The workload axes (attnbench.core.axes) this module gives a meaning to: the reference, and a backend written on
# it (naive), maps exactly these; an axis declared in the table alone has none yet, so every backend skips it.
MEANT = ("documents", "kv_lengths", "page_size", "softcap", "alibi", "head_dim_v", "kv_shared")
# What a page holds where no request's key lives (spare pages, the tail of a request's last page): finite,
# so a masked-out read stays harmless, and far from the standard-normal data, so a wrong lookup is loud.
JUNK = 30.0
# Spare pages in the pool beyond what the batch needs: a quarter more (at least one), as an allocator leaves.
SPARE_SHARE = 4
# ---- documents --------------------------------------------------------------------------------------
# Document d of a row has doc_lens[d] queries and doc_key_lens(case)[d] keys (its queries, or with a cached prefix
# more): a row's queries are its documents' queries in order, its keys their keys in order, and a document's
# queries are the last of its keys (bottom-right per document, as FlashAttention's varlen aligns each sequence).
# A document may be empty (0 queries and 0 keys) or have queries and no keys (its queries see nothing).
def doc_key_lens(case: Case) -> tuple[int, ...]:
    """Each document's key count: its query count, or with a cached prefix (kv_seq_len != seq_len) doc_kv_lens."""
    assert case.doc_lens is not None
    return case.doc_kv_lens if case.doc_kv_lens is not None else case.doc_lens


def _concatenated(lens: tuple[int, ...], rows: int) -> tuple[int, ...]:
    ends = [0]
    for _ in range(rows):
        for length in lens:
            ends.append(ends[-1] + length)
    return tuple(ends)


def cu_seqlens(case: Case) -> tuple[int, ...]:
    """Every batch row's documents' queries concatenated, as varlen kernels take them: 0, then each one's end."""
    assert case.doc_lens is not None
    return _concatenated(case.doc_lens, case.batch)


def cu_seqlens_k(case: Case) -> tuple[int, ...]:
    """The same for the documents' keys (cu_seqlens itself when the documents carry no cached prefix)."""
    return _concatenated(doc_key_lens(case), case.batch)


def doc_ids(case: Case) -> np.ndarray:
    """The document of each of a row's seq_len queries (every row packs the same doc_lens)."""
    import numpy as np

    assert case.doc_lens is not None
    return np.repeat(np.arange(len(case.doc_lens)), case.doc_lens)


def key_doc_ids(case: Case) -> np.ndarray:
    """The document of each of a row's kv_seq_len keys."""
    import numpy as np

    lens = doc_key_lens(case)
    return np.repeat(np.arange(len(lens)), lens)


# ---- ragged cache lengths ---------------------------------------------------------------------------
def row_kv_lens(case: Case) -> tuple[int, ...]:
    """The cache length of each distinct row: one entry when every request has kv_seq_len keys, else one each."""
    return case.kv_lens if case.kv_lens is not None else (case.kv_seq_len,)


def request_kv_lens(case: Case) -> tuple[int, ...]:
    """The cache length of every request of the batch."""
    return case.kv_lens if case.kv_lens is not None else (case.kv_seq_len,) * case.batch


# ---- pages ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pages:
    """A pool of `num_pages` pages of `page_size` tokens; request b's logical page p is `table[b][p]` (-1: none).

    The pool's layout is (num_pages, page_size, kv_heads, head_dim): FlashAttention's paged `k_cache` and
    FlashInfer's NHD layout.
    """

    page_size: int
    num_pages: int
    table: tuple[tuple[int, ...], ...]
    kv_lens: tuple[int, ...]


@functools.lru_cache(maxsize=64)
def pages(case: Case) -> Pages:
    """The page pool and a seeded, shuffled page table for `case` (never the identity, with spare pages)."""
    import numpy as np

    assert case.page_size is not None
    lens = request_kv_lens(case)
    need = [-(-n // case.page_size) for n in lens]
    total = sum(need)
    num_pages = total + max(1, total // SPARE_SHARE)
    perm = np.random.default_rng([case.layout_seed, STREAM_PAGES, case.page_size]).permutation(num_pages)
    if (perm[:total] == np.arange(total)).all():  # a contiguous table measures only the best case
        perm[[0, total]] = perm[[total, 0]]
    width = -(-case.kv_seq_len // case.page_size)
    table, used = [], 0
    for n in need:
        table.append(tuple(int(p) for p in perm[used:used + n]) + (-1,) * (width - n))
        used += n
    return Pages(case.page_size, num_pages, tuple(table), lens)


def to_pages(x: torch.Tensor, layout: Pages) -> torch.Tensor:
    """Canonical K or V (B, KVH, Sk, D) stored in the page pool (num_pages, P, KVH, D), by differentiable ops.

    Spare pages and the slots past each request's length hold JUNK: a kernel that reads them is wrong.
    """
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
    """The (B, pages) page table as a long tensor, unused entries pointing at page 0 (their keys are masked)."""
    import torch

    return torch.tensor(layout.table, dtype=torch.long, device=device).clamp(min=0)


def gather(pool: torch.Tensor, table: torch.Tensor, kv_seq_len: int) -> torch.Tensor:
    """K or V gathered from the (num_pages, P, KVH, D) pool through a table_tensor back to canonical
    (B, KVH, Sk, D); positions past a request's length hold whatever the pool has there (the mask hides them)."""
    b, width = table.shape
    _, p, kvh, d = pool.shape
    return pool[table].reshape(b, width * p, kvh, d)[:, :kv_seq_len].transpose(1, 2)


def from_pages(pool: torch.Tensor, layout: Pages, kv_seq_len: int) -> torch.Tensor:
    """gather() with the layout's own table."""
    return gather(pool, table_tensor(layout, pool.device), kv_seq_len)


# ---- ALiBi ------------------------------------------------------------------------------------------
def alibi_slopes(heads: int) -> tuple[float, ...]:
    """ALiBi's slopes: 2^(-8(h+1)/H) for H a power of two; otherwise the paper's recipe (the slopes of the
    power of two below H, then every other slope of the power of two above it)."""

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    if heads & (heads - 1) == 0:
        return tuple(power_of_two(heads))
    closest = 2 ** int(math.floor(math.log2(heads)))
    return tuple(power_of_two(closest) + power_of_two(2 * closest)[0::2][: heads - closest])


def case_slopes(case: Case) -> tuple[float, ...]:
    """The slopes of the case's query heads. Under tensor parallelism the case is rank 0's share: the first
    heads of the whole model's slopes."""
    return alibi_slopes(case.heads * (case.tp or 1))[: case.heads]


# ---- the mask and the bias --------------------------------------------------------------------------
def window_bounds(pos: Any, causal: bool, window: int | None) -> tuple[Any, Any]:
    """The mask's one arithmetic (docs/conventions.md, "Causal is bottom-right aligned" and "Window `W`"): the first
    and the last key a query at position `pos` among its keys may see, None where the mask sets no bound. `pos` is
    a number or an array of them; allowed and key_ranges both bound keys by it."""
    first = None if window is None else pos - window
    last = pos if causal else None if window is None else pos + window
    return first, last


def allowed(q_idx: Any, k_idx: Any, offset: int, causal: bool, window: int | None) -> Any:
    """The mask on index tensors: True where query q_idx may see key k_idx, for queries that are the last
    positions (offset = Sk - Sq). The one predicate every backend's mask and the reference come from."""
    first, last = window_bounds(q_idx + offset, causal, window)
    keep = k_idx >= (0 if first is None else first)
    return keep if last is None else keep & (k_idx <= last)


@functools.lru_cache(maxsize=64)
def query_positions(case: Case) -> np.ndarray:
    """Each query's position among the keys it may see, as an (R, Sq) int64 array (R as in key_ranges): i + off_b
    for request b's queries (the last of its keys), i + (end of its document's keys - end of its queries) for a
    document's. The mask's causal and window bounds and ALiBi's distance are measured from it."""
    import numpy as np

    if case.doc_lens is not None:
        shift = np.cumsum(doc_key_lens(case)) - np.cumsum(case.doc_lens)
        pos = (np.arange(case.seq_len, dtype=np.int64) + shift[doc_ids(case)])[None, :]
    else:
        lens = np.array(row_kv_lens(case), dtype=np.int64)[:, None]
        pos = np.arange(case.seq_len, dtype=np.int64)[None, :] + (lens - case.seq_len)
    pos.flags.writeable = False  # cached: shared by every caller
    return pos


@functools.lru_cache(maxsize=64)
def key_ranges(case: Case) -> tuple[np.ndarray, np.ndarray]:
    """The inclusive key range [lo, hi] each query may see, as (R, Sq) int64 arrays: R = 1 when every batch row
    has the same mask, R = batch with ragged cache lengths. Empty where lo > hi (a query that sees no key)."""
    import numpy as np

    pos = query_positions(case)
    if case.doc_lens is not None:  # a query's keys are its own document's
        ends = np.cumsum(doc_key_lens(case))
        ids = doc_ids(case)
        lo, hi = (ends - np.array(doc_key_lens(case)))[ids][None, :], (ends - 1)[ids][None, :]
    else:
        lens = np.array(row_kv_lens(case), dtype=np.int64)[:, None]
        lo, hi = np.zeros_like(pos), np.broadcast_to(lens - 1, pos.shape).copy()
    first, last = window_bounds(pos, case.causal, case.window)
    lo = lo if first is None else np.maximum(lo, first)
    hi = hi if last is None else np.minimum(hi, last)
    lo.flags.writeable = hi.flags.writeable = False  # cached: shared by every caller
    return lo, hi


def allowed_fn(case: Case, device: Any = None) -> Callable[[Any, Any, Any], Any]:
    """docs/conventions.md's mask as a predicate on index tensors, `fn(row, q_idx, k_idx)`: True where query q_idx of batch
    row `row` may see key k_idx. The case's causal and window mask; with documents, within the query's own
    document (counted from its start); with ragged cache lengths, request `row`'s own keys, its queries the last
    of them. The one definition the reference's mask (visibility), flex's mask_mod and sliding-window's plan
    take, read from docs/conventions.md directly (not from key_ranges, so that each checks the other). A document is its own
    sequence: positions count from its first query and its first key, its queries the last of its keys."""
    import numpy as np
    import torch

    causal, window = case.causal, case.window
    if case.doc_lens is not None and case.doc_kv_lens is None:  # a document's keys are its queries: q - k in place
        doc = torch.as_tensor(doc_ids(case), device=device)
        return lambda row, q, k: allowed(q, k, 0, causal, window) & (doc[q] == doc[k])
    if case.doc_lens is not None:
        q_lens, k_lens = np.array(case.doc_lens), np.array(doc_key_lens(case))
        as_tensor = lambda a: torch.as_tensor(a, device=device)  # noqa: E731
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
    """The boolean (R, rows, Sk) mask, True where a query may see a key (allowed_fn); R as in key_ranges. None
    when nothing is masked."""
    import torch

    if not has_mask(case):
        return None
    q = (torch.arange(case.seq_len, device=device) if rows is None else rows.to(device))[None, :, None]
    k = torch.arange(case.kv_seq_len, device=device)[None, None, :]
    row = torch.arange(len(row_kv_lens(case)), device=device)[:, None, None]
    return allowed_fn(case, device)(row, q, k)


def alibi_bias(case: Case, rows: torch.Tensor | None = None, device: Any = None,
               dtype: Any = None) -> torch.Tensor | None:
    """ALiBi's (R, H, rows, Sk) score bias -slope_h·|i + off - j|, the query's position (query_positions: off is
    its request's, or inside a document counted from the document's start) less the key's; None without alibi."""
    import torch

    if not case.alibi:
        return None
    pos = torch.tensor(query_positions(case), device=device)
    pos = (pos if rows is None else pos[:, rows.to(device)])[:, None, :, None]
    k = torch.arange(case.kv_seq_len, device=device)[None, None, None, :]
    slopes = torch.tensor(case_slopes(case), dtype=torch.float64, device=device)[None, :, None, None]
    return (-slopes * (pos - k).abs()).to(dtype or torch.float64)


def mask(case: Case, rows: torch.Tensor | None = None, device: Any = None) -> torch.Tensor | None:
    """The dense case's (rows, Sk) boolean mask for the given query rows (all by default): visibility's one row;
    None when unmasked."""
    assert case.doc_lens is None and case.kv_lens is None, "a per-row mask: use visibility"
    full = visibility(case, rows, device)
    return None if full is None else full[0]


# ---- counts -----------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=4096)
def visible_total(case: Case) -> int:
    """The exact number of (query, key) pairs the mask lets through over the whole batch (docs/conventions.md's `visible`,
    summed per document and per request), counted row by row from key_ranges."""
    import numpy as np

    lo, hi = key_ranges(case)
    per_rows = int(np.maximum(hi - lo + 1, 0).sum())
    return per_rows * (case.batch if len(lo) == 1 else 1)


def visible_pairs(case: Case) -> int:
    """The visible pairs of one batch row; with ragged cache lengths the rows differ, and this is the batch's total
    over `batch`, rounded down (visible_total is exact)."""
    return visible_total(case) // case.batch


def has_mask(case: Case) -> bool:
    """Whether any (query, key) pair is masked out."""
    return visible_total(case) < case.batch * case.seq_len * case.kv_seq_len
