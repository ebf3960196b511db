"""Case: one attention workload, a small frozen value."""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass, replace
from itertools import pairwise
from typing import Any

from attnbench.core import axes
from attnbench.core.axes import DTYPE_BYTES, DTYPE_SHORT, DTYPES, FP8_DTYPES  # noqa: F401 - their public home

MODES = ("fwd", "bwd", "fwd_bwd")
AXES = tuple(a.name for a in axes.TABLE if a.mapped and not a.mask)
# seed streams: adding one structure never changes another's draw
STREAM_DOCS, STREAM_KV, STREAM_PAGES = 1, 2, 3
DEFAULT_QUANT_BLOCK = 128  # tokens per scale


def equal_doc_lens(seq_len: int, documents: int) -> tuple[int, ...]:
    base, extra = divmod(seq_len, documents)
    return tuple(base + (1 if i < extra else 0) for i in range(documents))


def random_doc_lens(seq_len: int, documents: int, seed: int) -> tuple[int, ...]:
    """Cut at distinct uniform positions: many short, a few long."""
    import numpy as np

    rng = np.random.default_rng([seed, STREAM_DOCS])
    cuts = []
    if documents > 1:
        cuts = np.sort(rng.choice(np.arange(1, seq_len), size=documents - 1, replace=False))
    bounds = [0, *(int(c) for c in cuts), seq_len]
    return tuple(b - a for a, b in pairwise(bounds))


def random_kv_lens(batch: int, seq_len: int, kv_seq_len: int, seed: int) -> tuple[int, ...]:
    import numpy as np

    rng = np.random.default_rng([seed, STREAM_KV])
    return tuple(int(n) for n in rng.integers(max(1, seq_len), kv_seq_len + 1, size=batch))


@dataclass(frozen=True)
class Case:
    """Canonical layout (batch, heads, seq, head_dim)."""

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
    # the workload axes' fields (axes.TABLE); None/False is the dense case
    for _field in axes.case_fields():
        __annotations__[_field.name] = _field.annotation
        vars()[_field.name] = _field.default
    del _field

    def __post_init__(self) -> None:
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
            assert self.doc_lens is not None and self.kv_seq_len > self.seq_len, ("explicit [q, k] "
                                                                                  "pairs otherwise")
            shares = equal_doc_lens(self.kv_seq_len - self.seq_len, len(self.doc_lens))
            object.__setattr__(self, "doc_kv_lens",
                               tuple(q + s for q, s in zip(self.doc_lens, shares, strict=False)))
        if self.kv_lengths == "random" and self.kv_lens is None:
            object.__setattr__(self, "kv_lens", random_kv_lens(self.batch, self.seq_len, self.kv_seq_len,
                                                                        self.layout_seed))
        if self.quantized and self.quant is None:
            object.__setattr__(self, "quant", "tensor")
        if self.quant == "block" and self.quant_block is None:
            object.__setattr__(self, "quant_block", DEFAULT_QUANT_BLOCK)

    @property
    def quantized(self) -> bool:
        return self.dtype in FP8_DTYPES or self.kv_dtype is not None

    @property
    def unquantized(self) -> Case:
        """An FP8 case and its bf16 twin share their original inputs."""
        dtype = "bfloat16" if self.dtype in FP8_DTYPES else self.dtype
        return replace(self, dtype=dtype, kv_dtype=None, quant=None, quant_block=None, quant_scale=None)

    @property
    def v_dim(self) -> int:
        return self.head_dim if self.head_dim_v is None else self.head_dim_v

    @property
    def workload_axes(self) -> tuple[str, ...]:
        return tuple(name for name in axes.used_axes(self) if name in AXES)

    @property
    def mask_kinds(self) -> tuple[str, ...]:
        kinds = axes.mask_kinds()
        return tuple(name for name in axes.used_axes(self) if name in kinds)

    @property
    def offset(self) -> int:
        """Bottom-right: queries are the last `seq_len` positions."""
        return self.kv_seq_len - self.seq_len

    @property
    def needs_grad(self) -> bool:
        return self.mode != "fwd"

    @property
    def group_size(self) -> int:
        return self.heads // self.kv_heads

    @property
    def case_id(self) -> str:
        kv = "" if self.kv_seq_len == self.seq_len else f"-kv{self.kv_seq_len}"
        mask = ("causal" if self.causal else "full") + ("" if self.window is None else f"-w{self.window}")
        return (
            f"{self.device}-{DTYPE_SHORT[self.dtype]}-b{self.batch}-s{self.seq_len}{kv}"
            f"-h{self.heads}-kv{self.kv_heads}-d{self.head_dim}-{mask}{self._workload_id()}-{self.mode}"
        )

    def _workload_id(self) -> str:
        return axes.id_fragments(self)

    @property
    def seed(self) -> int:
        """Every backend sees the same tensors; a quantized or stress-input case draws its plain twin's."""
        twin = self.unquantized if self.quantized else self
        if twin.inputs is not None:
            twin = replace(twin, inputs=None)
        return zlib.crc32(twin.case_id.encode())

    @property
    def layout_seed(self) -> int:
        """From the lengths only: pages, dtype or mode keep the same documents."""
        key = (f"{self.batch}-{self.seq_len}-{self.kv_seq_len}-"
               f"{self.documents}-{self.doc_lengths}-{self.kv_lengths}")
        return zlib.crc32(key.encode())

    def fields(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def memory_bound(self) -> bool:
        return self.seq_len == 1

    def describe(self) -> str:
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
    """The cases whose memory grows only with the sequence."""
    fields = case.fields()
    del fields["seq_len"], fields["kv_seq_len"], fields["doc_lens"], fields["doc_kv_lens"], fields["kv_lens"]
    return tuple(sorted(fields.items()))
