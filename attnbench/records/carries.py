"""Which parts a record of each status carries (docs/results.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

from attnbench.records.parts import Correctness, Implausibility, Kernels, Timing, unset
from attnbench.records.record import Record, Status

# An error's reason where a finished measurement's memory release failed: it keeps its timing.
RELEASE_FAILED = "while releasing memory"


@dataclass(frozen=True)
class Carries:
    must: tuple[type, ...] = ()
    never: tuple[type, ...] = ()


MEASURED_PARTS = (Timing, Correctness)
UNMEASURED = Carries(never=(Timing, Implausibility))
RULE: dict[Status, Carries] = {
    Status.OK: Carries(MEASURED_PARTS, (Implausibility,)),
    Status.MISMATCH: Carries(MEASURED_PARTS, (Implausibility,)),
    Status.WRONG_KERNEL: Carries((*MEASURED_PARTS, Kernels), (Implausibility,)),
    Status.IMPLAUSIBLE: Carries((*MEASURED_PARTS, Implausibility)),
    Status.SKIPPED: UNMEASURED,
    Status.OOM: UNMEASURED,
    Status.ERROR: UNMEASURED,
    Status.TIMEOUT: Carries(never=(Timing, Correctness, Implausibility)),
}
# The Timing fields a timed record holds, by the schema version that brought them.
TIMING_SINCE: dict[int, tuple[str, ...]] = {
    0: ("time_ms", "samples", "times_ms"),
    1: ("ci_low_ms", "ci_high_ms", "ci_level"),
}


def rule_problem(record: Record) -> str | None:
    """What `record` carries against its status's rule, in one line; None where it follows it."""
    status, rule = record.status, RULE[record.status]
    missing = [kind for kind in rule.must if record.part(kind) is None]
    if missing:
        return f"status {status} without its {part_words(missing[0])}"
    never = [kind for kind in rule.never if record.part(kind) is not None]
    if never and not (never == [Timing] and status == Status.ERROR and RELEASE_FAILED in str(record.reason)):
        return f"status {status} with {part_words(never[0])}: no {status} record carries it"
    timing = record.timing
    if Timing in rule.must and timing is not None:
        held = {spec.name for spec in fields(Timing) if getattr(timing, spec.name) != unset(spec)}
        lacking = [name for version, names in TIMING_SINCE.items() if record.schema_version >= version
                   for name in names if name not in held]
        if lacking:
            return f"status {status} without its timing's {lacking[0]} (schema_version {record.schema_version})"
    return None


def part_words(kind: type) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", " ", kind.__name__).lower()
