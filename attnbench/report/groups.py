"""Case groups: the records that differ only in sequence length, so they can share one chart and one table."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from attnbench.core import axes
from attnbench.core.axes import SCALE_WORDS  # noqa: F401 - the scales' words, declared with the quant axis
from attnbench.core.case import DTYPE_BYTES as CASE_DTYPE_BYTES
from attnbench.records.record import Record, Status
from attnbench.records.shape import SHAPE_FIELDS, WORKLOAD_FIELDS, CaseShape
from attnbench.records.words import DTYPE_WORDS, dtype_word, shape_words, workload_words

# A failed point is never dropped: a marker on the chart and a row in the table.
FAILED_STATUSES = ("skipped", "oom", "error", "timeout")
# What stays fixed within a group (the sequence lengths are what vary).
GROUP_FIELDS = SHAPE_FIELDS + WORKLOAD_FIELDS
DTYPE_BYTES = {**CASE_DTYPE_BYTES, "float64": 8}
DTYPE_BYTES.update({DTYPE_WORDS[name]: size for name, size in list(DTYPE_BYTES.items())})  # by short name too
QUANT_AXES = ("kv_dtype", "quant")


@dataclass
class CaseGroup:
    """Records sharing every case field but the sequence lengths; `x_field` is the length that varies."""

    shape: CaseShape
    x_field: str  # "seq_len", or "kv_seq_len" for decode-like groups where the query length is fixed
    fixed: dict[str, int] = field(default_factory=dict)  # the other length when it is constant and differs
    records: list[Record] = field(default_factory=list)

    @property
    def xs(self) -> list[int]:
        return sorted({int(getattr(r, self.x_field)) for r in self.records})

    @property
    def backends(self) -> list[str]:
        return sorted({r.backend for r in self.records})

    def title(self) -> str:
        """The group in words, e.g. "bf16 · causal · 32 heads / 8 KV heads · d=128 · fwd+bwd"."""
        words = shape_words(self.shape)
        for name, value in self.fixed.items():
            words.append(f"{'query' if name == 'seq_len' else 'KV'} length {value}")
        return " · ".join(words)

    def x_label(self) -> str:
        return "KV sequence length (tokens)" if self.x_field == "kv_seq_len" else "sequence length (tokens)"

    def slug(self) -> str:
        s = self.shape
        parts = [
            dtype_word(s.dtype), "causal" if s.causal else "full",
            f"w{s.window}" if s.window is not None else "", f"h{s.heads}", f"kv{s.kv_heads}",
            f"d{s.head_dim}", str(s.mode), f"b{s.batch}" if s.batch != 1 else "",
            *(f"{'q' if k == 'seq_len' else 'k'}{v}" for k, v in self.fixed.items()),
            *workload_words(s, short=True),
        ]
        if s.device != "cuda":
            parts.insert(0, str(s.device))
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(p for p in parts if p))

    def by_backend_x(self) -> dict[tuple[str, int], Record]:
        """The record for each (backend, length); the last one wins if a run repeated a measurement."""
        return {(r.backend, int(getattr(r, self.x_field))): r for r in self.records}

    def skipped_everywhere(self) -> dict[str, list[str]]:
        """The backends skipped at every length, each with its distinct reasons: named once, not drawn."""
        reasons: dict[str, list[str]] = {}
        ran: set[str] = set()
        for (backend, _), record in sorted(self.by_backend_x().items()):
            if record.status != Status.SKIPPED:
                ran.add(backend)
            elif str(record.reason or "") not in reasons.setdefault(backend, []):
                reasons[backend].append(str(record.reason or ""))
        return {backend: why for backend, why in reasons.items() if backend not in ran}


def quant_words(shape: Any, short: bool = False) -> list[str]:
    """A quantized case's FP8 K/V cache and scales, in words ("K/V fp8e4m3", "per-block 128 scales") or short."""
    return [w for a in axes.axes() if a.name in QUANT_AXES and a.words and (w := a.words(shape, short))]


def _shape_key(record: Record) -> tuple:
    # str() keeps None and mixed types sortable.
    return tuple((str(type(getattr(record, f)).__name__), str(getattr(record, f))) for f in GROUP_FIELDS)


