"""Which attention backend to call for a shape, from a dispatch table written by `attnbench recommend --out`.
Pure Python and json (no torch), so model code can import it (docs/recommend.md):

    table = DispatchTable.load("h200-dispatch.json")
    choice = table.choose(seq_len=6000, heads=16, kv_heads=4, head_dim=128, dtype="bf16", causal=True)

`choose` answers only from the row of the shape's own bucket, and only a `winner` or `tie`; else None (keep the
default). `Shape.bucket` is the one definition of a bucket, for writing the table and reading it.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnbench.core import axes
from attnbench.core.case import DEFAULT_QUANT_BLOCK
from attnbench.core.quant import GRANULARITIES
from attnbench.records.record import Record

SCHEMA_NAME = "attnbench-dispatch"
SCHEMA_VERSION = 2  # 2: buckets tell quantized formats apart (kv_dtype, quant, quant_block)
# The workload kinds a bucket tells apart, each a yes/no (attnbench.core.axes); choose() answers from ANSWERING only.
FEATURES = tuple(axes.features())
DECISIONS = ("winner", "tie", "unsettled", "none")
ANSWERING = ("winner", "tie")
MODES = ("fwd", "bwd", "fwd_bwd")
_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32",
           "fp64": "float64", "double": "float64", "fp8e4m3": "float8_e4m3fn", "fp8e5m2": "float8_e5m2"}


class DispatchError(ValueError):
    """A dispatch table that cannot be read, or a shape that is not a shape."""


def length_band(n: int) -> tuple[int, int]:
    """The power-of-two band [2^k, 2^(k+1)) holding a length n >= 1: 4096 and 6000 -> (4096, 8192)."""
    if n < 1:
        raise DispatchError(f"a sequence length must be 1 or more, got {n}")
    low = 1 << (int(n).bit_length() - 1)
    return low, 2 * low


def dtype_name(dtype: Any) -> str:
    """'bfloat16' for 'bf16', 'bfloat16' or torch.bfloat16 (by its name: torch is never imported here)."""
    name = str(dtype).removeprefix("torch.")
    return _DTYPES.get(name, name)


@dataclass(frozen=True)
class Bucket:
    """A bucket predicate: lengths as power-of-two bands, a yes/no per feature."""

    seq_len: tuple[int, int]
    kv_seq_len: tuple[int, int]
    heads: int
    kv_heads: int
    head_dim: int
    head_dim_v: int
    dtype: str
    causal: bool
    window: int | None
    for _name in FEATURES:
        __annotations__[_name] = "bool"
    del _name
    mode: str
    kv_dtype: str | None
    quant: str | None
    quant_block: int | None

    def to_dict(self) -> dict[str, Any]:
        """As a dispatch table row stores it (bands as lists)."""
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
                for f in dataclasses.fields(self)}


@dataclass(frozen=True)
class Shape:
    """One attention call as a model's layer knows it (heads after any tensor parallelism)."""

    seq_len: int
    heads: int
    kv_heads: int
    head_dim: int
    dtype: str
    causal: bool = True
    window: int | None = None
    mode: str = "fwd"
    kv_seq_len: int | None = None
    head_dim_v: int | None = None
    documents: bool = False
    paged: bool = False
    ragged: bool = False
    softcap: bool = False
    alibi: bool = False
    kv_shared: bool = False
    kv_dtype: str | None = None  # an FP8 K/V cache under `dtype` queries
    quant: str | None = None  # the FP8 scales' granularity: tensor (the default when quantized), head or block
    quant_block: int | None = None  # tokens per scale with block scales (default 128)
    # A feature declared after the ones above (attnbench.core.axes) is a keyword after them.
    for _name in FEATURES:
        if _name not in __annotations__:
            __annotations__[_name] = "bool"
            vars()[_name] = False
    del _name

    @property
    def quantized(self) -> bool:
        return dtype_name(self.dtype).startswith("float8") or self.kv_dtype is not None

    def bucket(self) -> Bucket:
        """The bucket predicate this shape falls in."""
        if self.mode not in MODES:
            raise DispatchError(f"mode {self.mode!r}: allowed: {', '.join(MODES)}")
        quant = (self.quant or "tensor") if self.quantized else None
        if quant is not None and quant not in GRANULARITIES:
            raise DispatchError(f"quant {quant!r}: allowed: {', '.join(GRANULARITIES)}")
        block = int(self.quant_block or DEFAULT_QUANT_BLOCK) if quant == "block" else None
        kv = self.kv_seq_len if self.kv_seq_len is not None else self.seq_len
        return Bucket(
            seq_len=length_band(int(self.seq_len)), kv_seq_len=length_band(int(kv)),
            heads=int(self.heads), kv_heads=int(self.kv_heads), head_dim=int(self.head_dim),
            head_dim_v=int(self.head_dim_v if self.head_dim_v is not None else self.head_dim),
            dtype=dtype_name(self.dtype), causal=bool(self.causal),
            window=int(self.window) if self.window is not None else None,
            **{name: bool(getattr(self, name)) for name in FEATURES}, mode=self.mode,
            kv_dtype=dtype_name(self.kv_dtype) if self.kv_dtype is not None else None, quant=quant,
            quant_block=block,
        )

    @classmethod
    def of_record(cls, record: Record) -> Shape:
        return cls(
            seq_len=int(record.seq_len), heads=int(record.heads), kv_heads=int(record.kv_heads),
            head_dim=int(record.head_dim), dtype=str(record.dtype), causal=bool(record.causal),
            window=record.window, mode=str(record.mode), kv_seq_len=int(record.kv_seq_len),
            head_dim_v=record.head_dim_v, kv_dtype=record.kv_dtype, quant=record.quant,
            quant_block=record.quant_block, **{name: axes.feature_of(record, name) for name in FEATURES},
        )


