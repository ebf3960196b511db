"""The measurement record: its fields and its identity."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from attnbench.core import axes, peaks
from attnbench.core.kernel_id import KernelId
from attnbench.core.memory_methods import STORED_RSS_ON_GPU, host_peak_on_gpu
from attnbench.core.policy import NOISE_THRESHOLD
from attnbench.records.parts import (
    Correctness,
    CorrectnessParts,
    DeterminismAnswer,
    EnergyParts,
    GpuReading,
    Implausibility,
    Integrity,
    Kernels,
    Memory,
    Part,
    RoofParts,
    SetupParts,
    Timing,
    TimingParts,
    part_of,
    read_part,
)

if TYPE_CHECKING:
    from attnbench.core.case import Case

# Versions the loader reads: docs/results.md, "Schema versions".
SCHEMA_VERSION = 2


class Status(enum.StrEnum):
    """A record's outcome; a str, as stored."""

    OK = "ok"
    SKIPPED = "skipped"
    OOM = "oom"
    ERROR = "error"
    MISMATCH = "mismatch"
    TIMEOUT = "timeout"
    WRONG_KERNEL = "wrong_kernel"
    IMPLAUSIBLE = "implausible"


STATUSES = tuple(Status)
# The statuses whose call ran.
MEASURED = (Status.OK, Status.MISMATCH, Status.WRONG_KERNEL, Status.IMPLAUSIBLE)
# The statuses a comparison calls a failure.
BAD_STATUSES = ("oom", "error", "mismatch", "timeout", "wrong_kernel", "implausible")
# The statuses whose time is recorded (a mismatch's too).
TIMED = (Status.OK, Status.MISMATCH)
# The statuses whose time is judged against the GPU's datasheet (judged).
JUDGED = (Status.OK, Status.MISMATCH, Status.WRONG_KERNEL)
# `kernels_reason` of a record written before the profiled call.
BEFORE_PROFILING = "written before profiling"
KEY_FIELDS = (
    "backend", "device", "dtype", "batch", "seq_len", "kv_seq_len", "heads", "kv_heads",
    "head_dim", "causal", "window", "mode",
)
SIZE_FIELDS = ("batch", "seq_len", "kv_seq_len", "heads", "kv_heads", "head_dim")
# The workload axes' fields and their dense-case values, stored only when set.
WORKLOAD_DEFAULTS: dict[str, Any] = axes.record_defaults()
DRAWN_FIELDS = axes.drawn_fields()


def _declare(namespace: dict[str, Any], kind: type, *only: str) -> None:
    """`kind`'s fields (those in `only`, if named) not declared yet, declared in the class body `namespace`."""
    notes = namespace["__annotations__"]
    for spec in dataclasses.fields(kind):
        if spec.name not in notes and (not only or spec.name in only):
            notes[spec.name] = spec.type
            made = spec.default_factory
            namespace[spec.name] = spec.default if made is dataclasses.MISSING else field(default_factory=made)


