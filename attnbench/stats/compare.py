"""compare_runs: two stored runs matched case by case — the pace, ratios, regressions beyond the noise, new failures,
judged as a Verdict with its Reasons (the rules: docs/verdicts.md)."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from attnbench.core import policy
from attnbench.core.errors import ResultsError
from attnbench.core.policy import MIN_BACKEND_CASES
from attnbench.records.env import machine_differences, read_env, software_differences
from attnbench.records.record import BAD_STATUSES, Record, Status
from attnbench.records.results import load_records, results_path
from attnbench.records.words import case_words
from attnbench.stats.change_rule import (
    BackendShift,
    MachinePace,
    Pace,
    backend_shifts,
    bar,
    beyond,
    judge_pace,
    kernel_change,
    machine_pace,
    spread_of,
)
from attnbench.stats.match import Match


class Verdict(enum.StrEnum):
    """compare's decision; `exit_code` is the command's exit status."""

    PASSED = "pass"
    REGRESSED = "regressed"
    BROKE = "broke"
    NOT_JUDGED = "not judged: another machine"

    @property
    def exit_code(self) -> int:
        return {Verdict.PASSED: 0, Verdict.NOT_JUDGED: 3}.get(self, 1)


class Cause(enum.StrEnum):
    NEW_FAILURE = "new failure"
    DETERMINISM_BROKEN = "determinism broken"
    SHARED_SLOWDOWN = "shared slowdown"
    REGRESSION = "regression"
    BACKEND_REGRESSION = "backend regression"
    OTHER_MACHINE = "another machine"


BROKEN = {Cause.NEW_FAILURE, Cause.DETERMINISM_BROKEN}


@dataclass(frozen=True)
class Reason:
    cause: Cause
    count: int  # measurements, backends or machine differences


@dataclass(frozen=True)
class Comparison:
    """What changed from BASE to NEW (the rules: change_rule)."""

    base: str
    new: str
    threshold: float
    matches: list[Match] = field(default_factory=list)
    only_in_base: int = 0
    only_in_new: int = 0
    versions: tuple[int, int] = (0, 0)  # the record schema of BASE and of NEW
    machine_notes: list[str] = field(default_factory=list)  # env.json differences
    software_notes: list[str] = field(default_factory=list)
    relative: bool = True  # False with --absolute: every ratio is judged raw
    device: str = policy.FALLBACK_DEVICE  # whose noise figures apply
    probes: tuple[dict | None, dict | None] = (None, None)  # each run's env.json pace_probe

    @cached_property
    def ratios(self) -> list[float]:
        return sorted(m.ratio for m in self.matches if m.ratio is not None)

    @property
    def spread(self) -> float:
        """The log ratios' spread, pooled with the device's ratio noise."""
        return spread_of(self.ratios, self._device.ratio_noise)

    @cached_property
    def machine(self) -> MachinePace | None:
        """The machine's own pace, when both runs timed it on one machine and software, not --absolute."""
        if not self.relative or self.machine_notes or self.software_notes or self._device.probe_noise is None:
            return None
        return machine_pace(*self.probes)

    @property
    def _machine_value(self) -> float:
        return self.machine.value if self.machine else 1.0

    @property
    def _device(self) -> policy.DevicePolicy:
        return policy.device(self.device)

    @property
    def pace_noise(self) -> float:
        dev = self._device
        return math.hypot(dev.probe_noise or 0.0, self.machine.error) if self.machine else dev.pace_noise

    @cached_property
    def judged(self) -> Pace | None:
        """The kernels' pace (over the machine's own, where timed); None without ratios."""
        over = self._machine_value
        return judge_pace([r / over for r in self.ratios], self.spread, self.pace_noise, self.threshold)

    @property
    def pace(self) -> float | None:
        """The median NEW/BASE ratio over every measurement both ran ok."""
        return self.judged.value * self._machine_value if self.judged else None

    @property
    def raw(self) -> bool:
        """Ratios are judged raw with --absolute, across machines or software, or when the pace is a finding."""
        return (not self.relative or bool(self.machine_notes) or bool(self.software_notes)
                or self.judged is None or self.judged.finding)

    @property
    def judged_pace(self) -> float:
        """What each ratio is divided by before it is judged (raw: the machine's pace, else 1)."""
        return self._machine_value if self.raw or self.pace is None else self.pace

    @property
    def _shared_noise(self) -> float:
        """The device's backend noise, and judged raw the pace noise."""
        return math.hypot(self._device.backend_noise, self.pace_noise if self.raw else 0.0)

    @property
    def unshared(self) -> list[str]:
        """When the pace is a finding: the backends judged across the board that did not move with it."""
        if self.judged is None or not self.judged.finding:
            return []
        up, over = self.judged.value > 1, self._machine_value
        return [b for b, g in self.geomean_by_backend.items()
                if len(self._ratios_by_backend[b]) >= MIN_BACKEND_CASES
                and not (beyond(g / over, self.threshold) and (g > over) == up)]

    @property
    def pace_slower(self) -> bool:
        """The pace is a slowdown finding and every backend judged moved with it: the gate fails."""
        return (self.judged is not None and self.judged.finding and self.judged.value > 1
                and not self.unshared)

    def _departure(self, m: Match) -> float:
        """A match's log ratio over the pace judged against: > 0 slower, < 0 faster."""
        return math.log(m.ratio) - math.log(self.judged_pace)  # type: ignore[arg-type]

    def _changed(self, m: Match) -> bool:
        """Beyond the threshold and bar(m) of its backend's spread, intervals apart, once over the judged pace."""
        if m.ratio is None:
            return False
        pace = self.judged_pace
        error = math.hypot(self.spread_of_backend(m.backend), self._shared_noise)
        return beyond(m.ratio / pace, self.threshold) and m.beyond_noise(pace) \
            and abs(self._departure(m)) > self.case_bar * error

    def spread_of_backend(self, backend: str) -> float:
        """A backend's ratios' spread pooled with the run's, never below the run's."""
        return max(self.spread, spread_of(self._ratios_by_backend.get(backend, []), self.spread))

    @property
    def case_bar(self) -> float:
        """The spreads a measurement's ratio must depart from the pace by (change_rule.bar)."""
        return bar(len(self.ratios))

    @property
    def backend_bar(self) -> float:
        """The standard errors a backend's mean ratio must depart from the pace by (change_rule.bar)."""
        return bar(sum(1 for r in self._ratios_by_backend.values() if len(r) >= MIN_BACKEND_CASES))

    @cached_property
    def _ratios_by_backend(self) -> dict[str, list[float]]:
        ratios: dict[str, list[float]] = {}
        for m in self.matches:
            if m.ratio is not None:
                ratios.setdefault(m.backend, []).append(m.ratio)
        return ratios

    @property
    def backend_shifts(self) -> list[BackendShift]:
        """Each backend's across-the-board shift; when the pace is a finding, those that moved with it are changed."""
        spreads = {b: self.spread_of_backend(b) for b in self._ratios_by_backend}
        shifts = backend_shifts(self._ratios_by_backend, self.judged_pace, spreads, self._shared_noise, self.threshold)
        moved = self.moved_with_pace
        return [replace(s, changed=True) if s.backend in moved else s for s in shifts]

    @property
    def moved_with_pace(self) -> list[str]:
        """When the pace is a finding: the backends judged across the board that moved with it; else []."""
        if self.judged is None or not self.judged.finding:
            return []
        return [b for b in self._ratios_by_backend if len(self._ratios_by_backend[b]) >= MIN_BACKEND_CASES
                and b not in self.unshared]

    @property
    def backend_regressions(self) -> list[BackendShift]:
        return [b for b in self.backend_shifts if b.slower]

    @property
    def regressions(self) -> list[Match]:
        """Slower beyond the threshold and the noise, the intervals apart; neither side noisy or throttled."""
        return [m for m in self.matches if self._changed(m) and not m.noisy and not m.throttled
                and self._departure(m) > 0]

    @property
    def improvements(self) -> list[Match]:
        return [m for m in self.matches if self._changed(m) and not m.noisy and not m.throttled
                and self._departure(m) < 0]

    @property
    def noisy(self) -> list[Match]:
        """Would be a regression or improvement, but BASE or NEW is noisy: listed, never judged."""
        return [m for m in self.matches if self._changed(m) and m.noisy]

    @property
    def throttled(self) -> list[Match]:
        """Would be a regression or improvement, but timed on a throttled or shared GPU: listed, never judged."""
        return [m for m in self.matches if self._changed(m) and m.throttled and not m.noisy]

    @property
    def throttled_anywhere(self) -> int:
        return sum(1 for m in self.matches if m.throttled)

    @property
    def new_failures(self) -> list[Match]:
        return [m for m in self.matches if m.base_status == "ok" and m.new_status in BAD_STATUSES]

    @property
    def turned_unrepeatable(self) -> list[Match]:
        return [m for m in self.matches if m.base_repeatable is True and m.new_repeatable is False]

    @property
    def determinism_broken(self) -> list[Match]:
        """Turned non-repeatable where NEW asked for deterministic kernels."""
        return [m for m in self.turned_unrepeatable if m.new_deterministic]

    @property
    def fixed(self) -> list[Match]:
        return [m for m in self.matches if m.base_status in BAD_STATUSES and m.new_status == "ok"]

    @property
    def geomean_by_backend(self) -> dict[str, float]:
        return {b: math.exp(sum(map(math.log, r)) / len(r)) for b, r in sorted(self._ratios_by_backend.items())}

    @cached_property
    def reasons(self) -> tuple[Reason, ...]:
        """What stands against a pass, each cause with its count."""
        counts = ((Cause.NEW_FAILURE, len(self.new_failures)), (Cause.DETERMINISM_BROKEN, len(self.determinism_broken)),
                  (Cause.SHARED_SLOWDOWN, len(self.ratios) if self.pace_slower else 0),
                  (Cause.REGRESSION, len(self.regressions)), (Cause.BACKEND_REGRESSION, len(self.backend_regressions)),
                  (Cause.OTHER_MACHINE, len(self.machine_notes)))
        return tuple(Reason(cause, count) for cause, count in counts if count)

    @property
    def verdict(self) -> Verdict:
        """Broke outranks another machine, which outranks a slowdown: no change of machine explains a failure."""
        causes = {r.cause for r in self.reasons}
        if causes & BROKEN:
            return Verdict.BROKE
        if Cause.OTHER_MACHINE in causes:
            return Verdict.NOT_JUDGED
        return Verdict.REGRESSED if causes else Verdict.PASSED

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code


