"""The measurement record: its fields, its identity and what is read off it."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any

from attnbench.core import axes
from attnbench.core.policy import NOISE_THRESHOLD

# What each version changed; the loader reads every one (docs/results.md, "Schema versions"):
# 0: written before the median's interval existed (no ci_low_ms on a timed record); attnbench of that time labelled
#    them 1, and the loader relabels them 0.
# 1: the interval, `stop`, `noisy`; bytes_moved is the inputs' traffic floor for every backend.
# 2: bytes_moved (and bandwidth_gbs) add the score matrix's reads and writes for backends that materialise it.
SCHEMA_VERSION = 2


class Status(enum.StrEnum):
    """A record's outcome; a str, so the stored JSON and every comparison with its word are unchanged."""

    OK = "ok"
    SKIPPED = "skipped"
    OOM = "oom"
    ERROR = "error"
    MISMATCH = "mismatch"
    TIMEOUT = "timeout"
    WRONG_KERNEL = "wrong_kernel"


STATUSES = tuple(Status)
# The statuses whose call ran (so was timed and profiled).
MEASURED = (Status.OK, Status.MISMATCH, Status.WRONG_KERNEL)
# The statuses whose time is a timing of the backend's answer (a mismatch's time is still recorded).
TIMED = (Status.OK, Status.MISMATCH)
# What a record read back without `kernels` says of them: it was written before the profiled call existed.
BEFORE_PROFILING = "written before profiling"
# The fields that identify a measurement: two records with the same key measured the same thing.
KEY_FIELDS = (
    "backend", "device", "dtype", "batch", "seq_len", "kv_seq_len", "heads", "kv_heads",
    "head_dim", "causal", "window", "mode",
)
# The shape's sizes: a record of a case has each at 1 or more (the suite's bounds).
SIZE_FIELDS = ("batch", "seq_len", "kv_seq_len", "heads", "kv_heads", "head_dim")
# The workload axes' fields (attnbench.core.axes: the quantized inputs' too) and their values in the dense case: a
# record carries them only when set, and a record without one (written before they existed, or of a dense case) has
# the default.
WORKLOAD_DEFAULTS: dict[str, Any] = axes.record_defaults()
# The workload fields drawn from the case's seed (the actual lengths), beside the axes that ask for them.
DRAWN_FIELDS = axes.drawn_fields()


