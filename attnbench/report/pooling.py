"""Runs of one device pooled into one entry per (case, backend): what `recommend` decides from (the rules:
docs/recommend.md, "Several runs"). The latest record decides whether a backend is in, its latest untroubled `ok`
record gives its number; samples are never pooled across runs, and runs of different software are refused."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnbench.core.errors import ResultsError
from attnbench.core.interval import CONFIDENCE, RUN_TO_RUN_NOISE, median_interval
from attnbench.records.record import Record, Status
from attnbench.records.results import load_records, read_env

# Energy per call has no interval: it is taken as known to the counter's resolution (attnbench.timing.energy).
ENERGY_RESOLUTION = 0.10
BACKWARD = ("bwd", "fwd_bwd")  # modes whose profiled call also zeroes and accumulates gradients
# env.json's top-level versions; the other libraries come from its `libraries`.
VERSION_KEYS = ("torch", "cuda", "cudnn", "driver")


@dataclass(frozen=True)
class Metric:
    """What backends are ranked by: the median time per call (ms), or the energy per call (mJ)."""

    name: str
    unit: str

    def value(self, record: Record) -> float | None:
        """The record's figure, or None when it has none."""
        if self.name == "time":
            value = record.time_ms
            return float(value) if value is not None and value > 0 else None
        extra = record.extra or {}
        if extra.get("energy_mj") is not None:
            return float(extra["energy_mj"])
        if extra.get("joules_per_token") is not None:  # tokens per call: batch × query length
            return float(extra["joules_per_token"]) * 1e3 * int(record.batch) * int(record.seq_len)
        return None

    def interval(self, record: Record) -> tuple[float, float] | None:
        """The record's median interval (from its samples when none was stored), or the energy resolution's."""
        if self.name == "energy":
            value = self.value(record)
            return None if value is None else (value * (1 - ENERGY_RESOLUTION), value * (1 + ENERGY_RESOLUTION))
        stored = record.interval
        level = record.ci_level
        if stored is not None and level is not None and level < CONFIDENCE and record.ci_source is None:
            # written before ci_source: the span of under 6 samples is no interval
            noise = RUN_TO_RUN_NOISE.get(str(record.device), RUN_TO_RUN_NOISE["cpu"])
            median = float(record.time_ms)
            return median * (1 - noise), median * (1 + noise)
        if stored is not None:
            return stored
        samples = [float(s) for s in record.times_ms or []]
        if not samples:
            return None
        interval = median_interval(samples)
        return interval.low, interval.high


TIME = Metric("time", "ms")
ENERGY = Metric("energy", "mJ")
METRICS = {"time": TIME, "energy": ENERGY}


def software_of(env: dict[str, Any]) -> dict[str, Any]:
    """What a run's timings depend on besides the machine."""
    return {"attnbench": env.get("attnbench"), **versions_of(env)} if env.get("attnbench") else versions_of(env)


def same_software(runs: list[Run], what: str = "recommend") -> None:
    """Refuse runs whose software differs in a version both name: the run-to-run noise bounds nothing across one."""
    first = runs[0]
    mine = software_of(first.env)
    for run in runs[1:]:
        theirs = software_of(run.env)
        differ = [f"{name} {mine[name]} ({first.run_id}) vs {theirs[name]} ({run.run_id})"
                  for name in mine if name in theirs and str(mine[name]) != str(theirs[name])]
        if differ:
            raise ResultsError(f"{what}: runs with different software: {'; '.join(differ)}; one table pools one "
                               "software's runs (recommend each version's runs apart; `attnbench compare` judges the "
                               "change)")


def versions_of(env: dict[str, Any]) -> dict[str, Any]:
    """torch (its full build name), CUDA, cuDNN, the driver, then every library installed, from env.json."""
    versions = {key: env.get(key) for key in VERSION_KEYS if env.get(key) is not None}
    for name, version in sorted((env.get("libraries") or {}).items()):
        if version is not None and name not in versions:
            versions[name] = version
    return versions


@dataclass(frozen=True)
class Run:
    """One run directory's records and environment."""

    path: Path
    run_id: str
    timestamp: str
    device: str
    device_name: str | None
    env: dict[str, Any]
    records: list[Record]


def load_run(path: Path) -> Run:
    """A run directory (or results file) with its env.json; refused when it holds no records."""
    records = load_records(Path(path))
    if not records:
        raise ResultsError(f"{path}: holds no records")
    return run_of(Path(path), records, read_env(Path(path)))