def bucket_key(bucket: Bucket | dict[str, Any]) -> str:
    """A bucket predicate (or a stored row's) as one comparable string (rows are unique by it)."""
    return json.dumps(bucket.to_dict() if isinstance(bucket, Bucket) else bucket, sort_keys=True)


@dataclass(frozen=True)
class Choice:
    """The backend to call, and the table row that says so."""

    backend: str
    row: dict[str, Any]

    @property
    def decision(self) -> str:
        return str(self.row["decision"])


class DispatchTable:
    """A loaded dispatch table: its header and its rows, one per bucket."""

    def __init__(self, data: dict[str, Any]) -> None:
        if not isinstance(data, dict) or data.get("schema") != SCHEMA_NAME:
            raise DispatchError(f"not an attnbench dispatch table (no \"schema\": \"{SCHEMA_NAME}\")")
        if data.get("schema_version") != SCHEMA_VERSION:
            raise DispatchError(f"dispatch table schema_version {data.get('schema_version')!r}: this attnbench reads "
                                f"{SCHEMA_VERSION}; write the table again with `attnbench recommend`")
        self.data = data
        self.rows: list[dict[str, Any]] = list(data.get("rows") or [])
        # A feature declared after the table was written is absent there: False, so its buckets still match.
        unset = dict.fromkeys(FEATURES, False)
        self._by_key = {bucket_key({**unset, **row["bucket"]}): row for row in self.rows}

    @classmethod
    def load(cls, path: str | Path) -> DispatchTable:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise DispatchError(f"{path}: cannot be read as a dispatch table ({exc})") from None
        return cls(data)

    @property
    def gpu(self) -> str | None:
        """The device the table was measured on."""
        return self.data.get("gpu")

    def lookup(self, *shape: Any, **fields: Any) -> dict[str, Any] | None:
        """The row whose bucket holds the shape (a Shape, or Shape's fields), whatever its decision."""
        one = shape[0] if len(shape) == 1 and isinstance(shape[0], Shape) and not fields else Shape(*shape, **fields)
        return self._by_key.get(bucket_key(one.bucket()))

    def choose(self, *shape: Any, **fields: Any) -> Choice | None:
        """The backend to call for the shape, or None when the table has no decided row for it."""
        row = self.lookup(*shape, **fields)
        if row is None or row.get("decision") not in ANSWERING or not row.get("backend"):
            return None
        return Choice(str(row["backend"]), row)

    def shapes(self) -> list[dict[str, Any]]:
        """Every row's bucket predicate."""
        return [dict(row["bucket"]) for row in self.rows]

