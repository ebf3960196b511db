"""compare_runs: two stored runs matched case by case — ratios, regressions beyond the noise, new failures.

A regression is a slow-down beyond the threshold, once divided by the run's pace on one machine (Comparison.pace),
whose two intervals for the median do not overlap. A measurement whose two calls agreed bit for bit in BASE and not
in NEW turned non-repeatable: named, and a failure when NEW asked for deterministic kernels. Records written before
intervals fall back to the older rule (the medians differ by more than the two IQRs), and one whose IQR is over 10%
of its median is listed as noisy and never judged.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from attnbench.core.errors import ResultsError
from attnbench.core.units import fmt_ms, md_cell
from attnbench.report.change_rule import (MIN_BACKEND_CASES, MIN_PACE, BackendShift, backend_shifts, bar,
                                          kernel_change, spread_of)
from attnbench.report.groups import BAD_STATUSES, case_words
from attnbench.records.results import (apart, interval_of, is_noisy, is_throttled, key_of, load_records, read_env,
                                       results_path)


@dataclass
class Match:
    """One measurement present in both runs."""

    key: tuple
    backend: str
    case: str
    base_status: str
    new_status: str
    base_ms: float | None
    new_ms: float | None
    base_iqr: float
    new_iqr: float
    new_reason: str | None = None
    base_noisy: bool = False
    new_noisy: bool = False
    base_throttled: bool = False  # timed on a throttled or shared GPU (the record's `throttled`)
    new_throttled: bool = False
    base_ci: tuple[float, float] | None = None
    new_ci: tuple[float, float] | None = None
    base_repeatable: bool | None = None  # the record's `repeatable`: None where not compared
    new_repeatable: bool | None = None
    new_deterministic: bool = False  # NEW was measured with deterministic kernels asked for (extra.deterministic)
    new_repeat: str = ""  # NEW's difference between its two calls, in words
    kernel_change: str | None = None  # "X now runs K; no longer K'": another set of kernels ran (kernel_change)

    @property
    def noisy(self) -> bool:
        """Either side is a record without an interval whose samples spread wide: shown, never judged."""
        return self.base_noisy or self.new_noisy

    def noise_words(self) -> str:  # "base", "new" or "base and new"
        return " and ".join(side for side, flag in (("base", self.base_noisy), ("new", self.new_noisy)) if flag)

    @property
    def throttled(self) -> bool:  # either side timed on a throttled or shared GPU: shown, never judged
        return self.base_throttled or self.new_throttled

    def throttle_words(self) -> str:  # likewise
        return " and ".join(side for side, flag in (("base", self.base_throttled), ("new", self.new_throttled))
                            if flag)

    def unjudged_note(self) -> str:
        """' (noisy: new; throttled GPU: base)', or '' for a match that is judged."""
        parts = ([f"noisy: {self.noise_words()}"] if self.noisy else []) + \
            ([f"throttled GPU: {self.throttle_words()}"] if self.throttled else [])
        return f" ({'; '.join(parts)})" if parts else ""

    @property
    def ratio(self) -> float | None:
        """NEW / BASE median time, when both ran ok."""
        if self.base_status == "ok" and self.new_status == "ok" and self.base_ms and self.new_ms:
            return self.new_ms / self.base_ms
        return None

    def beyond_noise(self, pace: float = 1.0) -> bool:
        """Whether the two medians are told apart, NEW's divided by `pace`: their intervals do not overlap (or, for
        records without intervals, the medians differ by more than the two IQRs together)."""
        assert self.base_ms is not None and self.new_ms is not None
        if self.base_ci is not None and self.new_ci is not None:
            return apart((self.new_ci[0] / pace, self.new_ci[1] / pace), self.base_ci)
        return abs(self.new_ms / pace - self.base_ms) > self.base_iqr + self.new_iqr / pace

    def ratio_words(self, pace: float = 1.0) -> str:
        """'1.031×' (with ', 0.953× of the pace' when judged against a pace), or '' when either side did not run ok."""
        if self.ratio is None:
            return ""
        return f"{self.ratio:.3f}×" + (f" ({self.ratio / pace:.3f}× of the pace)" if pace != 1.0 else "")

    def side(self, which: str) -> str:
        """One side's median with its interval (or ±IQR for a record without one), or its status."""
        ms, iqr, ci, status = ((self.base_ms, self.base_iqr, self.base_ci, self.base_status) if which == "base"
                               else (self.new_ms, self.new_iqr, self.new_ci, self.new_status))
        if status != "ok":
            return status
        if ci is not None:
            return f"{fmt_ms(ms)} [{fmt_ms(ci[0])}, {fmt_ms(ci[1])}]"
        return f"{fmt_ms(ms)} ±{fmt_ms(iqr)}"


