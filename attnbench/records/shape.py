"""A case group's shape: the case fields its records share."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from attnbench.core import axes

SHAPE_FIELDS = ("device", "dtype", "causal", "window", "heads", "kv_heads", "head_dim", "mode", "batch")
WORKLOAD_FIELDS = tuple(f.name for f in axes.case_fields() if not f.drawn)


@dataclass(frozen=True)
class CaseShape:
    """Every case field but the lengths and the seeded draws."""

    device: str
    dtype: str
    causal: bool
    window: int | None
    heads: int
    kv_heads: int
    head_dim: int
    mode: str
    batch: int
    for _field in axes.case_fields():
        if not _field.drawn:
            __annotations__[_field.name] = _field.annotation
            vars()[_field.name] = _field.default
    del _field

    @classmethod
    def of(cls, record: Any, **changed: Any) -> CaseShape:
        """The shape of a record (or case), with `changed` fields replaced."""
        return cls(**{**{name: getattr(record, name) for name in SHAPE_FIELDS + WORKLOAD_FIELDS}, **changed})

    def replace(self, **changed: Any) -> CaseShape:
        return dataclasses.replace(self, **changed)

    def values(self) -> tuple[Any, ...]:
        """In field order."""
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))
