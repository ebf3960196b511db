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
        return self.visible_pairs() < self.seq_len * self.kv_seq_len

    @property
    def case_id(self) -> str:
        """A short, stable, human-readable name for the case."""
        kv = "" if self.kv_seq_len == self.seq_len else f"-kv{self.kv_seq_len}"
        mask = ("causal" if self.causal else "full") + ("" if self.window is None else f"-w{self.window}")
        return (
            f"{self.device}-{DTYPE_SHORT[self.dtype]}-b{self.batch}-s{self.seq_len}{kv}"
            f"-h{self.heads}-kv{self.kv_heads}-d{self.head_dim}-{mask}-{self.mode}"
        )

    @property
    def seed(self) -> int:
        """The seed inputs are drawn from: derived from the case, so every backend sees the same tensors."""
        return zlib.crc32(self.case_id.encode())

    def fields(self) -> dict[str, Any]:
        return asdict(self)

    # ---- the mask -------------------------------------------------------------------------
    def key_range(self, query: int) -> tuple[int, int]:
        """The inclusive range [lo, hi] of keys query `query` may see (possibly empty: lo > hi)."""
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
        """The (rows, Sk) boolean mask for the given query rows (all rows by default); None when unmasked."""
        import torch

        if not self.has_mask:
            return None
        q = torch.arange(self.seq_len, device=device) if rows is None else rows.to(device)
        k = torch.arange(self.kv_seq_len, device=device)
        return self.allowed(q[:, None], k[None, :])

    def visible_pairs(self) -> int:
        """The exact number of (query, key) pairs the mask lets through, counted row by row."""
        return self._visible

    @cached_property
    def _visible(self) -> int:
        import numpy as np

        lo, hi = self._key_ranges()
        return int(np.maximum(hi - lo + 1, 0).sum())

    def _key_ranges(self) -> tuple[Any, Any]:
        """key_range of every query at once, as two int64 arrays (a 32K-token case in microseconds, not 0.1 s)."""
        import numpy as np

        pos = np.arange(self.seq_len, dtype=np.int64) + self.offset
        lo = np.zeros_like(pos)
        hi = np.full_like(pos, self.kv_seq_len - 1)
        if self.causal:
            hi = np.minimum(hi, pos)
            if self.window is not None:
                lo = np.maximum(lo, pos - self.window)
        elif self.window is not None:
            lo, hi = np.maximum(lo, pos - self.window), np.minimum(hi, pos + self.window)
        return lo, hi

    # ---- work and memory ------------------------------------------------------------------
    def flops(self) -> int:
        """FLOPs of the measured mode: 4·B·H·D·visible for forward, ×2.5 backward, ×3.5 fwd+bwd."""
        forward = 4 * self.batch * self.heads * self.head_dim * self.visible_pairs()
        return int(forward * MODE_FLOP_FACTOR[self.mode])

    def tensor_bytes(self) -> dict[str, int]:
        """Bytes of Q, K, V and O in the case's dtype."""
        elem = DTYPE_BYTES[self.dtype]
        q = self.batch * self.heads * self.seq_len * self.head_dim * elem
        kv = self.batch * self.kv_heads * self.kv_seq_len * self.head_dim * elem
        return {"q": q, "k": kv, "v": kv, "o": q}

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
        kv = (sizes["k"] + sizes["v"]) * self.keys_seen() // self.kv_seq_len
        qkv, out = MODE_BYTE_FACTOR[self.mode]
        return qkv * (sizes["q"] + kv) + out * sizes["o"]

    def keys_seen(self) -> int:
        """How many keys at least one query may see: the rows of K and V a kernel must read (a window skips the rest)."""
        return self._keys_seen

    @cached_property
    def _keys_seen(self) -> int:
        import numpy as np

        # Every query's range starts and ends no earlier than the previous one's, so a range adds the keys
        # past the furthest end seen before it.
        lo, hi = self._key_ranges()
        nonempty = hi >= lo
        lo, hi = lo[nonempty], hi[nonempty]
        if not len(hi):
            return 0
        before = np.concatenate(([-1], np.maximum.accumulate(hi)[:-1]))
        return int(np.maximum(hi - np.maximum(lo, before + 1) + 1, 0).sum())

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
            estimate += 2 * self.batch * self.heads * self.kv_seq_len * self.head_dim * elem
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
            f"d{self.head_dim} {mask} {self.mode}"
        )