@dataclass(frozen=True)
class Record:
    """One measurement: a backend on a case, as written and as read back (from_dict). Fields follow
    docs/results.md."""

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
    # The workload axes, as Case holds them (attnbench.core.axes); left out of the stored line when at their default.
    for _field in axes.case_fields():
        __annotations__[_field.name] = _field.annotation.replace("tuple[int, ...]", "list[int]")
        vars()[_field.name] = _field.default
    del _field
    reason: str | None = None
    kernel: str | None = None
    device_name: str | None = None
    case_id: str | None = None
    time_ms: float | None = None
    time_ms_iqr: float | None = None
    time_ms_min: float | None = None
    samples: int = 0
    times_ms: list[float] = field(default_factory=list)
    timer: str | None = None
    # The run's interval of the median at ci_level confidence (ci_source "windows": the spread of the windows'
    # medians pooled with the device's window noise, plus its run noise; core.interval.run_interval). Records
    # written before windows say "samples" (the pooled samples' order statistics) or "run-to-run noise".
    ci_low_ms: float | None = None
    ci_high_ms: float | None = None
    ci_level: float | None = None
    ci_source: str | None = None
    stop: str | None = None  # why sampling stopped: "precision", "budget" or "max_samples"
    # The interval is wider than the precision asked, or too few samples for one (older records: from_dict gives it from the IQR).
    noisy: bool = False
    # CUDA only: heat or power slowed the GPU, or another process was on it, when the timing ended
    # (attnbench.gpu.judge); None where it was not or could not be sampled (CPU, no NVML or nvidia-smi).
    throttled: bool | None = None
    flops: int | None = None
    tflops: float | None = None
    bytes_moved: int | None = None  # counting.bytes_moved(Case): the mode's memory-traffic floor
    bandwidth_gbs: float | None = None  # bytes_moved / median time, in GB/s (1e9 bytes/s)
    percent_of_peak: float | None = None  # of the compute roof, or of the bandwidth roof for decode-like cases
    peak_memory_bytes: int | None = None
    memory_method: str | None = None
    memory_estimate_bytes: int | None = None
    max_abs_error: float | None = None
    error_bound: float | None = None
    rows_checked: int | None = None
    grad_checked: bool = False
    # Two calls on the same inputs gave the same bits (attnbench.verify.repeat): a forward's output, a backward's gradients
    # where they are checked; None where not compared (not measured, or the gradients were not checked).
    repeatable: bool | None = None
    kv_expanded: bool = False
    # One profiled call after the samples (attnbench.timing.profile): [{name, calls, time_ms, share}] as kernels_source
    # saw them (or None and kernels_reason); the declared kernels' share; `overhead` under its threshold; the trace.
    kernels: list[dict[str, Any]] | None = None
    kernels_reason: str | None = None
    kernels_source: str | None = None
    attention_share: float | None = None
    overhead: str | None = None
    trace: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        assert self.status in STATUSES, self.status
        assert self.status == Status.OK or self.reason, f"status {self.status} needs a reason"
        object.__setattr__(self, "status", Status(self.status))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        """A stored record (its fields checked by the loader) upgraded to this schema: a record without the noise
        flag gets it from its IQR (spread), one without `kernels` says it was written before profiling. Every field
        the line holds keeps its value, and its schema_version stays the one it was written under."""
        fields = dict(data)
        if "noisy" not in fields:
            fields["noisy"] = _spread(fields.get("time_ms"), fields.get("time_ms_iqr"))
        if "kernels" not in fields and fields.get("kernels_reason") is None:
            fields["kernels_reason"] = BEFORE_PROFILING
        return cls(**fields)

    def to_dict(self) -> dict[str, Any]:
        """The record as the JSON object stored on one line of results.jsonl (workload axes only when set)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # JSON already: asdict's copy is slow
        for name, default in WORKLOAD_DEFAULTS.items():
            if data[name] == default:
                del data[name]
            elif isinstance(data[name], tuple):
                data[name] = list(data[name])
        data["status"] = str(self.status)
        return data

    @property
    def key(self) -> tuple:
        """The identity of the measurement (case + backend + device + workload axes), for matching across runs."""
        return (*(getattr(self, name) for name in KEY_FIELDS),
                *(_hashable(getattr(self, name)) for name in WORKLOAD_DEFAULTS))

    @property
    def case_key(self) -> tuple:
        """The key without its backend: the records of one case across backends and runs."""
        return self.key[1:]

    @property
    def interval(self) -> tuple[float, float] | None:
        """The median's (ci_low_ms, ci_high_ms); None without one (not timed, or written before intervals)."""
        if self.ci_low_ms is None or self.ci_high_ms is None:
            return None
        return float(self.ci_low_ms), float(self.ci_high_ms)

    @property
    def spread(self) -> bool:
        """Whether the samples spread wide: IQR over NOISE_THRESHOLD of the median (the samples themselves are
        unsteady, so no interval computed from them can be trusted)."""
        return _spread(self.time_ms, self.time_ms_iqr)

    @property
    def unrepeatable(self) -> bool:
        """Whether two calls of the measurement gave different bits (None: not known to)."""
        return self.repeatable is False

    @property
    def kernel_trouble(self) -> str | None:
        """Why the time is not the backend's kernel's (attnbench.timing.profile's verdict): "wrong kernel", or
        "overhead" when its declared kernels were under the threshold of the call; None when neither is known. The
        one gate a recommendation passes a record through before its time may win."""
        if self.status == Status.WRONG_KERNEL:
            return "wrong kernel"
        if self.overhead:
            return "overhead"
        return None

    def __hash__(self) -> int:  # equal records are equal in these, so a record can key a dict (its lists cannot)
        return hash((self.run_id, self.timestamp, self.key))

    # A read-only view by field name, kept for the tests and scripts written against the stored JSON: attnbench's own
    # readers use the attributes (tests/test_record_type.py fails on a string key there). A field is always present,
    # at its default where the line left it out.
    def get(self, name: str, default: Any = None) -> Any:
        """The field `name`, or `default` when a record has no such field."""
        return getattr(self, name) if name in _FIELD_NAMES else default

    def __getitem__(self, name: str) -> Any:
        if name not in _FIELD_NAMES:
            raise KeyError(name)
        return getattr(self, name)

    def __contains__(self, name: object) -> bool:
        return name in _FIELD_NAMES


_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(Record))


def upgrade(lines: list[dict[str, Any]]) -> list[Record]:
    """The records of one file's lines (each checked already), upgraded once: a file whose timed records are labelled
    1 but carry no interval was written before intervals existed, and all its version-1 records are version 0; then
    each line is read into its Record (Record.from_dict)."""
    old = any(r["schema_version"] == 1 and r.get("status") in ("ok", "mismatch") and r.get("time_ms") is not None
              and "ci_low_ms" not in r for r in lines)
    return [Record.from_dict({**r, "schema_version": 0} if old and r["schema_version"] == 1 else r) for r in lines]


def _spread(median: float | None, iqr: float | None) -> bool:
    return median is not None and iqr is not None and iqr > NOISE_THRESHOLD * median


def apart(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two intervals (Record.interval) do not overlap: the two medians are told apart."""
    return a[0] > b[1] or b[0] > a[1]


def key_of(record: dict[str, Any]) -> tuple:
    """The identity of a stored line's measurement (Record.key of the record it holds), for lines not read into
    records: a file rewritten line by line, a case's fields before its record exists."""
    workload = (_hashable(record.get(name, default)) for name, default in WORKLOAD_DEFAULTS.items())
    return (*(record.get(name) for name in KEY_FIELDS), *workload)


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value
