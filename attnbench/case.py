"""Case: one attention workload — its shapes, mask (GUIDE.md's conventions), FLOPs and memory estimate."""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

DTYPES = ("float32", "float16", "bfloat16")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
DTYPE_SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
MODES = ("fwd", "bwd", "fwd_bwd")
# Backward = 2.5x forward, fwd_bwd = 3.5x: FlashAttention's benchmark accounting (GUIDE.md).
MODE_FLOP_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}
# How many times each of (Q + K + V) and O's size is moved per mode (the traffic floor, GUIDE.md "Counting work"):
# fwd reads Q, K, V and writes O; bwd reads Q, K, V, O and dO and writes dQ, dK, dV; fwd_bwd does both.
MODE_BYTE_FACTOR = {"fwd": (1, 1), "bwd": (2, 2), "fwd_bwd": (3, 3)}


def allowed(q_idx: Any, k_idx: Any, offset: int, causal: bool, window: int | None) -> Any:
    """GUIDE.md's mask on index tensors: True where query q_idx may see key k_idx, for queries that are the last
    positions (offset = Sk - Sq). The one definition every backend's mask and the reference come from."""
    pos = q_idx + offset
    keep = k_idx <= pos if causal else k_idx >= 0
    if window is not None:
        keep = keep & (pos - k_idx <= window)
        if not causal:
            keep = keep & (k_idx - pos <= window)
    return keep


