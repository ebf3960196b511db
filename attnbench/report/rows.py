"""One record as the cells of a table row, shared by the HTML and Markdown tables so they read the same."""

from __future__ import annotations

from collections.abc import Callable

from attnbench.core.units import fmt_bytes, fmt_float, fmt_ms, fmt_ratio
from attnbench.records.record import MEASURED, Record, Status
from attnbench.records.words import dtype_word
from attnbench.report.groups import quant_words
from attnbench.report.names import short_kernel_name

# Marks a noisy median (attnbench.core.policy.noisy_words).
NOISY_MARK = "~"
# Marks a median timed on a throttled or shared GPU.
THROTTLED_MARK = "!"
# Marks the status of a record whose two calls on the same inputs gave different bits.
UNREPEATABLE_MARK = "≠"

# (key, header, numeric?) for the full records table.
COLUMNS = (
    ("backend", "backend", False), ("dtype", "dtype", False), ("batch", "batch", True), ("seq_len", "seq", True),
    ("kv_seq_len", "kv seq", True), ("heads", "heads", True), ("kv_heads", "kv heads", True),
    ("head_dim", "d", True), ("causal", "causal", False), ("window", "window", True), ("mode", "mode", False),
    ("status", "status", False), ("time_ms", "median ms", True), ("interval", "interval ms", True),
    ("iqr", "IQR ms", True),
    ("tflops", "TFLOP/s", True), ("bandwidth_gbs", "GB/s", True), ("percent_of_peak", "% of peak", True),
    ("measured_percent", "% of measured", True),
    ("speedup", "speed-up", True), ("memory", "peak mem", True), ("setup", "setup ms", True),
    ("max_abs_error", "max err", True), ("error_bound", "bound", True),
    ("rel_l2_original", "rel L2 vs originals", True), ("reason", "reason", False),
    ("kernel", "kernel", False), ("ran", "top kernel (share)", False),
)


def sort_value(record: Record, key: str, speedup: float | None) -> str:
    """The raw value a numeric column sorts by ('' when absent)."""
    raw = {
        "iqr": record.time_ms_iqr, "memory": record.peak_memory_bytes, "speedup": speedup,
        "setup": record.setup.setup_ms,
        "measured_percent": record.roof.percent_of_measured_peak,
        "rel_l2_original": rel_l2_original(record),
        "interval": record.interval and record.interval[1] - record.interval[0],
    }.get(key, getattr(record, key, None))
    if raw is None or isinstance(raw, bool):
        return ""
    return repr(float(raw))


def _optional(value: float | None, show: Callable[[float], str]) -> str:
    return show(value) if value is not None else ""


def _percent_of_peak_text(record: Record) -> str:
    if record.percent_of_peak is None:
        return ""
    if record.status == Status.IMPLAUSIBLE:  # beyond the datasheet: records.record.judged
        return f"{record.percent_of_peak:.1f}% (beyond physics: the timing is broken)"
    above = record.roof.above_roof
    return f"{record.percent_of_peak:.1f}%" + (" (over its roof: the roof is wrong)" if above else "")


def _error_text(value: float | None) -> str:
    return _optional(value, lambda v: fmt_float(v, 2))


# Each column not shown as the record's raw field: f(record, speed-up).
_DISPLAY: dict[str, Callable[[Record, float | None], str]] = {
    # on one line: "fp8e4m3 qhead", "bf16 kvfp8e4m3 qtensor"
    "dtype": lambda r, _: "\u00a0".join([dtype_word(r.dtype), *quant_words(r, short=True)]),
    "status": lambda r, _: status_text(r),
    "rel_l2_original": lambda r, _: _error_text(rel_l2_original(r)),
    "time_ms": lambda r, _: median_text(r),
    "iqr": lambda r, _: _optional(r.time_ms_iqr, fmt_ms),
    "interval": lambda r, _: interval_text(r),
    "tflops": lambda r, _: _optional(r.tflops, fmt_float),
    "bandwidth_gbs": lambda r, _: _optional(r.bandwidth_gbs, fmt_float),
    "percent_of_peak": lambda r, _: _percent_of_peak_text(r),
    "measured_percent": lambda r, _: _optional(r.roof.percent_of_measured_peak,
                                               lambda v: f"{v:.1f}%"),
    "speedup": lambda _, speedup: _optional(speedup, fmt_ratio),
    "memory": lambda r, _: _optional(r.peak_memory_bytes, fmt_bytes),
    "setup": lambda r, _: setup_text(r),
    "max_abs_error": lambda r, _: _error_text(r.max_abs_error),
    "error_bound": lambda r, _: _error_text(r.error_bound),
    "causal": lambda r, _: "yes" if r.causal else "no",
    "ran": lambda r, _: ran_text(r),
}


