"""The suite file's strict schema (docs/suites.md); attnbench.sweep.suite expands it into Cases."""

from __future__ import annotations

from dataclasses import make_dataclass
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from attnbench.core import axes as axis_table
from attnbench.core.axes import (  # noqa: F401 - the suite's value types and bounds, declared with the axes
    MAX_BATCH,
    MAX_HEAD_DIM,
    MAX_HEADS,
    MAX_SEQ,
    Documents,
    KvDtype,
    KvLengths,
    Spread,
)
from attnbench.sweep.mix import Mix

Dtype = Literal["float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"]
Mode = Literal["fwd", "bwd", "fwd_bwd"]
KvHeads = Literal["heads"] | int


def _as_list(value: Any) -> Any:
    """A single value stands for a one-element axis."""
    return value if isinstance(value, list) else [value]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Quant(_Strict):
    """Descale factors per tensor, per (batch row, KV head) or per block, from each granule's amax or one fixed
    `scale` (core.quant)."""

    granularity: Literal["tensor", "head", "block"] = "tensor"
    block: int | None = None
    scale: Literal["amax"] | float = "amax"

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
            if not 0 < value < float("inf"):  # NaN fails too
                raise ValueError(f"{value!r} is out of range; allowed: a positive "
                                 "finite descale factor, or amax")
            return float(value)
        return value

    @model_validator(mode="after")
    def _block_needs_blocks(self) -> Quant:
        if self.block is not None and self.granularity != "block":
            raise ValueError(f"block {self.block} is given with granularity {self.granularity}; allowed: "
                             "block only with granularity block")
        return self


class _AxesRules(_Strict):
    """The sweep axes, every list crossed with every other; beyond the shape they come from core.axes.TABLE."""

    @field_validator("*", mode="before")
    @classmethod
    def _one_value_lists(cls, value: Any, info: Any) -> Any:
        """`causal: true` means `[true]`; a bare null of a nullable axis is [null], in a cpu: block too."""
        if info.field_name not in AXIS_NAMES:
            return value  # a block's `cpu:`, `timing:`
        if info.field_name in NULLABLE:
            return [None] if value is None else _as_list(value)
        return value if value is None else _as_list(value)

    @field_validator("*")
    @classmethod
    def _bounds(cls, value: Any, info: Any) -> Any:
        axis = BY_NAME.get(info.field_name)
        if axis is None or value is None:
            return value
        if axis.bounds is not None:
            _bounded([v for v in value if v is not None], int(axis.bounds[0]), int(axis.bounds[1]))
        if axis.positive:
            for number in value:
                if number is not None and not 0 < number < float("inf"):
                    raise ValueError(f"{number:g} is out of range; allowed: a positive number")
        return value

    @field_validator("documents", check_fields=False)
    @classmethod
    def _documents(cls, value: list[Documents]) -> list[Documents]:
        for entry in value:
            if isinstance(entry, list):
                if not entry:
                    raise ValueError("an explicit list of document lengths is empty")
                for item in entry:
                    if isinstance(item, list) and len(item) != 2:
                        raise ValueError(f"{item} is not a document; allowed: a length, "
                                         "or a [queries, keys] pair")
                    _bounded(item if isinstance(item, list) else [item], 0, MAX_SEQ)
            elif entry is not None:
                _bounded([entry], 1, MAX_SEQ)
        return value

    @field_validator("kv_lengths", mode="before", check_fields=False)
    @classmethod
    def _explicit_inside(cls, value: Any) -> Any:
        """A flat list of ints means explicit lengths written one level too high: say where it goes."""
        if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool)
                                                     for v in value):
            raise ValueError(f"explicit cache lengths go in a list inside the axis list: [{value}]; allowed: "
                             "equal, random, or [[one length per request]]")
        return value

    @field_validator("kv_lengths", check_fields=False)
    @classmethod
    def _kv_lengths(cls, value: list[KvLengths] | None) -> list[KvLengths] | None:
        for entry in value or []:
            if isinstance(entry, list):
                if not entry:
                    raise ValueError("an explicit list of cache lengths is empty; "
                                     "allowed: one length per request")
                _bounded(entry, 0, MAX_SEQ)
        return value

    @field_validator("batch", check_fields=False)
    @classmethod
    def _batch(cls, value: list[int] | None) -> list[int] | None:
        return None if value is None else _bounded(value, 1, MAX_BATCH)  # None: a cpu: block without batch

    @field_validator("seq_len", "kv_seq_len", check_fields=False)
    @classmethod
    def _seq(cls, value: list[int] | None) -> list[int] | None:
        return None if value is None else _bounded(value, 1, MAX_SEQ)

    @field_validator("heads", check_fields=False)
    @classmethod
    def _heads(cls, value: list[int] | None) -> list[int] | None:
        return None if value is None else _bounded(value, 1, MAX_HEADS)

    @field_validator("kv_heads", check_fields=False)
    @classmethod
    def _kv_heads(cls, value: list[KvHeads] | None) -> list[KvHeads] | None:
        _bounded([v for v in value or [] if isinstance(v, int)], 1, MAX_HEADS)
        return value

    @field_validator("head_dim", check_fields=False)
    @classmethod
    def _head_dim(cls, value: list[int] | None) -> list[int] | None:
        return None if value is None else _bounded(value, 1, MAX_HEAD_DIM)