def run_of(path: Path, records: list[Record], env: dict[str, Any]) -> Run:
    """A Run from records already read (and their env.json, or {})."""
    stamps = sorted(str(r.timestamp or "") for r in records)
    return Run(Path(path), str(env.get("run_id") or records[0].run_id or Path(path).name),
               str(env.get("timestamp") or stamps[0]), str(env.get("device") or records[0].device),
               env.get("device_name") or records[0].device_name, env, records)


def load_runs(paths: list[Path], what: str = "recommend") -> list[Run]:
    """The runs at `paths`, oldest first; refused (one line) when they mix devices or GPUs, or repeat a run."""
    if not paths:
        raise ResultsError(f"{what}: name at least one run directory")
    runs = [load_run(Path(p)) for p in paths]
    seen: dict[str, Run] = {}
    for run in runs:
        if run.run_id in seen:
            raise ResultsError(f"{what}: {seen[run.run_id].path} and {run.path} are the same run ({run.run_id}); "
                               "name each run once")
        seen[run.run_id] = run
    devices = {(run.device, run.device_name) for run in runs}
    if len(devices) > 1:
        listed = ", ".join(f"{run.device} {run.device_name!r} ({run.path})" for run in runs)
        raise ResultsError(f"{what}: runs on different devices: {listed}; one table holds one device's "
                           "measurements (run it once per GPU)")
    return sorted(runs, key=lambda run: (run.timestamp, str(run.path)))


@dataclass
class Entry:
    """One backend on one case, over the pooled runs."""

    backend: str
    latest: Record  # its latest record: decides whether the backend is in
    clean: Record | None = None  # the latest ok record measured untroubled: its number counts
    troubled: Record | None = None  # with no clean one: the latest ok record, which cannot win
    why: str | None = None  # why no number of this pair counts (None when `clean` is set)

    @property
    def case_id(self) -> str:
        return case_name(self.latest)


def trouble(record: Record, metric: Metric) -> str | None:
    """Why an ok record's figure cannot decide anything, or None. A noisy record is not troubled (its interval is
    wider); an unrepeatable one is."""
    if record.kernel_trouble == "wrong kernel" or (record.kernel_trouble and record.mode not in BACKWARD):
        # its time is not (only) its kernel's; a backward's overhead (gradients) is its user's too: shown, not a gate
        return record.kernel_trouble
    if record.mode in BACKWARD and record.grad_checked is False:
        # its time may be that of wrong gradients
        return "gradients unchecked"
    if record.throttled:
        return "throttled"
    if record.unrepeatable:
        return "not repeatable"
    if metric.value(record) is None:
        return "no energy figure" if metric.name == "energy" else "no time"
    if metric.interval(record) is None:
        return "no interval"
    return None


def status_words(record: Record) -> str:
    """'mismatch: <reason>' for a record that did not run ok."""
    reason = " ".join(str(record.reason or "").split())
    return f"{record.status}: {reason}" if reason else str(record.status)


def case_key(record: Record) -> tuple:
    """A measurement's identity without its backend: the records of one case across backends and runs."""
    return record.case_key


def case_name(record: Record) -> str:
    """A record's case as a name: its case_id, else its key's fields joined."""
    return str(record.case_id or "-".join(str(v) for v in record.case_key))


def pool(runs: list[Run], metric: Metric = TIME) -> dict[tuple, dict[str, Entry]]:
    """Each case's entries by backend, following the pooling rule (`runs` oldest first)."""
    history: dict[tuple, dict[str, list[Record]]] = {}
    for run in runs:
        for record in run.records:
            history.setdefault(record.case_key, {}).setdefault(record.backend, []).append(record)
    pooled: dict[tuple, dict[str, Entry]] = {}
    for case, backends in history.items():
        for backend, records in backends.items():
            entry = Entry(backend, records[-1])
            if entry.latest.status != Status.OK:
                entry.why = status_words(entry.latest)
            else:
                oks = [r for r in records if r.status == Status.OK]
                clean = [r for r in oks if trouble(r, metric) is None]
                if clean:
                    entry.clean = clean[-1]
                else:
                    entry.why = trouble(oks[-1], metric)
                    if entry.why != "not repeatable":  # may be faster, timed badly; a flaky kernel is simply out
                        entry.troubled = oks[-1]
            pooled.setdefault(case, {})[backend] = entry
    return pooled
