"""The suite file's schema: strict pydantic models of the YAML as written (extra keys forbidden, values bounded).
attnbench.sweep.suite reads a file through them and expands it into Cases."""

from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_SEQ = 1 << 21  # 2M tokens: anything larger is a typo, not a benchmark
MAX_HEADS = 1024
MAX_HEAD_DIM = 1024
MAX_BATCH = 1 << 16

Dtype = Literal["float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"]
# An FP8 K/V cache under queries of the case's dtype (attnbench.core.quant).
KvDtype = Literal["float8_e4m3fn", "float8_e5m2"]
Mode = Literal["fwd", "bwd", "fwd_bwd"]
KvHeads = Union[Literal["heads"], int]
# `documents`: a count, or an explicit list whose items are a document's length (its queries, which are its keys) or
# a [queries, keys] pair (a document with a cached prefix, FlashAttention's cu_seqlens_q / cu_seqlens_k); null for
# one dense sequence per row.
Documents = Union[int, list[Union[int, list[int]]], None]
Spread = Literal["equal", "random"]
# `kv_lengths`: equal (every request has kv_seq_len keys), random (seeded), or an explicit list, one per request.
KvLengths = Union[Spread, list[int]]


def _as_list(value: Any) -> Any:
    """Let a single value stand for a one-element axis (`causal: true` means `[true]`)."""
    return value if isinstance(value, list) else [value]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Quant(_Strict):
    """How attnbench quantizes a quantized case's inputs (attnbench.core.quant): one descale factor per tensor, per (batch
    row, KV head), or per block of `block` tokens of each (batch row, head); each from its granule's amax (the amax
    maps to the format's largest value), or one fixed descale factor `scale` for every tensor."""

    granularity: Literal["tensor", "head", "block"] = "tensor"
    block: int | None = None
    scale: Union[Literal["amax"], float] = "amax"

    @field_validator("block")
    @classmethod
    def _block(cls, value: int | None) -> int | None:
        return None if value is None else _bounded([value], 1, MAX_SEQ)[0]

    @field_validator("scale", mode="before")
    @classmethod
    def _scale(cls, value: Any) -> Any:
        if isinstance(value, bool) or value == "amax":
            return value
        if isinstance(value, (int, float)):
            if not 0 < value < float("inf"):  # NaN fails both comparisons
                raise ValueError(f"{value!r} is out of range; allowed: a positive finite descale factor, or amax")
            return float(value)
        return value

    @model_validator(mode="after")
    def _block_needs_blocks(self) -> Quant:
        if self.block is not None and self.granularity != "block":
            raise ValueError(f"block {self.block} is given with granularity {self.granularity}; allowed: block only "
                             "with granularity block")
        return self


