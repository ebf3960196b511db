"""Translating attnbench.core.workload's structures into the spellings varlen and paged kernels take.

Nothing here draws or rebuilds a structure: document lengths, cache lengths and the page table come from
attnbench.core.workload; this module only packs canonical tensors into the token-major layout of varlen kernels
(`(total_tokens, heads, head_dim)` with cumulative offsets), turns the page table into the index tensors
each library reads, and unpacks the output. All packing is by differentiable ops (transpose, reshape, cat),
so gradients map back to the canonical tensors, and it happens in `prepare`, outside the timed call.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING, Any

from attnbench.core import workload

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case


@dataclass(frozen=True)
class Varlen:
    """The sequences a varlen kernel sees: one per document (of every batch row), or one per request.

    `cu_q` / `cu_k` are the cumulative offsets (0, then each sequence's end) into the packed queries and keys,
    `max_q` / `max_k` the longest sequence of each, and `kv_lens` each sequence's key count.
    """

    cu_q: tuple[int, ...]
    cu_k: tuple[int, ...]
    max_q: int
    max_k: int
    kv_lens: tuple[int, ...]

    @property
    def sequences(self) -> int:
        return len(self.cu_q) - 1


def documents_in_pages(case: Case, library: str) -> str | None:
    """The skip reason for packed documents in a paged cache: paged kernels read each request's pages as one
    sequence, so the documents inside it would need a mask none of these entry points takes; None otherwise."""
    if case.doc_lens is not None and case.page_size is not None:
        return (f"{library} reads a request's pages as one sequence: documents inside a paged cache would need a "
                "document mask it does not take (attnbench does not map documents with page_size)")
    return None


def varlen(case: Case) -> Varlen:
    """The varlen sequences of `case`: its documents (workload.cu_seqlens for their queries, cu_seqlens_k for their
    keys: the same offsets unless the documents carry a cached prefix; a document may be empty) or its requests (the
    last Sq queries of each request's own workload.request_kv_lens keys, which may be fewer than Sq or none)."""
    if case.doc_lens is not None:
        keys = workload.doc_key_lens(case)
        cu_q, cu_k = workload.cu_seqlens(case), workload.cu_seqlens_k(case)
        return Varlen(cu_q, cu_k, max(case.doc_lens), max(keys), tuple(keys) * case.batch)
    lens = workload.request_kv_lens(case)
    cu_q = tuple(range(0, (case.batch + 1) * case.seq_len, case.seq_len))
    return Varlen(cu_q, (0, *accumulate(lens)), case.seq_len, max(lens), tuple(lens))


def pack_q(t: torch.Tensor) -> torch.Tensor:
    """Canonical (B, H, S, D) to token-major (B·S, H, D): every row's tokens in order (documents stay in place)."""
    b, h, s, d = t.shape
    return t.transpose(1, 2).reshape(b * s, h, d)


def pack_kv(t: torch.Tensor, case: Case) -> torch.Tensor:
    """Canonical K or V (B, KVH, Sk, D) to token-major (total keys, KVH, D): with ragged cache lengths only each
    request's own first kv_lens[b] keys, concatenated (keys past a request's length do not exist for it); a row of
    documents is its documents' keys in order already."""
    import torch

    if case.kv_lens is None:
        return pack_q(t)
    return torch.cat([t[b, :, :n].transpose(0, 1) for b, n in enumerate(case.kv_lens)])


def padded_kv(t: torch.Tensor, case: Case) -> tuple[torch.Tensor, int]:
    """Canonical K or V (B, KVH, Sk, D) as padded keys, (sequences·pad, KVH, D): sequence i's keys at the start of
    its own slot [i·pad, (i+1)·pad), the rest of the slot junk (workload.JUNK, never read: a bias with padded keys
    stops each sequence at its own length), and `pad`. A row of ragged requests is a padded cache already
    (pad = kv_seq_len); documents are copied into slots of their longest key count."""
    import torch

    if case.doc_lens is None:
        return pack_q(t), case.kv_seq_len
    keys = workload.doc_key_lens(case)
    pad = max(keys)
    slots = []
    for row in t:
        start = 0
        for n in keys:
            chunk = row[:, start:start + n].transpose(0, 1)  # (n, KVH, D)
            slots.append(torch.nn.functional.pad(chunk, (0, 0, 0, 0, 0, pad - n), value=workload.JUNK))
            start += n
    return torch.cat(slots), pad


def unpack_out(out: torch.Tensor, case: Case) -> torch.Tensor:
    """Token-major output (B·Sq, H, Dv) back to canonical (B, H, Sq, Dv)."""
    return out.reshape(case.batch, case.seq_len, case.heads, out.shape[-1]).transpose(1, 2)


def int32(values: Any, device: Any) -> torch.Tensor:
    """An int32 tensor, as every varlen and paged kernel takes its offsets and tables (int64 raises or misreads)."""
    import torch

    return torch.tensor(values, dtype=torch.int32, device=device)


def block_table(layout: workload.Pages, device: Any) -> torch.Tensor:
    """The (B, max pages) int32 block table of FlashAttention and torch's varlen_attn: request b's logical page p
    is physical page table[b][p]; the unused tail points at page 0 (never read: the cache length stops first)."""
    import torch

    return workload.table_tensor(layout, device).to(dtype=torch.int32)


def spare_filled_table(layout: workload.Pages) -> tuple[tuple[int, ...], ...]:
    """The page table with each request's unused tail pointing at a page no request owns (the pool always has
    spare pages) instead of -1: for libraries whose table must hold valid page numbers everywhere, and whose
    bookkeeping would otherwise let an unused entry alias a real page (xformers' paged biases)."""
    owned = {page for row in layout.table for page in row if page >= 0}
    spare = next(page for page in range(layout.num_pages) if page not in owned)
    return tuple(tuple(page if page >= 0 else spare for page in row) for row in layout.table)


def flashinfer_page_indices(layout: workload.Pages) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """FlashInfer's CSR form of the page table: (kv_indptr, kv_indices, kv_last_page_len).

    Request b's pages are kv_indices[kv_indptr[b]:kv_indptr[b+1]], its used logical pages in order; its last
    page holds kv_last_page_len[b] tokens, in [1, page_size], so that its length is
    (pages - 1)·page_size + last (FlashInfer's page.get_seq_lens). A length that fills its last page exactly
    has last = page_size, never 0.
    """
    p = layout.page_size
    indptr, indices, last = [0], [], []
    for row, n in zip(layout.table, layout.kv_lens, strict=False):
        used = -(-n // p)
        assert used >= 1 and all(page >= 0 for page in row[:used]), "every request holds at least one key"
        indices.extend(row[:used])
        indptr.append(indptr[-1] + used)
        last.append(n - (used - 1) * p)
    return tuple(indptr), tuple(indices), tuple(last)


def nhd_to_hnd(pool: torch.Tensor) -> torch.Tensor:
    """The (pages, page_size, KVH, D) pool (NHD, workload.to_pages) in FlashInfer's HND layout (pages, KVH,
    page_size, D), contiguous as a cache allocated that way would be."""
    return pool.transpose(1, 2).contiguous()