def display_value(record: Record, key: str, speedup: float | None) -> str:
    """The text a reader sees in a cell (raw strings from the run stay raw here; templates escape them)."""
    show = _DISPLAY.get(key)
    if show is not None:
        return show(record, speedup)
    value = getattr(record, key, None)
    return "" if value is None else str(value)


def rel_l2_original(record: Record) -> float | None:
    """The relative L2 error against the float64 reference on the original inputs (where attnbench quantized
    nothing, the kernel error)."""
    checked = record.checked
    metric = checked.error_vs_original or (None if checked.quantized == "attnbench" else checked.kernel_error)
    return None if not metric or metric.get("rel_l2") is None else float(metric["rel_l2"])


def kernel_unchecked(record: Record) -> str | None:
    """Why a measured record's kernels were never checked against its backend's declared names, or None: such a
    record is shown as unchecked, never as a kernel that passed."""
    if record.status not in MEASURED or record.status == Status.WRONG_KERNEL:
        return None
    if not record.kernels:  # read back without kernels: record.BEFORE_PROFILING
        return str(record.kernels_reason or "the profiler saw nothing")
    if record.attention_share is None:
        return "its backend declares no kernel names here"
    return None


def ran_text(record: Record, trace: bool = True) -> str:
    """The profiled call's top kernel and its share, "overhead", "unchecked" with why, and (unless `trace` is False:
    the HTML table links it) the --trace file."""
    kernels = record.kernels
    unchecked = kernel_unchecked(record)
    if not kernels:
        return f"unchecked: {unchecked}" if unchecked else ""
    top = kernels[0]
    words = [f"{short_kernel_name(top['name'])[:60]} {top['share']:.0%}"]
    if unchecked:
        words.append(f"unchecked: {unchecked}")
    if record.overhead:
        words.append("overhead")
    if trace and record.trace:
        words.append(str(record.trace))
    return " · ".join(words)


def setup_text(record: Record) -> str:
    """The one-time setup in ms, with its largest reported part named ("4120 (compile 3980)"); '' when none."""
    setup = record.setup
    if setup.setup_ms is None:
        return ""
    text = fmt_ms(setup.setup_ms)
    named = {k: v for k, v in (setup.setup_parts or {}).items() if k != "other"}
    if named:
        part, value = max(named.items(), key=lambda kv: kv[1])
        text += f" ({part} {fmt_ms(value)})"
    return text


def status_text(record: Record) -> str:
    """The status, with UNREPEATABLE_MARK after it when two calls gave different bits ("ok ≠")."""
    return str(record.status) + (f" {UNREPEATABLE_MARK}" if record.unrepeatable else "")


def interval_text(record: Record) -> str:
    """The median's interval as "low–high" ms, '' for a record without one."""
    if record.interval is None:
        return ""
    return "–".join(fmt_ms(bound) for bound in record.interval)


def median_text(record: Record) -> str:
    """The median time, with NOISY_MARK in front when the record is noisy, THROTTLED_MARK when throttled."""
    if record.time_ms is None:
        return ""
    return (NOISY_MARK if record.noisy else "") + (THROTTLED_MARK if record.throttled else "") \
        + fmt_ms(record.time_ms)