@dataclass(frozen=True)
class Case:
    """The workload a backend is measured on. Canonical layout is (batch, heads, seq, head_dim)."""

    device: str
    dtype: str
    batch: int
    seq_len: int
    kv_seq_len: int
    heads: int
    kv_heads: int
    head_dim: int
    causal: bool
    window: int | None
    mode: str
    # Workload axes (GUIDE.md); each None/False means the dense case. doc_lens and kv_lens are filled from the
    # case's seed by attnbench.workload when `documents` / `kv_lengths: random` ask for them.
    documents: int | None = None
    doc_lengths: str | None = None  # "equal", "random" or "explicit" (doc_lens given)
    doc_lens: tuple[int, ...] | None = None
    kv_lengths: str | None = None  # "random"; None: every request has kv_seq_len keys
    kv_lens: tuple[int, ...] | None = None
    page_size: int | None = None
    softcap: float | None = None
    alibi: bool = False
    head_dim_v: int | None = None  # None: head_dim
    kv_shared: bool = False  # absorbed MLA: V is the first head_dim_v channels of K (GUIDE.md)
    tp: int | None = None  # the case is one GPU's share of a model split over tp GPUs by heads

    def __post_init__(self) -> None:
        """Lists (a record read back from JSON) become tuples; drawn structures are drawn from the seed."""
        from attnbench import workload

        for name in ("doc_lens", "kv_lens"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(int(v) for v in value))
        if self.documents is not None and self.doc_lens is None:
            kind = self.doc_lengths or "equal"
            object.__setattr__(self, "doc_lengths", kind)
            lens = (workload.random_doc_lens(self.seq_len, self.documents, self.layout_seed) if kind == "random"
                    else workload.equal_doc_lens(self.seq_len, self.documents))
            object.__setattr__(self, "doc_lens", lens)
        if self.kv_lengths == "random" and self.kv_lens is None:
            object.__setattr__(self, "kv_lens", workload.random_kv_lens(self.batch, self.seq_len, self.kv_seq_len,
                                                                        self.layout_seed))

    @property
    def v_dim(self) -> int:
        """V's and O's head size: head_dim_v, else head_dim."""
        return self.head_dim if self.head_dim_v is None else self.head_dim_v

    @property
    def workload_axes(self) -> tuple[str, ...]:
        """The workload axes this case sets (attnbench.workload.AXES), which a backend must map to run it."""
        from attnbench.workload import axes_used

        return axes_used(self)

    @property
    def offset(self) -> int:
        """Queries are the last `seq_len` of `kv_seq_len` positions: off = Sk - Sq (bottom-right)."""
        return self.kv_seq_len - self.seq_len

    @property
    def needs_grad(self) -> bool:
        return self.mode != "fwd"

    @property
    def group_size(self) -> int:
        """Query heads per KV head: query head h reads KV head h // group_size."""
        return self.heads // self.kv_heads

    @property
    def has_mask(self) -> bool:
        """Whether any (query, key) pair is masked out."""
        return self.visible_total() < self.batch * self.seq_len * self.kv_seq_len

    @property
    def case_id(self) -> str:
        """A short, stable, human-readable name for the case."""
        kv = "" if self.kv_seq_len == self.seq_len else f"-kv{self.kv_seq_len}"
        mask = ("causal" if self.causal else "full") + ("" if self.window is None else f"-w{self.window}")
        return (
            f"{self.device}-{DTYPE_SHORT[self.dtype]}-b{self.batch}-s{self.seq_len}{kv}"
            f"-h{self.heads}-kv{self.kv_heads}-d{self.head_dim}-{mask}{self._workload_id()}-{self.mode}"
        )

    def _workload_id(self) -> str:
        """The workload axes in the case_id: '' for the dense case, so existing ids never change."""
        parts = []
        if self.documents is not None:
            if self.doc_lengths == "explicit":
                parts.append("docs" + "+".join(str(n) for n in self.doc_lens or ()))
            else:
                parts.append(f"doc{self.documents}" + ("rand" if self.doc_lengths == "random" else ""))
        if self.kv_lengths is not None:
            parts.append(f"kv{self.kv_lengths}")
        if self.page_size is not None:
            parts.append(f"page{self.page_size}")
        if self.softcap is not None:
            parts.append(f"cap{self.softcap:g}")
        if self.alibi:
            parts.append("alibi")
        if self.head_dim_v is not None:
            parts.append(f"dv{self.head_dim_v}")
        if self.kv_shared:
            parts.append("kvshared")
        if self.tp is not None:
            parts.append(f"tp{self.tp}")
        return "".join("-" + p for p in parts)

    @property
    def seed(self) -> int:
        """The seed inputs are drawn from: derived from the case, so every backend sees the same tensors."""
        return zlib.crc32(self.case_id.encode())

    @property
    def layout_seed(self) -> int:
        """The seed of the drawn structures (random doc_lens, kv_lens, the page table): from the batch, the lengths
        and how they are drawn only, so the same workload with or without pages, a score modifier, another dtype or
        mode has the same documents and requests (GUIDE.md: pages change only the storage)."""
        key = f"{self.batch}-{self.seq_len}-{self.kv_seq_len}-{self.documents}-{self.doc_lengths}-{self.kv_lengths}"
        return zlib.crc32(key.encode())

    def fields(self) -> dict[str, Any]:
        return asdict(self)

    # ---- the mask -------------------------------------------------------------------------
    def key_range(self, query: int) -> tuple[int, int]:
        """The inclusive range [lo, hi] of keys query `query` may see (possibly empty: lo > hi); one row's, so for
        the dense mask only (attnbench.workload.key_ranges has every row's)."""
        assert self.doc_lens is None and self.kv_lens is None, "a per-row mask: use attnbench.workload.key_ranges"
        pos = query + self.offset
        lo, hi = 0, self.kv_seq_len - 1
        if self.causal:
            hi = min(hi, pos)
            if self.window is not None:
                lo = max(lo, pos - self.window)
        elif self.window is not None:
            lo, hi = max(lo, pos - self.window), min(hi, pos + self.window)
        return lo, hi

    def allowed(self, q_idx: torch.Tensor, k_idx: torch.Tensor) -> torch.Tensor:
        """Boolean mask, True where query q_idx may attend to key k_idx (broadcasting tensors)."""
        return allowed(q_idx, k_idx, self.offset, self.causal, self.window)

    def mask(self, rows: torch.Tensor | None = None, device: Any = None) -> torch.Tensor | None:
        """The (rows, Sk) boolean mask for the given query rows (all rows by default); None when unmasked. The dense
        case's one row of attnbench.workload.visibility."""
        from attnbench.workload import visibility

        assert self.doc_lens is None and self.kv_lens is None, "a per-row mask: use attnbench.workload.visibility"
        mask = visibility(self, rows, device)
        return None if mask is None else mask[0]

    def visible_pairs(self) -> int:
        """The exact number of (query, key) pairs the mask lets through in one batch row, counted row by row.
        With ragged cache lengths the rows differ: this is then the batch's total over `batch`, rounded down
        (visible_total is exact)."""
        return self.visible_total() // self.batch

    def visible_total(self) -> int:
        """The exact number of (query, key) pairs the mask lets through over the whole batch (GUIDE.md's
        `visible`, summed per document and per request)."""
        return self._visible

    @cached_property
    def _visible(self) -> int:
        import numpy as np

        lo, hi = self._key_ranges()
        per_rows = int(np.maximum(hi - lo + 1, 0).sum())
        return per_rows * (self.batch if len(lo) == 1 else 1)

    def _key_ranges(self) -> tuple[Any, Any]:
        """key_range of every query at once, as two (R, Sq) int64 arrays (attnbench.workload.key_ranges; a
        32K-token case in microseconds, not 0.1 s). R is 1 when every batch row has the same mask."""
        return self._ranges

    @cached_property
    def _ranges(self) -> tuple[Any, Any]:
        from attnbench.workload import key_ranges

        return key_ranges(self)

    def empty_query(self) -> tuple[int, int] | None:
        """(batch row, query) of the first query that would see no key; None when every query sees one."""
        import numpy as np

        lo, hi = self._key_ranges()
        empty = np.argwhere(hi < lo)
        if not len(empty):
            return None
        row, query = (int(v) for v in empty[0])
        return row, query

    # ---- work and memory ------------------------------------------------------------------
    def flops(self) -> int:
        """FLOPs of the measured mode: 2·H·(D + Dv)·visible over the batch for forward (4·B·H·D·visible per row
        when the head sizes agree), ×2.5 backward, ×3.5 fwd+bwd."""
        forward = 2 * self.heads * (self.head_dim + self.v_dim) * self.visible_total()
        return int(forward * MODE_FLOP_FACTOR[self.mode])

    def tensor_bytes(self) -> dict[str, int]:
        """Bytes of Q, K, V and O in the case's dtype (V and O with head_dim_v)."""
        elem = DTYPE_BYTES[self.dtype]
        rows = self.batch * self.seq_len * self.heads * elem
        keys = self.batch * self.kv_heads * self.kv_seq_len * elem
        return {"q": rows * self.head_dim, "k": keys * self.head_dim, "v": keys * self.v_dim, "o": rows * self.v_dim}

    def io_bytes(self) -> int:
        """Bytes of Q, K, V read and O written once: the memory traffic floor of one forward call."""
        return sum(self.tensor_bytes().values())

    def bytes_moved(self) -> int:
        """The memory traffic floor of the measured mode: every tensor read or written exactly once.

        fwd: Q, K, V read, O written (io_bytes). bwd: Q, K, V, O and dO read, dQ, dK, dV written
        (softmax statistics are a row each, left out). fwd_bwd: the two together. Only the K/V rows some
        query may see count: a decode step with a window reads W + 1 keys of its cache, not all of it.
        """
        sizes = self.tensor_bytes()
        kv = (sizes["k"] + sizes["v"]) * self.key_rows_read() // (self.batch * self.kv_seq_len)
        qkv, out = MODE_BYTE_FACTOR[self.mode]
        return qkv * (sizes["q"] + kv) + out * sizes["o"]

    def keys_seen(self) -> int:
        """How many keys at least one query of a batch row may see: the rows of K and V a kernel must read (a
        window skips the rest). With ragged cache lengths, the batch's total over `batch`, rounded down."""
        return self._seen_total // self.batch

    def key_rows_read(self) -> int:
        """K/V rows (per KV head) read over the whole batch: the keys some query sees, or with pages, every row
        of each page holding such a key (a kernel reads whole pages)."""
        if self.page_size is None:
            return self._seen_total
        return sum(len(pages) for pages in self._seen_pages) * self.page_size * (
            self.batch if len(self._seen_pages) == 1 else 1)

    @cached_property
    def _seen_total(self) -> int:
        per_rows = sum(int(keys.sum()) for keys in self._seen_keys)
        return per_rows * (self.batch if len(self._seen_keys) == 1 else 1)

    @cached_property
    def _seen_keys(self) -> list[Any]:
        """Per distinct row, a boolean over the keys: seen by some query (ranges marked with a difference array)."""
        import numpy as np

        lo, hi = self._key_ranges()
        rows = []
        for row_lo, row_hi in zip(lo, hi):
            keep = row_hi >= row_lo
            marks = np.zeros(self.kv_seq_len + 1, dtype=np.int64)
            np.add.at(marks, row_lo[keep], 1)
            np.add.at(marks, row_hi[keep] + 1, -1)
            rows.append(np.cumsum(marks[:-1]) > 0)
        return rows

    @cached_property
    def _seen_pages(self) -> list[set[int]]:
        import numpy as np

        assert self.page_size is not None
        return [set((np.flatnonzero(keys) // self.page_size).tolist()) for keys in self._seen_keys]

    @property
    def memory_bound(self) -> bool:
        """Decode-like: one query row per head over a KV cache, so reading K and V is the work's floor."""
        return self.seq_len == 1

    def memory_estimate(self, materialises_scores: bool, expands_kv: bool = False) -> int:
        """Analytic peak bytes above the inputs: the output (and grads), plus scores when materialised."""
        sizes = self.tensor_bytes()
        elem = DTYPE_BYTES[self.dtype]
        estimate = sizes["o"]
        if expands_kv and self.kv_heads != self.heads:
            estimate += self.batch * self.heads * self.kv_seq_len * (self.head_dim + self.v_dim) * elem
        if self.needs_grad:
            estimate += sizes["q"] + sizes["k"] + sizes["v"]
        if materialises_scores:
            scores = self.batch * self.heads * self.seq_len * self.kv_seq_len * elem
            # scores and probabilities live together; backward keeps both and their gradient
            estimate += scores * (3 if self.needs_grad else 2)
        return estimate

    def describe(self) -> str:
        """The case in words, for progress lines and tables."""
        heads = f"{self.heads}/{self.kv_heads} heads"
        kv = f" kv {self.kv_seq_len}" if self.kv_seq_len != self.seq_len else ""
        mask = "causal" if self.causal else "full"
        if self.window is not None:
            mask += f" w{self.window}"
        return (
            f"{DTYPE_SHORT[self.dtype]} b{self.batch} seq {self.seq_len}{kv} {heads} "
            f"d{self.head_dim} {mask}{self._workload_id().replace('-', ' ')} {self.mode}"
        )
