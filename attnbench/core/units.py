"""Numbers and texts written for people: times, bytes, lengths, ratios, cut texts."""

from __future__ import annotations

import html
import math
from typing import Any

MIB = 1024**2
GIB = 1024**3


def fmt_ms(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "—"
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def fmt_bytes(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= GIB:
        return f"{value / GIB:.2f} GiB"
    if value >= MIB:
        return f"{value / MIB:.1f} MiB"
    return f"{value / 1024:.1f} KiB"


def bytes_unit(values: list[float]) -> tuple[int, str]:
    """GiB when even the smallest is at least 1 GiB, else MiB."""
    return (GIB, "GiB") if values and min(values) >= GIB else (MIB, "MiB")


def throughput_unit(tflops: list[float]) -> tuple[float, str]:
    """(TFLOP/s per unit, name): GFLOP/s when all are under 1 TFLOP/s."""
    return (1.0, "TFLOP/s") if tflops and max(tflops) >= 1.0 else (1e-3, "GFLOP/s")


def fmt_length(value: int) -> str:
    if value >= 1024 and value % 1024 == 0:
        return f"{value // 1024}K"
    return str(value)


def fmt_ratio(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value:.2f}×"


def fmt_float(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "—"
    return f"{value:.{digits}g}"


def fmt_size(n: int) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / MIB:.1f} MiB"


def md_cell(text: Any) -> str:
    """HTML-escaped (GitHub renders HTML), pipes escaped, one line."""
    value = html.escape(str(text), quote=False).replace("|", "\\|")
    return " ".join(value.split())


def clipped(text: str, limit: int) -> str:
    """`text`, or its first `limit - 1` characters and "…" when it is longer than `limit`."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