class Axes(_Strict):
    """The sweep axes; every list is crossed with every other."""

    batch: list[int] = Field(default=[1], min_length=1)
    seq_len: list[int] = Field(min_length=1)
    kv_seq_len: list[int] | None = Field(default=None, min_length=1)
    heads: list[int] = Field(min_length=1)
    kv_heads: list[KvHeads] = Field(default=["heads"], min_length=1)
    head_dim: list[int] = Field(min_length=1)
    dtype: list[Dtype] = Field(default=["float32"], min_length=1)
    causal: list[bool] = Field(default=[False], min_length=1)
    window: list[int | None] = Field(default=[None], min_length=1)
    mode: list[Mode] = Field(default=["fwd"], min_length=1)
    # Workload axes (GUIDE.md "Workload axes"); the defaults are the dense case.
    documents: list[Documents] = Field(default=[None], min_length=1)
    doc_lengths: list[Spread] = Field(default=["equal"], min_length=1)
    kv_lengths: list[KvLengths] = Field(default=["equal"], min_length=1)
    page_size: list[int | None] = Field(default=[None], min_length=1)
    softcap: list[float | None] = Field(default=[None], min_length=1)
    alibi: list[bool] = Field(default=[False], min_length=1)
    head_dim_v: list[int | None] = Field(default=[None], min_length=1)
    kv_shared: list[bool] = Field(default=[False], min_length=1)
    tp: list[int] = Field(default=[1], min_length=1)
    kv_dtype: list[KvDtype | None] = Field(default=[None], min_length=1)
    quant: list[Quant | None] = Field(default=[None], min_length=1)

    _lists = field_validator(
        "batch", "seq_len", "kv_seq_len", "heads", "kv_heads", "head_dim", "dtype", "causal", "mode",
        "doc_lengths", "kv_lengths", "alibi", "kv_shared", "tp", mode="before",
    )(lambda value: value if value is None else _as_list(value))
    # Axes whose values may be null: a bare `window: null` is the one-value axis [null] (in a cpu: block too,
    # where it once reached the validators as None and crashed with a traceback).
    _nullable_lists = field_validator("window", "documents", "page_size", "softcap", "head_dim_v", "kv_dtype", "quant",
                                      mode="before")(
        lambda value: [None] if value is None else _as_list(value))

    @field_validator("documents")
    @classmethod
    def _documents(cls, value: list[Documents]) -> list[Documents]:
        for entry in value:
            if isinstance(entry, list):
                if not entry:
                    raise ValueError("an explicit list of document lengths is empty")
                for item in entry:
                    if isinstance(item, list) and len(item) != 2:
                        raise ValueError(f"{item} is not a document; allowed: a length, or a [queries, keys] pair")
                    _bounded(item if isinstance(item, list) else [item], 0, MAX_SEQ)
            elif entry is not None:
                _bounded([entry], 1, MAX_SEQ)
        return value

    @field_validator("kv_lengths", mode="before")
    @classmethod
    def _explicit_inside(cls, value: Any) -> Any:
        """`kv_lengths: [4, 16, 24]` is three values of the axis, none of them allowed: say where the list goes."""
        if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise ValueError(f"explicit cache lengths go in a list inside the axis list: [{value}]; allowed: equal, "
                             f"random, or [[one length per request]]")
        return value

    @field_validator("kv_lengths")
    @classmethod
    def _kv_lengths(cls, value: list[KvLengths] | None) -> list[KvLengths] | None:
        for entry in value or []:
            if isinstance(entry, list):
                if not entry:
                    raise ValueError("an explicit list of cache lengths is empty; allowed: one length per request")
                _bounded(entry, 0, MAX_SEQ)
        return value

    @field_validator("page_size")
    @classmethod
    def _page_size(cls, value: list[int | None]) -> list[int | None]:
        _bounded([v for v in value if v is not None], 1, MAX_SEQ)
        return value

    @field_validator("softcap")
    @classmethod
    def _softcap(cls, value: list[float | None]) -> list[float | None]:
        for cap in value:
            if cap is not None and not 0 < cap < float("inf"):
                raise ValueError(f"{cap:g} is out of range; allowed: a positive number")
        return value

    @field_validator("head_dim_v")
    @classmethod
    def _head_dim_v(cls, value: list[int | None]) -> list[int | None]:
        _bounded([v for v in value if v is not None], 1, MAX_HEAD_DIM)
        return value

    @field_validator("tp")
    @classmethod
    def _tp(cls, value: list[int] | None) -> list[int] | None:  # None: not set in a cpu: block
        return None if value is None else _bounded(value, 1, MAX_HEADS)

    @field_validator("batch")
    @classmethod
    def _batch(cls, value: list[int]) -> list[int]:
        return _bounded(value, 1, MAX_BATCH)

    @field_validator("seq_len", "kv_seq_len")
    @classmethod
    def _seq(cls, value: list[int] | None) -> list[int] | None:
        return None if value is None else _bounded(value, 1, MAX_SEQ)

    @field_validator("heads")
    @classmethod
    def _heads(cls, value: list[int]) -> list[int]:
        return _bounded(value, 1, MAX_HEADS)

    @field_validator("kv_heads")
    @classmethod
    def _kv_heads(cls, value: list[KvHeads] | None) -> list[KvHeads] | None:
        _bounded([v for v in value or [] if isinstance(v, int)], 1, MAX_HEADS)
        return value

    @field_validator("head_dim")
    @classmethod
    def _head_dim(cls, value: list[int]) -> list[int]:
        return _bounded(value, 1, MAX_HEAD_DIM)

    @field_validator("window")
    @classmethod
    def _window(cls, value: list[int | None]) -> list[int | None]:
        _bounded([v for v in value if v is not None], 0, MAX_SEQ)
        return value


