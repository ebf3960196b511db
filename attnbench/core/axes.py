"""The one table of sweep-axis facts beyond the shape;
schema, suite, Case, records and report derive from TABLE."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

Case = Any  # core.case.Case, built from this table

MAX_SEQ = 1 << 21  # larger is a typo, not a benchmark
MAX_HEADS = 1024
MAX_HEAD_DIM = 1024
MAX_BATCH = 1 << 16

DTYPES = ("float32", "float16", "bfloat16")
HALF_DTYPES = ("float16", "bfloat16")
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, **{name: 1 for name in FP8_DTYPES}}
DTYPE_SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "fp8e4m3",
               "float8_e5m2": "fp8e5m2"}
SCALE_WORDS = {"tensor": "per-tensor", "head": "per-head", "block": "per-block"}
INPUTS = ("randn", "outliers", "sink", "large_logits", "shifted_keys", "near_constant", "denormal")

InputKind = Literal[INPUTS]  # type: ignore[valid-type]
KvDtype = Literal["float8_e4m3fn", "float8_e5m2"]
Documents = int | list[int | list[int]] | None
Spread = Literal["equal", "random"]
KvLengths = Spread | list[int]


@dataclass(frozen=True)
class Field:
    """`drawn`: filled from the case's seed."""

    name: str
    annotation: str
    default: Any = None
    drawn: bool = False


@dataclass(frozen=True)
class Axis:
    """One sweep axis beyond the shape; a backend must declare a `mapped` or `mask` axis, or is skipped."""

    name: str
    value: Any
    default: Any
    fields: tuple[Field, ...] | None = None
    bounds: tuple[float, float] | None = None
    positive: bool = False
    to_case: Callable[[Any, Any], Any] | None = None  # (value, sweep.schema.Combo)
    expanded: bool = False
    fragment: Callable[[Case], str] | None = None
    words: Callable[[Any, bool], str | None] | None = None
    feature: str | None = None
    feature_words: str = ""
    mapped: bool = False
    mask: bool = False
    shape: bool = False

    @property
    def case_fields(self) -> tuple[Field, ...]:
        if self.fields is not None:
            return self.fields
        unset = False if isinstance(self.default, bool) else None
        return (Field(self.name, _annotation(self.value), unset),)

    @property
    def nullable(self) -> bool:
        return self.default is None

    def is_set(self, case: Any) -> bool:
        """Any of its fields away from the dense case."""
        if self.mask and self.shape:
            if self.name == "window":
                return case.window is not None
            return self.name == "causal" and bool(case.causal)
        return any(getattr(case, f.name) != f.default for f in self.case_fields if not f.drawn)


def _annotation(value: Any) -> str:
    names = {int: "int", float: "float", bool: "bool", str: "str"}
    args = [a for a in getattr(value, "__args__", ()) if a is not type(None)]
    if value in names:
        return names[value]
    if len(args) == 1 and args[0] in names:
        return f"{names[args[0]]} | None"
    return "Any"


def simple_axis(name: str, value: Any, default: Any, fragment: Callable[[Any], str],
                words: Callable[[Any], str], **facts: Any) -> Axis:
    """An axis held in one field of its name."""
    def fragment_of(case: Case) -> str:
        held = getattr(case, name)
        return "" if held is None or held is False else fragment(held)

    def words_of(shape: Any, short: bool) -> str | None:
        held = getattr(shape, name, None)
        if held is None or held is False or held == 0 and not isinstance(held, float):
            return None
        return fragment(held) if short else words(held)

    return Axis(name, value, default, fragment=fragment_of, words=words_of, **facts)


def _documents_id(case: Case) -> str:
    if case.documents is None:
        return ""
    if case.doc_lengths == "explicit":
        pairs = zip(case.doc_lens or (), case.doc_kv_lens or case.doc_lens or (), strict=False)
        return "docs" + _listed([str(q) if q == k else f"{q}of{k}" for q, k in pairs])
    return f"doc{case.documents}" + ("rand" if case.doc_lengths == "random" else "")


MAX_LISTED = 96  # longer lists hash: ids name trace files


def _listed(items: list[str]) -> str:
    """'a+b+c', or '<count>x<crc32>' when long."""
    joined = "+".join(items)
    return joined if len(joined) <= MAX_LISTED else f"{len(items)}x{zlib.crc32(joined.encode()):08x}"


def _documents_words(shape: Any, short: bool) -> str | None:
    if not shape.documents:
        return None
    kind = shape.doc_lengths or "equal"
    return (f"doc{shape.documents}{kind[:4] if kind != 'equal' else ''}" if short
            else f"{shape.documents} documents ({kind})")


def _kv_lengths_id(case: Case) -> str:
    if case.kv_lengths == "explicit":
        return "kvlens" + _listed([str(n) for n in case.kv_lens or ()])
    return "" if case.kv_lengths is None else f"kv{case.kv_lengths}"


def _kv_lengths_words(shape: Any, short: bool) -> str | None:
    if not shape.kv_lengths:
        return None
    return f"kv{shape.kv_lengths}" if short else f"{shape.kv_lengths} KV lengths"


def _dtype_word(dtype: Any) -> str:
    return {**DTYPE_SHORT, "float64": "fp64"}.get(str(dtype), str(dtype))


def _kv_dtype_words(shape: Any, short: bool) -> str | None:
    if not shape.kv_dtype:
        return None
    return f"kv{_dtype_word(shape.kv_dtype)}" if short else f"K/V {_dtype_word(shape.kv_dtype)}"


