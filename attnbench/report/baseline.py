"""The baseline backend that speed-ups are measured against, and the speed-ups themselves."""

from __future__ import annotations

from collections.abc import Iterable

from attnbench.core.errors import ResultsError
from attnbench.records.record import TIMED, Record, Status
from attnbench.report.groups import CaseGroup

DEFAULT_BASELINES = ("sdpa-math", "naive")


def choose_baseline(records: Iterable[Record], requested: str | None) -> str | None:
    """The requested baseline (which must be in the run), else sdpa-math if it ran ok, else naive."""
    records = list(records)
    present = sorted({r.backend for r in records})
    if requested is not None:
        if requested not in present:
            raise ResultsError(f"baseline backend {requested!r} is not in these results "
                               f"(backends: {', '.join(present)})")
        return requested
    ran = {r.backend for r in records if r.status == Status.OK}
    for name in DEFAULT_BASELINES:
        if name in ran:
            return name
    return None


def usable_time(record: Record | None, include_mismatch: bool = False) -> float | None:
    """A record's median time if it may be compared (ok only, unless `include_mismatch`)."""
    allowed = TIMED if include_mismatch else (Status.OK,)
    if record is None or record.status not in allowed:
        return None
    value = record.time_ms
    return float(value) if value is not None and value > 0 else None


def group_speedups(group: CaseGroup, baseline: str | None,
                   include_mismatch: bool = False) -> dict[tuple[str, int], float]:
    """Baseline time / backend time for each (backend, length) where both ran ok (or the backend mismatched)."""
    if baseline is None:
        return {}
    cells = group.by_backend_x()
    result: dict[tuple[str, int], float] = {}
    for (backend, x), record in cells.items():
        base = usable_time(cells.get((baseline, x)))
        mine = usable_time(record, include_mismatch)
        if base is not None and mine is not None:
            result[(backend, x)] = base / mine
    return result