class CpuAxes(Axes):
    """The `cpu:` block: the same axes, each optional, replacing the sweep's when the run is on a CPU."""

    seq_len: list[int] | None = Field(default=None, min_length=1)
    heads: list[int] | None = Field(default=None, min_length=1)
    head_dim: list[int] | None = Field(default=None, min_length=1)
    batch: list[int] | None = Field(default=None, min_length=1)
    kv_heads: list[KvHeads] | None = Field(default=None, min_length=1)
    dtype: list[Dtype] | None = Field(default=None, min_length=1)
    causal: list[bool] | None = Field(default=None, min_length=1)
    window: list[int | None] | None = Field(default=None, min_length=1)
    mode: list[Mode] | None = Field(default=None, min_length=1)
    documents: list[Documents] | None = Field(default=None, min_length=1)
    doc_lengths: list[Spread] | None = Field(default=None, min_length=1)
    kv_lengths: list[KvLengths] | None = Field(default=None, min_length=1)
    page_size: list[int | None] | None = Field(default=None, min_length=1)
    softcap: list[float | None] | None = Field(default=None, min_length=1)
    alibi: list[bool] | None = Field(default=None, min_length=1)
    head_dim_v: list[int | None] | None = Field(default=None, min_length=1)
    kv_shared: list[bool] | None = Field(default=None, min_length=1)
    tp: list[int] | None = Field(default=None, min_length=1)
    kv_dtype: list[KvDtype | None] | None = Field(default=None, min_length=1)
    quant: list[Quant | None] | None = Field(default=None, min_length=1)

    @field_validator("batch", "heads", "head_dim")
    @classmethod
    def _optional_sizes(cls, value: list[int] | None) -> list[int] | None:
        return None if value is None else _bounded(value, 1, MAX_SEQ)


class Block(Axes):
    """A sweep block (`sweep`, or an item of `also`): its axes, and optionally its own `cpu:` overrides, applied on
    a CPU after the suite's top-level `cpu:` block (a decode block and a prefill block need different CPU sizes)."""

    cpu: CpuAxes | None = None


class Timing(_Strict):
    """How long to warm up and to measure each call, in milliseconds of the call's own time, and how precisely.

    Sampling stops as soon as the median's 95% interval is within ±precision of it (0.01 = 1%), or when
    budget_ms of samples or max_samples is reached; warm-up stops once the call time is steady, or at warmup_ms.
    """

    warmup_ms: float = Field(default=50.0, ge=0, le=600_000)
    budget_ms: float = Field(default=300.0, gt=0, le=3_600_000)
    min_samples: int = Field(default=5, ge=1, le=100_000)
    max_samples: int = Field(default=1000, ge=1, le=1_000_000)
    precision: float = Field(default=0.01, gt=0, le=1)
    # Wall-clock limit per measurement (the run's --timeout overrides it); needs a worker process.
    timeout_s: float | None = Field(default=None, gt=0, le=86_400)
    # The loop before the samples: at least this long, back to back, for the call's energy and, on CUDA, until the
    # GPU's clock has settled at its sustained state (attnbench.run.sustain); 0 turns it off. Unset: 1000 on CUDA, off on a
    # CPU (where it runs, if asked, only when RAPL's energy counter can be read: it needs at least 1000 ms).
    energy_ms: float | None = Field(default=None, ge=0, le=60_000)


class CpuBlock(CpuAxes):
    """The top-level `cpu:` block: axes replacing the sweep's, and `timing:` fields replacing the suite's, when the
    run is on a CPU (where a call takes seconds that takes milliseconds on a GPU: `min_samples: 1` there keeps a
    4 s call from being made four times)."""

    timing: Timing | None = None


class SuiteModel(_Strict):
    """A suite file as written."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    device: Literal["auto", "cuda", "cpu"] = "auto"
    backends: list[str] | None = Field(default=None, min_length=1)
    timing: Timing = Timing()
    # Ask every backend for its deterministic kernels (attnbench.verify.determinism): PyTorch's deterministic mode, the
    # libraries' own switches; a backend that cannot honour it is skipped by name. `run --deterministic` sets it too.
    deterministic: bool = False
    sweep: Block
    # Further sweeps, each crossed on its own and run after `sweep`: axes that cannot meet in one cross (documents and
    # ragged cache lengths exclude each other, random cache lengths need more keys than queries, explicit lengths
    # add up to their own block's lengths) go in separate blocks.
    also: list[Block] | None = Field(default=None, min_length=1)
    cpu: CpuBlock | None = None


def _bounded(values: list[int], low: int, high: int) -> list[int]:
    for value in values:
        if not low <= value <= high:
            raise ValueError(f"{value} is out of range; allowed: {low} to {high}")
    return values