def _schema(records: list[Record], path: Path) -> int:
    versions = sorted({r.schema_version for r in records})
    if len(versions) != 1:
        raise ResultsError(f"{path}: records mix schema versions {versions}; compare runs written by one attnbench")
    return versions[0]


def _index(records: list[Record]) -> dict[tuple, Record]:
    # The last record of a repeated measurement stands for it.
    return {r.key: r for r in records}


def _unsteady(record: Record) -> bool:
    """A record without an interval whose samples spread wide; one with an interval is judged by it, however wide."""
    return False if record.interval is not None else record.noisy


DEFAULT_THRESHOLD = policy.CHANGE_THRESHOLD


def compare_runs(base: Path, new: Path, threshold: float = DEFAULT_THRESHOLD, relative: bool = True) -> Comparison:
    """Match BASE and NEW by measurement key and say what regressed, improved, broke and was fixed."""
    if not threshold >= 0:
        raise ResultsError(f"threshold must be 0 or more (a fraction, 0.05 = 5%), got {threshold}")
    base_records, new_records = load_records(Path(base)), load_records(Path(new))
    for path, records in ((base, base_records), (new, new_records)):
        if not records:
            raise ResultsError(f"{results_path(Path(path))}: holds no records to compare")
    comparison = compare_records(base_records, new_records, str(base), str(new), threshold)
    base_env, new_env = read_env(Path(base)), read_env(Path(new))
    return replace(comparison, machine_notes=machine_differences(base_env, new_env),
                   software_notes=software_differences(base_env, new_env), relative=relative,
                   probes=(base_env.pace_probe, new_env.pace_probe))


