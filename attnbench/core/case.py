"""Case: one attention workload — its shapes and workload axes, its id and its seed. A small value.

How its mask, visible pairs, FLOPs and bytes follow from it is attnbench.core.workload's and attnbench.core.counting's.
"""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass, replace
from typing import Any

from attnbench.core import axes
from attnbench.core.axes import DTYPE_BYTES, DTYPE_SHORT, DTYPES, FP8_DTYPES  # noqa: F401 - their public home

MODES = ("fwd", "bwd", "fwd_bwd")
# The workload axes a backend must map to run a case (attnbench.core.axes: tp only changes the head counts, so it
# needs nothing; the mask kinds are Backend.mask_kinds').
AXES = tuple(a.name for a in axes.TABLE if a.mapped and not a.mask)
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
    return tuple(b - a for a, b in zip(bounds, bounds[1:], strict=False))


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
    # The workload axes beyond the shape, one field each as attnbench.core.axes.TABLE declares them (docs/suites.md
    # "Workloads"); each None/False is the dense case. doc_lens and kv_lens are filled from the case's seed (below)
    # when `documents` / `kv_lengths: random` ask for them; doc_kv_lens are each document's keys when documents carry
    # a cached prefix (its queries are the last doc_lens[d] of its doc_kv_lens[d] keys); head_dim_v None is head_dim;
    # kv_shared is absorbed MLA (V is K's first head_dim_v channels); tp: one GPU's share of a model split by heads;
    # kv_dtype, quant, quant_block, quant_scale: the quantized inputs (attnbench.core.quant); inputs: the distribution
    # Q, K, V are drawn from (None: randn; attnbench.verify.distributions).
    for _field in axes.case_fields():
        __annotations__[_field.name] = _field.annotation
        vars()[_field.name] = _field.default
    del _field

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
            object.__setattr__(self, "doc_kv_lens", tuple(q + s for q, s in zip(self.doc_lens, shares, strict=False)))
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
        return tuple(name for name in axes.used_axes(self) if name in AXES)

    @property
    def mask_kinds(self) -> tuple[str, ...]:
        """The mask kinds this case sets (causal, a window, ...): what a backend must declare (Backend.mask_kinds)."""
        kinds = axes.mask_kinds()
        return tuple(name for name in axes.used_axes(self) if name in kinds)

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
        return axes.id_fragments(self)

    @property
    def seed(self) -> int:
        """The seed inputs are drawn from: derived from the case, so every backend sees the same tensors. A quantized
        case draws its original inputs with its unquantized twin's seed (the same tensors, then quantized), and a case
        with stress inputs its randn twin's (the same draws, then transformed: attnbench.verify.distributions)."""
        twin = self.unquantized if self.quantized else self
        if twin.inputs is not None:
            twin = replace(twin, inputs=None)
        return zlib.crc32(twin.case_id.encode())

    @property
    def layout_seed(self) -> int:
        """The seed of the drawn structures (random doc_lens, kv_lens, the page table): from the batch, the lengths
        and how they are drawn only, so the same workload with or without pages, a score modifier, another dtype or
        mode has the same documents and requests (docs/suites.md "Workloads": pages change only the storage)."""
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
