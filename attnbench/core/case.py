"""Case: one attention workload — its shapes and workload axes, its id and its seed. A small value.

How its mask, visible pairs, FLOPs and bytes follow from it is attnbench.core.workload's and attnbench.core.counting's.
"""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass, replace
from typing import Any

DTYPES = ("float32", "float16", "bfloat16")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
DTYPE_SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
# The FP8 formats a case's Q/K/V (dtype) or its K/V cache alone (kv_dtype) may be quantized to (attnbench.core.quant).
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
DTYPE_BYTES.update({name: 1 for name in FP8_DTYPES})
DTYPE_SHORT.update({"float8_e4m3fn": "fp8e4m3", "float8_e5m2": "fp8e5m2"})
MODES = ("fwd", "bwd", "fwd_bwd")
# The workload axes a backend must map to run a case (tp only changes the head counts, so it needs nothing).
AXES = ("documents", "kv_lengths", "page_size", "softcap", "alibi", "head_dim_v", "kv_shared")
# Seed streams of the drawn lengths, so that adding one structure never changes another's draw (attnbench.core.workload
# draws the page table from STREAM_PAGES).
STREAM_DOCS, STREAM_KV, STREAM_PAGES = 1, 2, 3
DEFAULT_QUANT_BLOCK = 128  # tokens per scale with `quant: {granularity: block}`


def equal_doc_lens(seq_len: int, documents: int) -> tuple[int, ...]:
    """`documents` lengths as even as possible: the remainder one token each over the first documents."""
    base, extra = divmod(seq_len, documents)
    return tuple(base + (1 if i < extra else 0) for i in range(documents))


def random_doc_lens(seq_len: int, documents: int, seed: int) -> tuple[int, ...]:
    """`documents` lengths, each >= 1, summing to `seq_len`: the cuts between them are distinct positions drawn
    uniformly from 1..seq_len-1 (a spread like packed real documents: many short, a few long)."""
    import numpy as np

    rng = np.random.default_rng([seed, STREAM_DOCS])
    cuts = np.sort(rng.choice(np.arange(1, seq_len), size=documents - 1, replace=False)) if documents > 1 else []
    bounds = [0, *(int(c) for c in cuts), seq_len]
    return tuple(b - a for a, b in zip(bounds, bounds[1:]))