@dataclass
class Comparison:
    """What changed from BASE to NEW."""

    base: str
    new: str
    threshold: float
    matches: list[Match] = field(default_factory=list)
    only_in_base: int = 0
    only_in_new: int = 0
    versions: tuple[int, int] = (0, 0)  # the record schema of BASE and of NEW
    machine_notes: list[str] = field(default_factory=list)  # where the two runs' machines differ (env.json)
    # The run's pace: the median NEW/BASE ratio over every measurement both ran ok (None with under MIN_PACE of them).
    # On one machine with the same software, a shift every kernel shares is the machine's speed on that day, not a
    # kernel's, so each ratio is judged against it (`relative`); across machines, or with --absolute, it is not.
    pace: float | None = None
    relative: bool = True
    # The run-to-run noise between the two runs: the robust spread of the log ratios around their median, over the
    # same measurements as the pace (attnbench.report.change_rule: how far a ratio must depart from the pace).
    spread: float | None = None

    @property
    def paced(self) -> bool:
        """Whether the run has a pace apart from 1: off by at least a tenth of the threshold (1% at 10%)."""
        return self.pace is not None and abs(math.log(self.pace)) >= math.log1p(self.threshold / 10)

    @property
    def judged_pace(self) -> float:
        """What each ratio is divided by before it is judged: the pace when judging relative to it, else 1."""
        return self.pace if self.paced and self.relative and not self.machine_notes else 1.0  # type: ignore[return-value]

    @property
    def pace_note(self) -> str | None:
        """The run's pace in words, when it is apart from 1 (paced)."""
        if not self.paced:
            return None
        said = (f"NEW ran at {self.pace:.3f}× BASE's times across the board (the median of "
                f"{sum(1 for m in self.matches if m.ratio is not None)} matched measurements; run-to-run spread "
                f"±{math.expm1(self.spread or 0):.1%}; a change must depart from the pace by {self.case_bar:.1f}× it (or its backend's, if wider), "
                f"a backend's across-the-board one by {self.backend_bar:.1f} standard errors)")
        return said + (": one machine, the same software, so that is the machine's pace; each ratio is judged "
                       "against it (--absolute judges the raw ratios)" if self.judged_pace != 1.0 else "")

    @property
    def machine_warning(self) -> str | None:
        """The first thing to say when BASE and NEW ran on different machines or software: their ratios mix a
        change of kernel with a change of machine."""
        if not self.machine_notes:
            return None
        return ("NOT THE SAME MACHINE: " + "; ".join(self.machine_notes[:6])
                + (f" (and {len(self.machine_notes) - 6} more)" if len(self.machine_notes) > 6 else "")
                + ". Ratios below mix the change of machine with any change of kernel.")

    @property
    def version_note(self) -> str | None:
        """What a reader must know when the two runs were written by different record schemas (times compare; bytes
        and GB/s of materialising backends were counted differently before version 2)."""
        base, new = self.versions
        if base == new:
            return None
        return (f"BASE's records are schema {base}, NEW's {new} (attnbench.records.results): times and statuses compare; "
                "before version 2, bytes_moved left out the score matrix's traffic")

    def _changed(self, m: Match) -> bool:
        """Beyond the threshold (either way), with intervals that do not overlap, once NEW is divided by the pace
        judged against (judged_pace)."""
        if m.ratio is None:
            return False
        pace = self.judged_pace
        ratio = m.ratio / pace
        off = abs(math.log(m.ratio) - math.log(self.pace or 1.0))  # from the pace, whether judged against it or not
        return (ratio > 1 + self.threshold or ratio < 1 / (1 + self.threshold)) and m.beyond_noise(pace) \
            and (self.spread is None or off > self.case_bar * self.spread_of_backend(m.backend))

    def spread_of_backend(self, backend: str) -> float:
        """The run-to-run spread a backend's ratios are judged against: its own ratios' spread where it has MIN_PACE
        of them, never less than the run's (a math path that allocates its scores wanders more between runs than a
        fused kernel: over 20 identical quick pairs on a 2-core VM, a median of 4.9-5.1% against 3.4-3.5%)."""
        return max(self.spread or 0.0, spread_of(self._ratios_by_backend.get(backend, [])) or 0.0)

    @property
    def case_bar(self) -> float:
        """The spreads a measurement's ratio must depart from the pace by, among every matched ratio
        (change_rule.bar)."""
        return bar(sum(len(r) for r in self._ratios_by_backend.values()))

    @property
    def backend_bar(self) -> float:
        """The standard errors a backend's mean ratio must depart from the pace by (change_rule.bar)."""
        return bar(sum(1 for r in self._ratios_by_backend.values() if len(r) >= MIN_BACKEND_CASES))

    @cached_property
    def _ratios_by_backend(self) -> dict[str, list[float]]:
        """Each backend's matched ratios (the matches are fixed once compared)."""
        ratios: dict[str, list[float]] = {}
        for m in self.matches:
            if m.ratio is not None:
                ratios.setdefault(m.backend, []).append(m.ratio)
        return ratios

    @property
    def backend_shifts(self) -> list[BackendShift]:
        """Each backend's geomean over its matched cases, judged as one across-the-board change
        (change_rule.backend_shifts)."""
        return backend_shifts(self._ratios_by_backend, self.pace, self.judged_pace, self.spread, self.threshold)

    @property
    def backend_regressions(self) -> list[BackendShift]:
        """Backends slower across the board, beyond the threshold and the noise."""
        return [b for b in self.backend_shifts if b.changed and b.geomean > 1]

    @property
    def regressions(self) -> list[Match]:
        """NEW slower by more than the threshold, the two intervals apart; neither side's samples spread wide,
        neither side throttled."""
        return [m for m in self.matches if self._changed(m) and not m.noisy and not m.throttled
                and m.ratio > 1]  # type: ignore[operator]

    @property
    def improvements(self) -> list[Match]:
        """NEW faster by more than the threshold, the two intervals apart; neither side's samples spread wide,
        neither side throttled."""
        return [m for m in self.matches if self._changed(m) and not m.noisy and not m.throttled
                and m.ratio < 1]  # type: ignore[operator]

    @property
    def noisy(self) -> list[Match]:
        """Would be a regression or improvement, but BASE or NEW is noisy: listed, never judged."""
        return [m for m in self.matches if self._changed(m) and m.noisy]

    @property
    def throttled(self) -> list[Match]:
        """Would be a regression or improvement, but BASE or NEW was timed on a throttled or shared GPU (and
        neither is noisy, which lists it there): listed, never judged."""
        return [m for m in self.matches if self._changed(m) and m.throttled and not m.noisy]

    @property
    def throttled_anywhere(self) -> int:
        """How many matched measurements had a throttled or shared GPU on either side, changed or not."""
        return sum(1 for m in self.matches if m.throttled)

    @property
    def new_failures(self) -> list[Match]:
        """Ran ok in BASE; oom, error, mismatch or timeout in NEW."""
        return [m for m in self.matches if m.base_status == "ok" and m.new_status in BAD_STATUSES]

    @property
    def turned_unrepeatable(self) -> list[Match]:
        """Two calls agreed bit for bit in BASE and not in NEW."""
        return [m for m in self.matches if m.base_repeatable is True and m.new_repeatable is False]

    @property
    def determinism_broken(self) -> list[Match]:
        """Turned non-repeatable in a NEW run that asked for deterministic kernels: what the run was promised broke."""
        return [m for m in self.turned_unrepeatable if m.new_deterministic]

    @property
    def fixed(self) -> list[Match]:
        """Failed in BASE (oom, error, mismatch or timeout); ok in NEW."""
        return [m for m in self.matches if m.base_status in BAD_STATUSES and m.new_status == "ok"]

    @property
    def geomean_by_backend(self) -> dict[str, float]:
        """Geometric mean of NEW/BASE per backend, over the cases both runs measured ok."""
        return {b: math.exp(sum(map(math.log, r)) / len(r)) for b, r in sorted(self._ratios_by_backend.items())}

    @property
    def should_fail(self) -> bool:
        """True when the CLI should exit 1: any regression (of a measurement, or of a backend across the board), any new
        failure, or a measurement that turned non-repeatable in a run that asked for deterministic kernels."""
        return bool(self.regressions or self.backend_regressions or self.new_failures or self.determinism_broken)

    def to_markdown(self) -> str:
        """The comparison as Markdown, for a pull request."""
        lines = [f"## attnbench compare: {md_cell(self.new)} vs {md_cell(self.base)}", ""]
        if self.machine_warning:
            lines += [f"**{md_cell(self.machine_warning)}**", ""]
        if self.pace_note:
            lines += [md_cell(self.pace_note) + ".", ""]
        lines.append(f"{len(self.matches)} matched measurements ({self.only_in_base} only in base, "
                     f"{self.only_in_new} only in new); a change is beyond the threshold ({self.threshold:.0%}) with "
                     "intervals of the median that do not overlap.")
        lines.append("")
        verdict = "**FAIL**" if self.should_fail else "**pass**"
        lines.append(f"{verdict}: {len(self.regressions)} regression(s), "
                     + (f"{len(self.backend_regressions)} backend(s) slower across the board, "
                        if self.backend_regressions else "")
                     + f"{len(self.new_failures)} new failure(s), "
                     f"{len(self.improvements)} improvement(s), {len(self.fixed)} fixed"
                     + (f", {len(self.noisy)} change(s) not judged: noisy" if self.noisy else "")
                     + (f", {len(self.throttled)} change(s) not judged: throttled GPU" if self.throttled else "")
                     + (f", {len(self.turned_unrepeatable)} turned non-repeatable"
                        + (f" ({len(self.determinism_broken)} asked for deterministic kernels)"
                           if self.determinism_broken else "") if self.turned_unrepeatable else "")
                     + ".")
        if self.throttled_anywhere:
            lines += ["", f"{self.throttled_anywhere} matched measurement(s) were timed on a throttled or shared GPU "
                          "(heat or power slowed it, or another process was on it) in base or new: never judged a "
                          "regression or an improvement."]
        lines += ["", "| backend | geomean new/base | cases |", "|---|---|---|"]
        counts: dict[str, int] = {}
        for m in self.matches:
            if m.ratio is not None:
                counts[m.backend] = counts.get(m.backend, 0) + 1
        for backend, value in self.geomean_by_backend.items():
            lines.append(f"| {md_cell(backend)} | {value:.3f}× | {counts[backend]} |")
        sections = (("Regressions", self.regressions), ("Improvements", self.improvements),
                    ("Noisy (samples spread over 10% of the median: not judged)", self.noisy),
                    ("Throttled GPU (heat, power or another process: not judged)", self.throttled))
        for title, items in sections:
            wide = self.backend_regressions if title == "Regressions" else []
            if items or wide:
                lines += ["", f"### {title}", "", "| backend | case | base ms [interval] | new ms [interval] | new/base |",
                          "|---|---|---|---|---|"]
                lines += [f"| {md_cell(b.backend)} | all {b.cases} matched cases, across the board | | "
                          f"| {b.geomean:.3f}× (geomean{' over the pace' if self.judged_pace != 1.0 else ''}) |"
                          for b in wide]
                for m in items:
                    note = m.unjudged_note()
                    lines.append(f"| {md_cell(m.backend)} | {md_cell(m.case)} | {md_cell(m.side('base'))} "
                                 f"| {md_cell(m.side('new'))} | {md_cell(m.ratio_words(self.judged_pace))}{note} |")
        if self.turned_unrepeatable:
            lines += ["", "### Turned non-repeatable (two calls on the same inputs gave different bits)", "",
                      "| backend | case | new: difference between two calls | deterministic asked |", "|---|---|---|---|"]
            for m in self.turned_unrepeatable:
                lines.append(f"| {md_cell(m.backend)} | {md_cell(m.case)} | {md_cell(m.new_repeat)} "
                             f"| {'yes: fails' if m.new_deterministic else 'no'} |")
        changed = [f"- {md_cell(m.kernel_change)} ({md_cell(m.case)})" for m in self.matches if m.kernel_change]
        if changed:
            lines += ["", "### Kernel changed (a kernel ran in one run's profiled call and not in the other's)", "",
                      *changed]
        for title, items in (("New failures", self.new_failures), ("Fixed", self.fixed)):
            if items:
                lines += ["", f"### {title}", "", "| backend | case | base | new | reason |", "|---|---|---|---|---|"]
                for m in items:
                    lines.append(f"| {md_cell(m.backend)} | {md_cell(m.case)} | {m.base_status} | {m.new_status} "
                                 f"| {md_cell(m.new_reason or '')} |")
        return "\n".join(lines) + "\n"