@dataclass(frozen=True)
class Record:
    """One measurement: a backend on a case (fields: docs/results.md)."""

    run_id: str
    suite: str
    timestamp: str
    backend: str
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
    status: Status
    for _field in axes.case_fields():
        __annotations__[_field.name] = _field.annotation.replace("tuple[int, ...]", "list[int]")
        vars()[_field.name] = _field.default
    del _field
    reason: str | None = None
    _declare(vars(), Kernels, "kernel")
    device_name: str | None = None
    case_id: str | None = None
    _declare(vars(), Timing)
    _declare(vars(), GpuReading, "throttled")
    flops: int | None = None
    tflops: float | None = None
    bytes_moved: int | None = None  # the mode's memory-traffic floor
    bandwidth_gbs: float | None = None  # in 1e9 bytes/s
    percent_of_peak: float | None = None  # of the compute roof (decode: the bandwidth roof)
    _declare(vars(), Memory)
    _declare(vars(), Correctness)
    kv_expanded: bool = False
    _declare(vars(), Kernels)
    extra: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        assert self.status in STATUSES, self.status
        assert self.status == Status.OK or self.reason, f"status {self.status} needs a reason"
        object.__setattr__(self, "status", Status(self.status))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        """A stored record upgraded to this schema (its schema_version kept); a GPU peak read from host RSS is no
        device memory: dropped, its method saying so."""
        fields = dict(data)
        if host_peak_on_gpu(fields.get("device"), fields.get("memory_method")):
            fields.update(peak_memory_bytes=None, memory_method=STORED_RSS_ON_GPU)
        if "noisy" not in fields:
            fields["noisy"] = _spread(fields.get("time_ms"), fields.get("time_ms_iqr"))
        if "kernels" not in fields and fields.get("kernels_reason") is None:
            fields["kernels_reason"] = BEFORE_PROFILING
        return judged(cls(**fields))

    def to_dict(self) -> dict[str, Any]:
        """The record as stored on one line of results.jsonl."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for name, default in WORKLOAD_DEFAULTS.items():
            if data[name] == default:
                del data[name]
            elif isinstance(data[name], tuple):
                data[name] = list(data[name])
        data["status"] = str(self.status)
        return data

    def part(self, kind: type[Part]) -> Part | None:
        """The record's part of type `kind`; None where it carries none of it."""
        return read_part(kind, self.__getattribute__, FLAT_FIELDS, self.extra)

    @property
    def timing(self) -> Timing | None:
        return self.part(Timing)

    @property
    def correctness(self) -> Correctness | None:
        return self.part(Correctness)

    @property
    def memory(self) -> Memory | None:
        return self.part(Memory)

    @property
    def gpu_reading(self) -> GpuReading | None:
        return self.part(GpuReading)

    @property
    def kernels_ran(self) -> Kernels | None:
        return self.part(Kernels)

    @property
    def integrity(self) -> Integrity | None:
        return self.part(Integrity)

    @property
    def implausible(self) -> Implausibility | None:
        return self.part(Implausibility)

    @property
    def timing_parts(self) -> TimingParts:
        return part_of(TimingParts, self.extra)

    @property
    def setup(self) -> SetupParts:
        return part_of(SetupParts, self.extra)

    @property
    def checked(self) -> CorrectnessParts:
        return part_of(CorrectnessParts, self.extra)

    @property
    def energy(self) -> EnergyParts:
        return part_of(EnergyParts, self.extra)

    @property
    def determinism(self) -> DeterminismAnswer | None:
        return DeterminismAnswer.of((self.extra or {}).get("deterministic"))

    @property
    def kernel_id(self) -> KernelId | None:
        return KernelId.parse(self.kernel) if self.kernel else None

    @property
    def roof(self) -> RoofParts:
        return part_of(RoofParts, self.extra)

    @property
    def key(self) -> tuple:
        return (*(getattr(self, name) for name in KEY_FIELDS),
                *(_hashable(getattr(self, name)) for name in WORKLOAD_DEFAULTS))

    @property
    def case_key(self) -> tuple:
        return self.key[1:]

    @property
    def interval(self) -> tuple[float, float] | None:
        if self.ci_low_ms is None or self.ci_high_ms is None:
            return None
        return float(self.ci_low_ms), float(self.ci_high_ms)

    @property
    def spread(self) -> bool:
        """IQR over NOISE_THRESHOLD of the median."""
        return _spread(self.time_ms, self.time_ms_iqr)

    @property
    def unrepeatable(self) -> bool:
        return self.repeatable is False

    @property
    def kernel_trouble(self) -> str | None:
        """"wrong kernel", or "overhead" (declared kernels under the threshold of the call)."""
        if self.status == Status.WRONG_KERNEL:
            return "wrong kernel"
        if self.overhead:
            return "overhead"
        return None

    def __hash__(self) -> int:
        return hash((self.run_id, self.timestamp, self.key))


FLAT_FIELDS = frozenset(f.name for f in dataclasses.fields(Record))


def judged(record: Record) -> Record:
    """`record` with its time held to physics: a GPU timing over the policy's margin beyond its datasheet's compute
    or bandwidth roof is `implausible` (`extra.implausible`: how many times each roof it read, and `was`, the
    verdict it replaces, kept in the reason too); every other record as it is. Applied as a record is made and as
    one is read, so an older run reads right."""
    if record.device != "cuda" or record.status not in JUDGED:
        return record
    over = peaks.beyond_datasheet(record.device_name, record.dtype, record.tflops, record.bandwidth_gbs)
    if not over:
        return record
    words = {kind: peaks.times_words(times) for kind, times in over.items()}
    reason = str(peaks.beyond_words(record.device_name, record.dtype, words.get("compute"), words.get("memory")))
    found: dict[str, Any] = {kind: round(times, 2) for kind, times in over.items()}
    if record.status != Status.OK:
        reason += f"; and {record.status}: {record.reason}"
        found["was"] = str(record.status)
    return dataclasses.replace(record, status=Status.IMPLAUSIBLE, reason=reason,
                               extra={**record.extra, "implausible": found})


def upgrade(lines: list[dict[str, Any]]) -> list[Record]:
    """One file's checked lines as records; timed version-1 records without an interval make the file version 0."""
    old = any(r["schema_version"] == 1 and r.get("status") in ("ok", "mismatch") and r.get("time_ms") is not None
              and "ci_low_ms" not in r for r in lines)
    return [Record.from_dict({**r, "schema_version": 0} if old and r["schema_version"] == 1 else r) for r in lines]


def _spread(median: float | None, iqr: float | None) -> bool:
    return median is not None and iqr is not None and iqr > NOISE_THRESHOLD * median


def apart(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two intervals do not overlap."""
    return a[0] > b[1] or b[0] > a[1]


def key_of(record: dict[str, Any]) -> tuple:
    """Record.key of a stored line not read into a record."""
    workload = (_hashable(record.get(name, default)) for name, default in WORKLOAD_DEFAULTS.items())
    return (*(record.get(name) for name in KEY_FIELDS), *workload)


def case_of(record: Record) -> Case:
    """The case a stored record measured."""
    from attnbench.core.case import Case

    return Case(**{name: getattr(record, name) for name in Case.__dataclass_fields__})


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value