def random_kv_lens(batch: int, seq_len: int, kv_seq_len: int, seed: int) -> tuple[int, ...]:
    """Each request's cache length, uniform in seq_len..kv_seq_len (it must hold its own seq_len queries)."""
    import numpy as np

    rng = np.random.default_rng([seed, STREAM_KV])
    return tuple(int(n) for n in rng.integers(max(1, seq_len), kv_seq_len + 1, size=batch))


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
    # case's seed (below) when `documents` / `kv_lengths: random` ask for them.
    documents: int | None = None
    doc_lengths: str | None = None  # "equal", "random" or "explicit" (doc_lens given)
    doc_lens: tuple[int, ...] | None = None  # each document's queries (explicit lengths may be 0)
    # Each document's keys when documents carry a cached prefix (kv_seq_len != seq_len): its queries are the last
    # doc_lens[d] of its doc_kv_lens[d] keys. None: every document's keys are its queries.
    doc_kv_lens: tuple[int, ...] | None = None
    kv_lengths: str | None = None  # "random" or "explicit" (kv_lens given); None: every request has kv_seq_len keys
    kv_lens: tuple[int, ...] | None = None
    page_size: int | None = None
    softcap: float | None = None
    alibi: bool = False
    head_dim_v: int | None = None  # None: head_dim
    kv_shared: bool = False  # absorbed MLA: V is the first head_dim_v channels of K (GUIDE.md)
    tp: int | None = None  # the case is one GPU's share of a model split over tp GPUs by heads
    # Quantized inputs (GUIDE.md "quantized inputs", attnbench.core.quant): an FP8 `dtype` quantizes Q, K and V; `kv_dtype`
    # the K/V cache alone (queries stay in `dtype`). `quant` is the scales' granularity ("tensor", "head", "block":
    # filled with "tensor" when the case is quantized), `quant_block` the tokens per block, `quant_scale` a fixed
    # descale factor (None: each scale from its granule's amax).
    kv_dtype: str | None = None
    quant: str | None = None
    quant_block: int | None = None
    quant_scale: float | None = None

    def __post_init__(self) -> None:
        """Lists (a record read back from JSON) become tuples; drawn structures are drawn from the seed."""
        for name in ("doc_lens", "doc_kv_lens", "kv_lens"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(int(v) for v in value))
        if self.documents is not None and self.doc_lens is None:
            kind = self.doc_lengths or "equal"
            object.__setattr__(self, "doc_lengths", kind)
            lens = (random_doc_lens(self.seq_len, self.documents, self.layout_seed) if kind == "random"
                    else equal_doc_lens(self.seq_len, self.documents))
            object.__setattr__(self, "doc_lens", lens)
        if self.documents is not None and self.doc_kv_lens is None and self.kv_seq_len != self.seq_len:
            # a cached prefix over packed documents: each document's keys are its queries and an equal share of it
            assert self.doc_lens is not None and self.kv_seq_len > self.seq_len, "explicit [q, k] pairs otherwise"
            shares = equal_doc_lens(self.kv_seq_len - self.seq_len, len(self.doc_lens))
            object.__setattr__(self, "doc_kv_lens", tuple(q + s for q, s in zip(self.doc_lens, shares)))
        if self.kv_lengths == "random" and self.kv_lens is None:
            object.__setattr__(self, "kv_lens", random_kv_lens(self.batch, self.seq_len, self.kv_seq_len,
                                                                        self.layout_seed))
        if self.quantized and self.quant is None:
            object.__setattr__(self, "quant", "tensor")
        if self.quant == "block" and self.quant_block is None:
            object.__setattr__(self, "quant_block", DEFAULT_QUANT_BLOCK)

    @property
    def quantized(self) -> bool:
        """Whether attnbench quantizes this case's inputs (an FP8 dtype, or an FP8 K/V cache)."""
        return self.dtype in FP8_DTYPES or self.kv_dtype is not None

    @property
    def unquantized(self) -> Case:
        """The same case before quantization: its original inputs (bf16 for an FP8 dtype, the queries' dtype for an
        FP8 K/V cache) are that case's, drawn from its seed, so an FP8 case and its bf16 twin share their originals."""
        dtype = "bfloat16" if self.dtype in FP8_DTYPES else self.dtype
        return replace(self, dtype=dtype, kv_dtype=None, quant=None, quant_block=None, quant_scale=None)

    @property
    def v_dim(self) -> int:
        """V's and O's head size: head_dim_v, else head_dim."""
        return self.head_dim if self.head_dim_v is None else self.head_dim_v

    @property
    def workload_axes(self) -> tuple[str, ...]:
        """The workload axes this case sets, in AXES order: what a backend must map to run it."""
        used = {"documents": self.documents is not None, "kv_lengths": self.kv_lens is not None,
                "page_size": self.page_size is not None, "softcap": self.softcap is not None,
                "alibi": bool(self.alibi), "head_dim_v": self.head_dim_v is not None,
                "kv_shared": bool(self.kv_shared)}
        return tuple(name for name in AXES if used[name])

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
                pairs = zip(self.doc_lens or (), self.doc_kv_lens or self.doc_lens or ())
                parts.append("docs" + "+".join(str(q) if q == k else f"{q}of{k}" for q, k in pairs))
            else:
                parts.append(f"doc{self.documents}" + ("rand" if self.doc_lengths == "random" else ""))
        if self.kv_lengths == "explicit":
            parts.append("kvlens" + "+".join(str(n) for n in self.kv_lens or ()))
        elif self.kv_lengths is not None:
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
        if self.kv_dtype is not None:
            parts.append(f"kv{DTYPE_SHORT[self.kv_dtype]}")
        if self.quant is not None:
            block = self.quant_block if self.quant == "block" else ""
            parts.append(f"q{self.quant}{block}" + ("" if self.quant_scale is None else f"-scale{self.quant_scale:g}"))
        return "".join("-" + p for p in parts)

    @property
    def seed(self) -> int:
        """The seed inputs are drawn from: derived from the case, so every backend sees the same tensors. A quantized
        case draws its original inputs with its unquantized twin's seed (the same tensors, then quantized)."""
        return zlib.crc32((self.unquantized if self.quantized else self).case_id.encode())

    @property
    def layout_seed(self) -> int:
        """The seed of the drawn structures (random doc_lens, kv_lens, the page table): from the batch, the lengths
        and how they are drawn only, so the same workload with or without pages, a score modifier, another dtype or
        mode has the same documents and requests (GUIDE.md: pages change only the storage)."""
        key = f"{self.batch}-{self.seq_len}-{self.kv_seq_len}-{self.documents}-{self.doc_lengths}-{self.kv_lengths}"
        return zlib.crc32(key.encode())

    def fields(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def memory_bound(self) -> bool:
        """Decode-like: one query row per head over a KV cache, so reading K and V is the work's floor."""
        return self.seq_len == 1

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


def group_of(case: Case) -> tuple:
    """A case without its sequence lengths (nor the document and request lengths drawn from them): the cases
    whose memory grows only with the sequence."""
    fields = case.fields()
    del fields["seq_len"], fields["kv_seq_len"], fields["doc_lens"], fields["doc_kv_lens"], fields["kv_lens"]
    return tuple(sorted(fields.items()))