def _quant_id(case: Case) -> str:
    if case.quant is None:
        return ""
    block = case.quant_block if case.quant == "block" else ""
    return f"q{case.quant}{block}" + ("" if case.quant_scale is None else f"-scale{case.quant_scale:g}")


def _quant_words(shape: Any, short: bool) -> str | None:
    if not shape.quant:
        return None
    block = shape.quant_block if shape.quant == "block" else None
    scale = getattr(shape, "quant_scale", None)  # a dispatch bucket has none
    if short:
        return f"q{shape.quant}{block or ''}" + (f"s{scale:g}" if scale else "")
    return (f"{SCALE_WORDS[shape.quant]}{f' {block}' if block else ''} scales"
            + (f" fixed at {scale:g}" if scale else ""))


TABLE: list[Axis] = [
    Axis("causal", bool, False, fields=(), mask=True, shape=True),
    Axis("window", int | None, None, fields=(), bounds=(0, MAX_SEQ), mask=True, shape=True),
    Axis("documents", Documents, None, expanded=True, mapped=True, fragment=_documents_id,
         words=_documents_words, feature="documents", feature_words="packed documents",
         fields=(Field("documents", "int | None"), Field("doc_lengths", "str | None"),
                 Field("doc_lens", "tuple[int, ...] | None", drawn=True),
                 Field("doc_kv_lens", "tuple[int, ...] | None", drawn=True))),
    Axis("doc_lengths", Spread, "equal", fields=(), expanded=True),
    Axis("kv_lengths", KvLengths, "equal", expanded=True, mapped=True, fragment=_kv_lengths_id,
         words=_kv_lengths_words, feature="ragged", feature_words="ragged KV lengths",
         fields=(Field("kv_lengths", "str | None"), Field("kv_lens", "tuple[int, ...] | None", drawn=True))),
    simple_axis("page_size", int | None, None, lambda n: f"page{n}", lambda n: f"pages of {n}",
                bounds=(1, MAX_SEQ), mapped=True, feature="paged", feature_words="paged KV"),
    simple_axis("softcap", float | None, None, lambda c: f"cap{c:g}", lambda c: f"softcap {c:g}",
                positive=True, to_case=lambda value, combo: None if value is None else float(value),
                mapped=True, feature="softcap", feature_words="softcap"),
    simple_axis("alibi", bool, False, lambda _: "alibi", lambda _: "ALiBi", mapped=True, feature="alibi",
                feature_words="ALiBi"),
    simple_axis("head_dim_v", int | None, None, lambda d: f"dv{d}", lambda d: f"d_v={d}",
                bounds=(1, MAX_HEAD_DIM), to_case=lambda value,
                combo: None if value in (None, combo.head_dim) else value, mapped=True),
    simple_axis("kv_shared", bool, False, lambda _: "kvshared", lambda _: "V shared with K (absorbed MLA)",
                mapped=True, feature="kv_shared", feature_words="V shared with K"),
    simple_axis("tp", int, 1, lambda n: f"tp{n}", lambda n: f"tp {n} (one GPU's share)",
                bounds=(1, MAX_HEADS), to_case=lambda value, combo: None if value == 1 else value,
                fields=(Field("tp", "int | None"),)),
    Axis("kv_dtype", KvDtype | None, None, expanded=True, words=_kv_dtype_words,
         fragment=lambda case: "" if case.kv_dtype is None else f"kv{DTYPE_SHORT[case.kv_dtype]}",
         fields=(Field("kv_dtype", "str | None"),)),
    Axis("quant", "quant", None, expanded=True, fragment=_quant_id, words=_quant_words,
         fields=(Field("quant", "str | None"), Field("quant_block", "int | None"),
                 Field("quant_scale", "float | None"))),
    simple_axis("inputs", InputKind, "randn", lambda kind: kind, lambda kind: f"{kind} inputs",
                to_case=lambda value, combo: None if value == "randn" else value,
                fields=(Field("inputs", "str | None"),),
                feature="stress_inputs", feature_words="stress inputs"),
]


def axes(*, shape: bool | None = None) -> list[Axis]:
    """Read at call time, so a test may add one."""
    return [a for a in TABLE if shape is None or a.shape == shape]


def case_fields() -> list[Field]:
    return [f for a in axes(shape=False) for f in a.case_fields]


def record_defaults() -> dict[str, Any]:
    return {f.name: f.default for f in case_fields()}


def drawn_fields() -> tuple[str, ...]:
    return tuple(f.name for f in case_fields() if f.drawn)


def mapped_axes() -> tuple[str, ...]:
    return tuple(a.name for a in TABLE if a.mapped or a.mask)


def mask_kinds() -> tuple[str, ...]:
    return tuple(a.name for a in TABLE if a.mask)


def used_axes(case: Case) -> tuple[str, ...]:
    return tuple(a.name for a in TABLE if (a.mapped or a.mask) and a.is_set(case))


def id_fragments(case: Case) -> str:
    """'' for the dense case: existing ids never change."""
    return "".join("-" + part for a in axes(shape=False) if a.fragment and (part := a.fragment(case)))


def words_of(shape: Any, short: bool = False) -> list[str]:
    return [w for a in axes(shape=False) if a.words and (w := a.words(shape, short))]


def features() -> dict[str, str]:
    return {a.feature: a.feature_words for a in TABLE if a.feature}


def feature_of(record: Any, name: str) -> bool:
    axis = next(a for a in TABLE if a.feature == name)
    field = axis.case_fields[0]
    value = getattr(record, field.name, field.default)
    return bool(value) if field.default is False else value is not None
