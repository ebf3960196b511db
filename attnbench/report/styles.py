"""One colour and marker per backend, fixed for a whole report so a backend looks the same in every chart."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# Colour-blind-friendly-ish categorical colours with red left out: red means "mismatch" in every chart.
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
    "#7f7f7f", "#393b79", "#637939", "#8c6d31", "#7b4173", "#3182bd", "#e6550d", "#31a354",
)
MARKERS = ("o", "s", "^", "D", "v", "P", "h", "<", ">", "p", "8", "d")
MISMATCH_COLOR = "#d62728"
# How a failed point is marked: an X at the bottom of the panel with the status written beside it.
STATUS_LABELS = {"oom": "OOM", "error": "error", "timeout": "timeout", "skipped": "skipped", "mismatch": "mismatch",
                 "wrong_kernel": "wrong kernel"}


@dataclass(frozen=True)
class BackendStyle:
    """How one backend is drawn."""

    color: str
    marker: str


def backend_styles(backends: Iterable[str]) -> dict[str, BackendStyle]:
    """Assign styles from the sorted set of backend names, so the assignment is stable and repeatable."""
    names = sorted(set(backends))
    return {
        name: BackendStyle(PALETTE[i % len(PALETTE)], MARKERS[(i + i // len(PALETTE)) % len(MARKERS)])
        for i, name in enumerate(names)
    }
