"""attnbench.core.workload's structures in the spellings varlen and paged kernels take: token-major
(total_tokens, heads, head_dim) with cumulative offsets, page-table index tensors. Packing is differentiable
and untimed (in `prepare`). """

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING, Any

from attnbench.backends.base import Unsupported
from attnbench.core import workload

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case

INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Varlen:
    """A varlen kernel's sequences (a document each, or a request each): cumulative offsets from 0, maxima,
    key counts."""

    cu_q: tuple[int, ...]
    cu_k: tuple[int, ...]
    max_q: int
    max_k: int
    kv_lens: tuple[int, ...]

    @property
    def sequences(self) -> int:
        return len(self.cu_q) - 1


def documents_in_pages(case: Case, library: str) -> str | None:
    """The skip reason for documents in a paged cache (a request's pages are one sequence); None otherwise."""
    if case.doc_lens is not None and case.page_size is not None:
        return (f"{library} reads a request's pages as one sequence: documents inside a paged cache would "
                "need a document mask it does not take (attnbench does not map documents with page_size)")
    return None


def varlen(case: Case) -> Varlen:
    """The varlen sequences of `case`: its documents (workload.cu_seqlens, cu_seqlens_k) or its requests (the
    last Sq queries of each request's workload.request_kv_lens keys)."""
    if case.doc_lens is not None:
        keys = workload.doc_key_lens(case)
        cu_q, cu_k = workload.cu_seqlens(case), workload.cu_seqlens_k(case)
        return Varlen(cu_q, cu_k, max(case.doc_lens), max(keys), tuple(keys) * case.batch)
    lens = workload.request_kv_lens(case)
    cu_q = tuple(range(0, (case.batch + 1) * case.seq_len, case.seq_len))
    return Varlen(cu_q, (0, *accumulate(lens)), case.seq_len, max(lens), tuple(lens))


def pack_q(t: torch.Tensor) -> torch.Tensor:
    """Canonical (B, H, S, D) to token-major (B·S, H, D)."""
    b, h, s, d = t.shape
    return t.transpose(1, 2).reshape(b * s, h, d)


def pack_kv(t: torch.Tensor, case: Case) -> torch.Tensor:
    """Canonical K or V (B, KVH, Sk, D) to token-major (total keys, KVH, D);
    ragged requests keep their own keys."""
    import torch

    if case.kv_lens is None:
        return pack_q(t)
    return torch.cat([t[b, :, :n].transpose(0, 1) for b, n in enumerate(case.kv_lens)])


def padded_kv(t: torch.Tensor, case: Case) -> tuple[torch.Tensor, int]:
    """Canonical K or V as padded keys (sequences·pad, KVH, D), sequence i's at the start of slot i, the rest
    workload.JUNK (never read); and `pad`."""
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
    return out.reshape(case.batch, case.seq_len, case.heads, out.shape[-1]).transpose(1, 2)


def int32(values: Any, device: Any) -> torch.Tensor:
    """Varlen and paged kernels' int32 offsets and tables;
    a value past int32 is a skip, never a wrapped offset."""
    import torch

    flat = [int(v) for v in values]
    largest = max(flat, default=0)
    if largest > INT32_MAX:
        raise Unsupported(f"the library takes int32 offsets and page indices; this case needs {largest} "
                          f"(int32 holds at most {INT32_MAX})")
    return torch.tensor(flat, dtype=torch.int32, device=device)


def block_table(layout: workload.Pages, device: Any) -> torch.Tensor:
    """The (B, max pages) int32 block table; the unused tail points at page 0 (never read)."""
    import torch

    return workload.table_tensor(layout, device).to(dtype=torch.int32)


def spare_filled_table(layout: workload.Pages) -> tuple[tuple[int, ...], ...]:
    """The page table with unused entries on a spare page instead of -1, so none aliases a real page
    (xformers)."""
    owned = {page for row in layout.table for page in row if page >= 0}
    spare = next(page for page in range(layout.num_pages) if page not in owned)
    return tuple(tuple(page if page >= 0 else spare for page in row) for row in layout.table)


def flashinfer_page_indices(
        layout: workload.Pages) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """FlashInfer's CSR page table (kv_indptr, kv_indices, kv_last_page_len); last page length in [1,
    page_size] (page.get_seq_lens)."""
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
    """The NHD pool in FlashInfer's HND layout (pages, KVH, page_size, D), contiguous."""
    return pool.transpose(1, 2).contiguous()
