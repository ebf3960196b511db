"""One colour and marker per backend, fixed for a whole report."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# Categorical colours with red left out: red means "mismatch" in every chart.
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
    "#7f7f7f", "#393b79", "#637939", "#8c6d31", "#7b4173", "#3182bd", "#e6550d", "#31a354",
)
MARKERS = ("o", "s", "^", "D", "v", "P", "h", "<", ">", "p", "8", "d")
MISMATCH_COLOR = "#d62728"
STATUS_LABELS = {"oom": "OOM", "error": "error", "timeout": "timeout", "skipped": "skipped", "mismatch": "mismatch",
                 "wrong_kernel": "wrong kernel", "implausible": "implausible"}


@dataclass(frozen=True)
class BackendStyle:

    color: str
    marker: str


def backend_styles(backends: Iterable[str]) -> dict[str, BackendStyle]:
    """Styles assigned over the sorted backend names, so the assignment is stable."""
    names = sorted(set(backends))
    return {
        name: BackendStyle(PALETTE[i % len(PALETTE)], MARKERS[(i + i // len(PALETTE)) % len(MARKERS)])
        for i, name in enumerate(names)
    }
