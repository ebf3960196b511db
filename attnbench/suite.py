"""The suite file: a strict YAML schema (pydantic) read at the edge, expanded into frozen Cases."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from attnbench.case import Case
from attnbench.errors import SuiteError, did_you_mean

MAX_SEQ = 1 << 21  # 2M tokens: anything larger is a typo, not a benchmark
MAX_HEADS = 1024
MAX_HEAD_DIM = 1024
MAX_BATCH = 1 << 16

Dtype = Literal["float32", "float16", "bfloat16"]
Mode = Literal["fwd", "bwd", "fwd_bwd"]
KvHeads = Union[Literal["heads"], int]


def _as_list(value: Any) -> Any:
    """Let a single value stand for a one-element axis (`causal: true` means `[true]`)."""
    return value if isinstance(value, list) else [value]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


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

    _lists = field_validator(
        "batch", "seq_len", "kv_seq_len", "heads", "kv_heads", "head_dim", "dtype", "causal",
        "window", "mode", mode="before",
    )(lambda value: value if value is None else _as_list(value))

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
    def _kv_heads(cls, value: list[KvHeads]) -> list[KvHeads]:
        _bounded([v for v in value if isinstance(v, int)], 1, MAX_HEADS)
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

    @field_validator("batch", "heads", "head_dim")
    @classmethod
    def _optional_sizes(cls, value: list[int] | None) -> list[int] | None:
        return None if value is None else _bounded(value, 1, MAX_SEQ)


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


class SuiteModel(_Strict):
    """A suite file as written."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    device: Literal["auto", "cuda", "cpu"] = "auto"
    backends: list[str] | None = Field(default=None, min_length=1)
    timing: Timing = Timing()
    sweep: Axes
    cpu: CpuAxes | None = None


def _bounded(values: list[int], low: int, high: int) -> list[int]:
    for value in values:
        if not low <= value <= high:
            raise ValueError(f"{value} is out of range; allowed: {low} to {high}")
    return values


@dataclass(frozen=True)
class Suite:
    """A validated suite and the file it came from."""

    model: SuiteModel
    path: Path
    text: str

    @property
    def name(self) -> str:
        return self.model.name

    def axes(self, device: str) -> Axes:
        """The sweep axes in force on `device`: the `cpu:` block replaces sweep values on a CPU."""
        axes = self.model.sweep
        if device == "cpu" and self.model.cpu is not None:
            overrides = {k: v for k, v in self.model.cpu.model_dump().items() if v is not None}
            axes = axes.model_copy(update=overrides)
        return axes

    def cases(self, device: str) -> list[Case]:
        """Cross every axis into the cases to run on `device` (a resolved device: "cpu" or "cuda")."""
        axes = self.axes(device)
        key = "cpu" if device == "cpu" and self.model.cpu is not None else "sweep"
        cases: list[Case] = []
        grid = itertools.product(
            axes.dtype, axes.batch, axes.seq_len, axes.kv_seq_len or [None], axes.heads, axes.kv_heads,
            axes.head_dim, axes.causal, axes.window, axes.mode,
        )
        for dtype, batch, seq, kv_seq, heads, kv_heads, head_dim, causal, window, mode in grid:
            kv = heads if kv_heads == "heads" else kv_heads
            if kv > heads or heads % kv:
                raise SuiteError(
                    f"{self.path}: {key}.kv_heads: {kv} does not divide heads {heads} "
                    f"(combination heads={heads}, kv_heads={kv}); allowed: a divisor of heads, or 'heads'"
                )
            kv_seq = seq if kv_seq is None else kv_seq
            if kv_seq < seq and (causal or window is not None):
                raise SuiteError(
                    f"{self.path}: {key}.kv_seq_len: {kv_seq} < seq_len {seq} with a causal or window mask "
                    f"leaves early queries with no key to attend to; allowed: kv_seq_len >= seq_len"
                )
            case = Case(device, dtype, batch, seq, kv_seq, heads, kv, head_dim, causal, window, mode)
            if case not in cases:
                cases.append(case)
        return cases


STARTER = Path(__file__).parent / "templates" / "starter.yaml"


def packaged_suites() -> dict[str, Path]:
    """The suites shipped inside the package, by name (file stem): `attnbench run long` needs no checkout."""
    folder = Path(__file__).parent / "suites"
    return {p.stem: p for p in sorted(folder.glob("*.yaml"))}


def resolve_suite(path: Path | str) -> Path:
    """A suite argument as a file: an existing path, else the name of a packaged suite."""
    path = Path(path)
    if path.exists() or len(path.parts) != 1:
        return path
    return packaged_suites().get(path.name.removesuffix(".yaml"), path)


def load_suite(path: Path | str) -> Suite:
    """Read and validate a suite file (or packaged suite name); any problem raises SuiteError with one line."""
    path = resolve_suite(path)
    if not path.exists():
        names = ", ".join(packaged_suites())
        raise SuiteError(f"{path}: no such suite file (packaged suites: {names})")
    if path.is_dir():
        raise SuiteError(f"{path}: is a directory; expected a suite YAML file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteError(f"{path}: cannot be read ({exc})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SuiteError(f"{path}: {where}invalid YAML ({problem})") from None
    if data is None:
        raise SuiteError(f"{path}: the file is empty; expected a mapping with name and sweep")
    if not isinstance(data, dict):
        raise SuiteError(f"{path}: expected a mapping with name and sweep at the top, got a {type(data).__name__}")
    try:
        model = SuiteModel.model_validate(data)
    except ValidationError as exc:
        raise SuiteError(f"{path}: {describe_validation_error(exc)}") from None
    suite = Suite(model=model, path=path, text=text)
    for device in ("cpu", "cuda"):
        suite.cases(device)  # combination errors surface now, before anything runs
    return suite


def describe_validation_error(exc: ValidationError) -> str:
    """The first schema error as `field.path: problem; allowed: ...`, with a did-you-mean for near misses."""
    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")  # a misspelt key explains most
    error = errors[0]
    loc = _field_path(error["loc"])
    kind = error["type"]
    value = error.get("input")
    more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    if kind == "extra_forbidden":
        parent, key = loc.rpartition(".")[0], str(error["loc"][-1])
        allowed = _allowed_keys(error["loc"][:-1])
        hint = did_you_mean(key, allowed)
        where = parent + "." if parent else ""
        return f"{where}{key}: unknown key{hint}; allowed: {', '.join(allowed)}{more}"
    if kind == "missing":
        return f"{loc}: required field is missing{more}"
    if kind in ("model_type", "dict_type"):
        return f"{loc}: expected a mapping of keys to values, got a {type(value).__name__}{more}"
    if kind == "literal_error":
        allowed = list(error.get("ctx", {}).get("expected", "").replace("'", "").replace(" or ", ", ").split(", "))
        hint = did_you_mean(str(value), allowed)
        return f"{loc}: {value!r} is not allowed{hint}; allowed: {', '.join(allowed)}{more}"
    if kind == "value_error":
        return f"{loc}: {error['msg'].removeprefix('Value error, ')}{more}"
    return f"{loc}: {value!r}: {error['msg']}{more}"


def _field_path(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in ("int", "bool", "str", "none", "literal['heads']", "float") or str(part).startswith("literal["):
            continue  # pydantic's union-branch tags, not fields
        else:
            path += ("." if path else "") + str(part)
    return path or "(top level)"


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    model: type[BaseModel] = SuiteModel
    for part in loc:
        annotation = model.model_fields[str(part)].annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        model = next(c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel))
    return list(model.model_fields)