# The shape's axes, then the mask kinds, `mode`, the workload axes: the order of messages and of the cross.
SHAPE_AXES: dict[str, tuple[Any, Any]] = {
    "batch": (int, [1]), "seq_len": (int, ...), "kv_seq_len": (int, None), "heads": (int, ...),
    "kv_heads": (KvHeads, ["heads"]), "head_dim": (int, ...), "dtype": (Dtype, ["float32"]),
}
OWN_TYPES: dict[str, Any] = {"quant": Quant | None}


def _axis_fields() -> dict[str, tuple[Any, Any]]:
    table = axis_table.axes()
    masks = [a for a in table if a.mask]
    rest = [a for a in table if not a.mask]
    fields: dict[str, tuple[Any, Any]] = {}
    for name, (value, default) in SHAPE_AXES.items():
        annotation = list[value] if default is not None else list[value] | None
        fields[name] = (annotation,
                        Field(min_length=1) if default is ... else Field(default=default, min_length=1))
    for axis in masks:
        fields[axis.name] = _table_field(axis)
    fields["mode"] = (list[Mode], Field(default=["fwd"], min_length=1))
    for axis in rest:
        fields[axis.name] = _table_field(axis)
    return fields


def _table_field(axis: axis_table.Axis) -> tuple[Any, Any]:
    value = OWN_TYPES.get(axis.name, axis.value)
    return list[value], Field(default=[axis.default], min_length=1)


AXIS_FIELDS = _axis_fields()
AXIS_NAMES = frozenset(AXIS_FIELDS)
BY_NAME = {a.name: a for a in axis_table.axes()}
NULLABLE = frozenset(name for name, axis in BY_NAME.items() if axis.nullable)
Axes = create_model("Axes", __base__=_AxesRules, __module__=__name__,
                    **AXIS_FIELDS)  # type: ignore[call-overload]
Axes.__doc__ = _AxesRules.__doc__


def _one(annotation: Any) -> Any:
    """list[X] (or list[X] | None) -> X."""
    listed = next(a for a in (annotation, *get_args(annotation)) if get_origin(a) is list)
    return get_args(listed)[0]


# One combination of the cross: a value of each axis.
Combo = make_dataclass("Combo", [(name, _one(annotation)) for name, (annotation, _) in AXIS_FIELDS.items()],
                       frozen=True)


class _CpuRules(Axes):  # type: ignore[misc, valid-type]
    """The `cpu:` block: the same axes, optional, replacing the sweep's on a CPU."""

    @field_validator("batch", "heads", "head_dim")
    @classmethod
    def _optional_sizes(cls, value: list[int] | None) -> list[int] | None:
        return None if value is None else _bounded(value, 1, MAX_SEQ)


CpuAxes = create_model("CpuAxes", __base__=_CpuRules, __module__=__name__,  # type: ignore[call-overload]
                       **{name: (annotation | None, Field(default=None, min_length=1))
                          for name, (annotation, _) in AXIS_FIELDS.items()})
CpuAxes.__doc__ = _CpuRules.__doc__


class Block(Axes):  # type: ignore[misc, valid-type]
    """`sweep` or an item of `also`, with optional `cpu:` overrides applied after the top-level ones."""

    cpu: CpuAxes | None = None


class Timing(_Strict):
    """Warm-up and measuring budgets in ms of the call's own time, and the precision (docs/suites.md)."""

    warmup_ms: float = Field(default=50.0, ge=0, le=600_000)
    budget_ms: float = Field(default=300.0, gt=0, le=3_600_000)
    min_samples: int = Field(default=5, ge=1, le=100_000)
    max_samples: int = Field(default=1000, ge=1, le=1_000_000)
    precision: float | None = Field(default=None, gt=0, le=1)  # unset: the device's own (core.policy)
    timeout_s: float | None = Field(default=None, gt=0, le=86_400)  # --timeout overrides it
    # run.sustain; unset: 1000 on CUDA, off on CPU
    energy_ms: float | None = Field(default=None, ge=0, le=60_000)
    rounds: int | None = Field(default=None, ge=1, le=100)  # run.rounds; unset: the device's own
    # a share of budget_ms × measurements; unset: policy
    refine: float | None = Field(default=None, ge=0, le=100)


class CpuBlock(CpuAxes):
    """The top-level `cpu:` block: axes and `timing:` fields replacing the suite's on a CPU."""

    timing: Timing | None = None


class SuiteModel(_Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    device: Literal["auto", "cuda", "cpu"] = "auto"
    backends: list[str] | None = Field(default=None, min_length=1)
    timing: Timing = Timing()
    deterministic: bool = False  # verify.determinism
    sweep: Block | None = None  # required unless the suite is a `mix`
    also: list[Block] | None = Field(default=None, min_length=1)  # for axes that cannot meet in one cross
    cpu: CpuBlock | None = None
    mix: Mix | None = None  # sweep.mix

    @model_validator(mode="after")
    def _something_to_run(self) -> SuiteModel:
        if self.sweep is None and self.mix is None:
            raise ValueError("sweep: required field is missing (or give mix:, serving traffic)")
        if self.sweep is None and self.also:
            raise ValueError("also: further sweeps need a sweep; allowed: also beside sweep")
        return self


def _bounded(values: list[int], low: int, high: int) -> list[int]:
    for value in values:
        if not low <= value <= high:
            raise ValueError(f"{value} is out of range; allowed: {low} to {high}")
    return values