def compare_records(base_records: list[Record], new_records: list[Record], base: str, new: str,
                    threshold: float = DEFAULT_THRESHOLD) -> Comparison:
    """compare_runs on records already read; `base` and `new` name them."""
    versions = (_schema(base_records, Path(base)), _schema(new_records, Path(new)))
    base_index, new_index = _index(base_records), _index(new_records)
    shared = [k for k in base_index if k in new_index]
    if not shared:
        raise ResultsError(f"no overlapping cases between {base} and {new}: they share no backend, case and device "
                           "(check that both ran the same suite on the same device type)")
    matches = []
    for key in shared:
        b, n = base_index[key], new_index[key]
        matches.append(Match(
            key=key, backend=b.backend, case=case_words(b), base_status=str(b.status),
            new_status=str(n.status), base_ms=b.time_ms, new_ms=n.time_ms,
            base_iqr=float(b.time_ms_iqr or 0.0), new_iqr=float(n.time_ms_iqr or 0.0),
            new_reason=n.reason if n.status != Status.OK else b.reason,
            base_noisy=_unsteady(b), new_noisy=_unsteady(n), base_throttled=bool(b.throttled),
            new_throttled=bool(n.throttled), base_ci=b.interval, new_ci=n.interval,
            base_repeatable=b.repeatable, new_repeatable=n.repeatable,
            new_deterministic=n.determinism is not None, new_repeat=repeat_words(n),
            kernel_change=kernel_change(b, n),
        ))
    return Comparison(
        base=base, new=new, threshold=threshold, matches=matches,
        only_in_base=len(base_index) - len(shared), only_in_new=len(new_index) - len(shared), versions=versions,
        device=str(base_index[shared[0]].device),
    )


def repeat_words(record: Record) -> str:
    """A record's difference between its two calls: '<tensor> by up to <diff>', '' when they agreed."""
    if not record.unrepeatable:
        return ""
    checked = record.checked
    diff = checked.repeat_max_diff
    return f"{checked.repeat_tensor} " + (f"by up to {diff:.3g}" if diff is not None else "by a NaN or Inf")