def _schema(records: list[dict[str, Any]], path: Path) -> int:
    versions = sorted({int(r["schema_version"]) for r in records})
    if len(versions) != 1:
        raise ResultsError(f"{path}: records mix schema versions {versions}; compare runs written by one attnbench")
    return versions[0]


def _index(records: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    # A run that repeated a measurement: the last record of a key stands for it.
    return {key_of(r): r for r in records}


def _unsteady(record: dict[str, Any]) -> bool:
    """Not to be judged: a record without an interval whose samples spread wide. A record with an interval is judged
    by it, however wide: the interval is distribution-free, so a wide spread widens it and never fools it, and one
    wider than the precision asked still tells two medians apart when the intervals do not overlap."""
    return False if interval_of(record) is not None else is_noisy(record)


# The smallest change judged at all (asv's default factor): on a shared 2-core VM two identical back-to-back runs of
# suites/quick.yaml differed by 5-15% per case with within-run intervals of ±1-3%, and a 5% threshold called them
# regressions.
DEFAULT_THRESHOLD = 0.10
# What env.json says of the machine: two runs that differ here are not one machine's numbers.
MACHINE_KEYS = ("device", "device_name", "cpu", "cpu_count", "torch", "cuda", "driver")


def machine_differences(base_env: dict[str, Any], new_env: dict[str, Any]) -> list[str]:
    """'cpu: A vs B' for each machine fact (and each kernel library's version) that two runs' env.json disagree on;
    [] when either has no env.json."""
    if not base_env or not new_env:
        return []
    found = [f"{key}: {base_env.get(key)} vs {new_env.get(key)}" for key in MACHINE_KEYS
             if base_env.get(key) != new_env.get(key)]
    base_libs, new_libs = base_env.get("libraries") or {}, new_env.get("libraries") or {}
    found += [f"{name}: {base_libs.get(name)} vs {new_libs.get(name)}" for name in sorted(set(base_libs) | set(new_libs))
              if name not in MACHINE_KEYS and base_libs.get(name) != new_libs.get(name)]
    return found


def compare_runs(base: Path, new: Path, threshold: float = DEFAULT_THRESHOLD, relative: bool = True) -> Comparison:
    """Match BASE and NEW by measurement key and say what regressed, improved, broke and was fixed."""
    if not threshold >= 0:
        raise ResultsError(f"threshold must be 0 or more (a fraction, 0.05 = 5%), got {threshold}")
    base_records, new_records = load_records(Path(base)), load_records(Path(new))
    for path, records in ((base, base_records), (new, new_records)):
        if not records:
            raise ResultsError(f"{results_path(Path(path))}: holds no records to compare")
    comparison = compare_records(base_records, new_records, str(base), str(new), threshold)
    comparison.machine_notes = machine_differences(read_env(Path(base)), read_env(Path(new)))
    comparison.relative = relative
    return comparison


def compare_records(base_records: list[dict[str, Any]], new_records: list[dict[str, Any]], base: str, new: str,
                    threshold: float = DEFAULT_THRESHOLD) -> Comparison:
    """compare_runs on records already read (a history store's run, say); `base` and `new` name them."""
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
            key=key, backend=str(b["backend"]), case=case_words(b), base_status=str(b["status"]),
            new_status=str(n["status"]), base_ms=b.get("time_ms"), new_ms=n.get("time_ms"),
            base_iqr=float(b.get("time_ms_iqr") or 0.0), new_iqr=float(n.get("time_ms_iqr") or 0.0),
            new_reason=n.get("reason") if n["status"] != "ok" else b.get("reason"),
            base_noisy=_unsteady(b), new_noisy=_unsteady(n), base_throttled=is_throttled(b),
            new_throttled=is_throttled(n), base_ci=interval_of(b), new_ci=interval_of(n),
            base_repeatable=b.get("repeatable"), new_repeatable=n.get("repeatable"),
            new_deterministic="deterministic" in (n.get("extra") or {}), new_repeat=repeat_words(n),
            kernel_change=kernel_change(b, n),
        ))
    ratios = sorted(m.ratio for m in matches if m.ratio is not None)
    return Comparison(
        base=base, new=new, threshold=threshold, matches=matches,
        only_in_base=len(base_index) - len(shared), only_in_new=len(new_index) - len(shared), versions=versions,
        pace=statistics.median(ratios) if len(ratios) >= MIN_PACE else None, spread=spread_of(ratios),
    )


def repeat_words(record: dict[str, Any]) -> str:
    """A record's difference between its two calls: '<tensor> by up to <diff>', '' when they agreed."""
    if record.get("repeatable") is not False:
        return ""
    extra = record.get("extra") or {}
    diff = extra.get("repeat_max_diff")
    return f"{extra.get('repeat_tensor')} " + (f"by up to {diff:.3g}" if diff is not None else "by a NaN or Inf")