def group_records(records: Iterable[Record]) -> list[CaseGroup]:
    """Split records into case groups: self-attention groups vary seq_len; decode-like ones vary kv_seq_len."""
    buckets: dict[tuple, list[Record]] = {}
    for record in records:
        self_attention = record.seq_len == record.kv_seq_len
        buckets.setdefault((_shape_key(record), self_attention), []).append(record)
    groups: list[CaseGroup] = []
    for (_, self_attention), members in buckets.items():
        shape = CaseShape.of(members[0])
        if self_attention:
            groups.append(CaseGroup(shape, "seq_len", {}, members))
            continue
        q_lengths = {r.seq_len for r in members}
        kv_lengths = {r.kv_seq_len for r in members}
        if len(q_lengths) > 1 and len(kv_lengths) == 1:
            groups.append(CaseGroup(shape, "seq_len", {"kv_seq_len": int(next(iter(kv_lengths)))}, members))
            continue
        # Decode-like: the query length is fixed, the KV length varies.
        for q in sorted(q_lengths):
            subset = [r for r in members if r.seq_len == q]
            groups.append(CaseGroup(shape, "kv_seq_len", {"seq_len": int(q)}, subset))
    groups.sort(key=_group_order)
    return groups


def _group_order(group: CaseGroup) -> tuple:
    s = group.shape
    return (
        str(s.device), str(s.mode), str(s.dtype), bool(s.causal), s.window is not None,
        s.window or 0, int(s.head_dim), int(s.heads), -int(s.kv_heads), int(s.batch),
        tuple(str(getattr(s, f)) for f in WORKLOAD_FIELDS), group.x_field != "seq_len",
        tuple(sorted(group.fixed.items())),
    )


def kv_cache_bytes(record: Record) -> int:
    """Bytes of K and V for one record's case: 2 * batch * kv_heads * kv_seq_len * head_dim * bytes/elem."""
    size = DTYPE_BYTES.get(str(record.kv_dtype or record.dtype), 2)
    return 2 * int(record.batch) * int(record.kv_heads) * int(record.kv_seq_len) * int(record.head_dim) * size


@dataclass
class KvHeadsFamily:
    """Case groups that differ only in kv_heads (MHA / GQA / MQA of one shape), compared at one length."""

    shape: CaseShape  # the shared fields; its kv_heads is the first group's
    x_field: str
    length: int  # the longest length all of them measured (or the longest any measured)
    records: list[Record]

    def title(self) -> str:
        heads = self.shape.heads
        words = shape_words(self.shape.replace(kv_heads=heads))
        words = [f"{heads} query heads" if w == f"{heads} heads" else w for w in words]
        what = "KV length" if self.x_field == "kv_seq_len" else "seq"
        return " · ".join(words + [f"{what} {self.length}"])


def kv_heads_families(groups: list[CaseGroup]) -> list[KvHeadsFamily]:
    """The sets of groups that vary only kv_heads, each at its longest common length."""
    buckets: dict[tuple, list[CaseGroup]] = {}
    for group in groups:
        key = tuple(str(getattr(group.shape, f)) for f in GROUP_FIELDS if f != "kv_heads")
        buckets.setdefault((key, group.x_field, tuple(sorted(group.fixed.items()))), []).append(group)
    families: list[KvHeadsFamily] = []
    for (_, x_field, _), members in buckets.items():
        if len({g.shape.kv_heads for g in members}) < 2:
            continue
        common = set.intersection(*(set(g.xs) for g in members))
        length = max(common) if common else max(max(g.xs) for g in members)
        records = [r for g in members for r in g.records if int(getattr(r, x_field)) == length]
        families.append(KvHeadsFamily(members[0].shape, x_field, length, records))
    families.sort(key=lambda fam: (str(fam.shape.mode), str(fam.shape.dtype), _family_order(fam.shape)))
    return families


def _family_order(shape: CaseShape) -> str:
    """As str() of the shape's dict without kv_heads ordered families."""
    return str({f: getattr(shape, f) for f in GROUP_FIELDS if f != "kv_heads"})
