"""A suite's `mix:` block: serving traffic as weighted cases (docs/traffic.md). Each batch becomes at most two
cases, as a server splits it: its decodes a paged ragged decode, its other requests one row of packed
`[queries, keys]` documents (varlen); a part where no query sees a key is left out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from attnbench.core import workload
from attnbench.core.axes import MAX_BATCH, MAX_HEAD_DIM, MAX_HEADS, MAX_SEQ
from attnbench.core.case import Case
from attnbench.core.errors import SuiteError
from attnbench.sweep import traffic
from attnbench.sweep.traffic import Batch, Request

PHASES = ("prefill", "decode")
MixDtype = Literal["float32", "float16", "bfloat16"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Source(_Strict):
    """`generate`, `vllm` or `flashinfer` (a path relative to the suite); `weight` multiplies its batches'."""

    generate: Literal[traffic.PATTERNS] | None = None  # type: ignore[valid-type]
    batch: int | None = Field(default=None, ge=1, le=MAX_BATCH)
    seq_len: int | None = Field(default=None, ge=1, le=MAX_SEQ)
    decode_fraction: float = Field(default=0.0, ge=0, le=1)
    zero_fraction: float = Field(default=0.0, ge=0, le=1)
    seeds: int = Field(default=1, ge=1, le=1000)  # one batch per seed 0..seeds-1
    vllm: str | list[str] | None = None
    flashinfer: str | None = None
    weight: float = Field(default=1.0, gt=0, le=1e12)

    @model_validator(mode="after")
    def _one_kind(self) -> Source:
        kinds = [k for k in ("generate", "vllm", "flashinfer") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError("a source is one of generate, vllm or flashinfer (got "
                             f"{', '.join(kinds) or 'none'})")
        sized = self.batch is not None and self.seq_len is not None
        if self.generate is not None and not sized:
            raise ValueError("generate needs batch and seq_len (requests per batch, "
                             "and the longest sequence)")
        if self.generate is not None and (self.batch or 0) * self.seeds > MAX_BATCH:
            raise ValueError(f"generate draws batch x seeds = {self.batch} x {self.seeds} requests; "
                             f"allowed: at most {MAX_BATCH}")
        if self.generate is None and (self.batch, self.seq_len, self.seeds, self.decode_fraction,
                                      self.zero_fraction) != (None, None, 1, 0.0, 0.0):
            raise ValueError("batch, seq_len, seeds, decode_fraction and zero_fraction belong to generate")
        return self


class _Geometry(_Strict):
    """One model's attention layer as one GPU computes it."""

    heads: int = Field(ge=1, le=MAX_HEADS)
    kv_heads: int = Field(ge=1, le=MAX_HEADS)
    head_dim: int = Field(ge=1, le=MAX_HEAD_DIM)
    dtype: MixDtype = "bfloat16"
    causal: bool = True
    page_size: int | None = Field(default=16, ge=1, le=MAX_SEQ)  # null: contiguous


class MixCpu(_Strict):
    """`mix.cpu`: what it sets replaces the mix's on a CPU."""

    heads: int | None = Field(default=None, ge=1, le=MAX_HEADS)
    kv_heads: int | None = Field(default=None, ge=1, le=MAX_HEADS)
    head_dim: int | None = Field(default=None, ge=1, le=MAX_HEAD_DIM)
    dtype: MixDtype | None = None
    page_size: int | None = Field(default=None, ge=1, le=MAX_SEQ)
    sources: list[Source] | None = Field(default=None, min_length=1)


class Mix(_Geometry):
    sources: list[Source] = Field(min_length=1)
    cpu: MixCpu | None = None

    @model_validator(mode="after")
    def _groups(self) -> Mix:
        if self.heads % self.kv_heads:
            raise ValueError(f"kv_heads {self.kv_heads} does not divide heads {self.heads}")
        return self

    def on(self, device: str) -> Mix:
        if device != "cpu" or self.cpu is None:
            return self
        return Mix.model_validate({**self.model_dump(exclude={"cpu"}),
                                   **self.cpu.model_dump(exclude_unset=True)})


@dataclass(frozen=True)
class Part:
    """One batch's prefill or decode part, with the batch's weight and source."""

    case: Case
    phase: str  # prefill or decode
    weight: float
    requests: int  # an empty sequence counts: the server holds it
    tokens: int  # query tokens
    source: str


@dataclass(frozen=True)
class Traffic:
    """Every batch (weighted), and every part with something to time."""

    batches: tuple[Batch, ...]
    parts: tuple[Part, ...]

    @property
    def requests(self) -> float:
        """Weighted: the denominator of a time per request."""
        return sum(b.weight * len(b.requests) for b in self.batches)

    @property
    def tokens(self) -> float:
        """Weighted: the denominator of a time per token."""
        return sum(b.weight * b.tokens for b in self.batches)

    @property
    def cases(self) -> list[Case]:
        """Distinct, in their parts' order."""
        return list(dict.fromkeys(p.case for p in self.parts))


def batches_of(mix: Mix, source: Source, folder: Path) -> list[Batch]:
    """Weighted; a flashinfer definition must match `mix` as written
    (a CPU's `cpu:` shrinks it on purpose)."""
    if source.generate is not None:
        assert source.batch is not None and source.seq_len is not None
        found = [Batch(traffic.generate(source.generate, source.batch, source.seq_len, source.decode_fraction,
                                        source.zero_fraction, seed), 1.0,
                       f"{source.generate} b{source.batch} s{source.seq_len} seed {seed}")
                 for seed in range(source.seeds)]
    elif source.vllm is not None:
        specs = [source.vllm] if isinstance(source.vllm, str) else source.vllm
        found = traffic.merged([Batch(traffic.parse_vllm(spec), 1.0, spec) for spec in specs])
    else:
        definition, found = traffic.read_flashinfer((folder / str(source.flashinfer)).resolve())
        check_definition(mix, definition, str(source.flashinfer))
    return [Batch(b.requests, b.weight * source.weight, b.source) for b in found]


def check_definition(mix: Mix, definition: traffic.Definition, where: str) -> None:
    theirs = {"heads": definition.heads, "kv_heads": definition.kv_heads, "head_dim": definition.head_dim,
              "dtype": definition.dtype}
    if not definition.decode:  # a decode query sees every key either way
        theirs["causal"] = definition.causal
    for name, value in theirs.items():
        if getattr(mix, name) != value:
            raise SuiteError(f"mix: flashinfer {where}: definition {definition.name} has {name} {value}, the "
                             f"mix {getattr(mix, name)}; allowed: the geometry the trace was captured at")


def check_size(batch: Batch, where: str) -> None:
    """At most MAX_BATCH decodes, and MAX_SEQ tokens in the other requests' one row."""
    decodes = sum(1 for q, _ in batch.requests if q == 1)
    queries = sum(q for q, _ in batch.requests if q != 1)
    keys = sum(k for q, k in batch.requests if q != 1)
    if decodes > MAX_BATCH or max(queries, keys, *(k for _, k in batch.requests)) > MAX_SEQ:
        raise SuiteError(f"{where}: batch {batch.source} holds {decodes} decodes and {queries} queries over "
                         f"{keys} keys in its other requests; allowed: at most {MAX_BATCH} decodes and "
                         f"{MAX_SEQ} tokens in one row")


def expand(mix: Mix, device: str, folder: Path, where: str) -> Traffic:
    """`folder`: where relative paths start."""
    here = mix.on(device)
    batches = [b for source in here.sources for b in batches_of(mix, source, folder)]
    for batch in batches:
        check_size(batch, where)
    parts: list[Part] = []
    for batch in batches:
        for phase in PHASES:
            chosen = [r for r in batch.requests if (r[0] == 1) == (phase == "decode")]
            empty = not chosen or not sum(q for q, _ in chosen) or not sum(k for _, k in chosen)
            case = None if empty else _case(here, device, phase, chosen)
            if case is not None and workload.visible_total(case) > 0:
                parts.append(Part(case, phase, batch.weight, len(chosen), sum(q for q, _ in chosen),
                                  batch.source))
    if not parts:
        raise SuiteError(f"{where}: no batch of the mix has a query that sees a key: nothing to measure")
    return Traffic(tuple(batches), tuple(parts))


def _case(mix: Mix, device: str, phase: str, requests: list[Request]) -> Case:
    shape = dict(device=device, dtype=mix.dtype, heads=mix.heads, kv_heads=mix.kv_heads,
                 head_dim=mix.head_dim, causal=mix.causal, window=None, mode="fwd")
    if phase == "decode":
        lens = tuple(k for _, k in requests)
        return Case(batch=len(lens), seq_len=1, kv_seq_len=max(1, max(lens)), kv_lengths="explicit",
                    kv_lens=lens,
                    page_size=mix.page_size, **shape)  # type: ignore[arg-type]
    queries, keys = tuple(q for q, _ in requests), tuple(k for _, k in requests)
    return Case(batch=1, seq_len=max(1, sum(queries)), kv_seq_len=max(1, sum(keys)), documents=len(requests),
                doc_lengths="explicit", doc_lens=queries, doc_kv_lens=None if keys == queries else keys,
                **shape)  # type: ignore[arg-type]
