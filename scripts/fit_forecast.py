"""Where a committed GPU run's wall went, the forecast's GPU overheads fitted to one run's records, and the forecast
checked against the runs it was not fitted on (docs/run-time.md "Where the time goes").

The rule, declared before any validation run was forecast: the overheads are fitted on FIT_RUN alone (every record
and its env.json); the fitted forecast of FIT_RUN's 4K measurements must be within BAR["fit"] of their measured wall,
and the forecast of each VALIDATION run (its 4K measurements where it has longer ones that errored, else all of it)
within BAR["validation"]; both are printed whatever they come to, and a refit after seeing them needs a new run
to validate on.

A run's measured wall is env.json's `actual.wall_s`; a part of it (the 4K measurements) is that wall less the span
of the records after the part's last one. Where env.json has `actual.phases_s` the run timed its phases itself;
before that, what the records hold is taken from them and the rest estimated from their timestamps (whole
seconds): a worker's start is the gap before the record after one that ended its worker, less that record's
phases; the harness's own time per measurement is what the gaps hold beyond the records' phases.

    python scripts/fit_forecast.py            # the attribution, the fit and the checks
    python scripts/fit_forecast.py --write    # the fit written into attnbench/run/forecast.py
"""

from __future__ import annotations

import dataclasses
import json
import re
import statistics
import sys
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from attnbench.backends.registry import default_registry  # noqa: E402
from attnbench.core.case import group_of  # noqa: E402
from attnbench.records.record import case_of  # noqa: E402
from attnbench.records.results import Record, load_records  # noqa: E402
from attnbench.run import calibration, forecast  # noqa: E402
from attnbench.run.tally import record_phases  # noqa: E402

REPORTS = ROOT / "reports"
FIT_RUN = "NVIDIA-H200-20261204-c671d98/check"
VALIDATION = ("NVIDIA-H200-20261204-c671d98/fa4", "NVIDIA-H200-20261130-012030/run",
              "NVIDIA-H200-20261130-012712/run")
BAR = {"fit": 1.25, "validation": 1.5}  # measured / forecast, either way
GPU = "H200"  # the datasheet row the forecast is made for (--estimate-gpu)
PART_SEQ = 4096  # the part of a run whose longer cases errored
# Not in the records (a compile in a measurement: the compile phase made them all): kept from the 2026-11-30 fit.
KEPT = ("report_s", "per_chart_s", "per_round_s", "compile_s", "backward_compile")
FORECAST = ROOT / "attnbench" / "run" / "forecast.py"


@dataclass(frozen=True)
class Run:
    name: str
    env: dict[str, Any]
    records: list[Record]
    times: list[float]  # each record's timestamp

    @property
    def written(self) -> float:
        return stamp(self.env["timestamp"])

    @property
    def wall_s(self) -> float:
        return float(self.env["actual"]["wall_s"])


def stamp(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def load(name: str) -> Run:
    folder = REPORTS / name
    records = load_records(folder)
    return Run(name, json.loads((folder / "env.json").read_text()), records, [stamp(r.timestamp) for r in records])


def ends_worker(record: Record) -> bool:
    """The record's worker was replaced after it: a sticky CUDA error, a crash or a timeout."""
    reason = record.reason or ""
    return record.status == "timeout" or (record.status == "error" and (
        "while releasing memory" in reason or reason.startswith("worker process")))


def measured(record: Record) -> bool:
    """It was timed (its samples exist): the forecast's measurement that runs."""
    return bool(record.times_ms)


# A measurement's phases the forecast prices by their own terms; the rest (the timer's flushes, the repeatability
# check, the guards, the release, the inputs) is the harness's, fitted per measurement and per case.
PRICED = ("samples", "warmup", "sustain", "reference", "compile", "prepare", "check", "profile", "trace")


def spent(record: Record, only: tuple[str, ...] | None = None) -> float:
    return sum(s for name, s in record_phases(record).items() if only is None or name in only)


@dataclass(frozen=True)
class Attribution:
    """Seconds of a run's wall by where they went; `estimated` names those taken from timestamps."""

    phases: dict[str, float]
    estimated: tuple[str, ...]
    starts: list[float]  # each worker (re)start after the first

    def rest(self, wall_s: float) -> float:
        return wall_s - sum(self.phases.values())


def attribute(run: Run) -> Attribution:
    """From env.json's phases where the run timed them, else from its records and their timestamps."""
    timed = run.env["actual"].get("phases_s")
    if timed:
        return Attribution(dict(timed), (), [])
    phases: dict[str, float] = {}
    for record in run.records:
        for name, seconds in record_phases(record).items():
            phases[name] = phases.get(name, 0.0) + seconds
    ahead = float((run.env.get("precompile") or {}).get("wall_s") or 0.0)
    span = run.times[-1] - run.written
    restarts = restart_costs(run)
    first = run.times[0] - run.written - ahead - spent(run.records[0])
    recorded = sum(phases.values())
    phases.update(compile_ahead=ahead, startup_and_report=run.wall_s - span, worker_start=first + sum(restarts))
    phases["harness"] = span - ahead - phases["worker_start"] - recorded
    return Attribution(phases, ("startup_and_report", "worker_start", "harness"), restarts)


def restart_costs(run: Run) -> list[float]:
    """Each replaced worker's start: the gap before the next record, less that record's phases."""
    return [run.times[i + 1] - run.times[i] - spent(run.records[i + 1])
            for i in range(len(run.records) - 1) if ends_worker(run.records[i])]


def harness_fit(run: Run) -> tuple[float, float, float]:
    """(per measured record, per other record, per new case): least squares of each gap beyond its record's PRICED
    phases, over the gaps that hold no worker start."""
    rows, gaps = [], []
    for i in range(1, len(run.records)):
        record, before = run.records[i], run.records[i - 1]
        if ends_worker(before):
            continue
        rows.append([measured(record), not measured(record), record.case_id != before.case_id])
        gaps.append(run.times[i] - run.times[i - 1] - spent(record, PRICED))
    coef = np.linalg.lstsq(np.array(rows, dtype=float), np.array(gaps), rcond=None)[0]
    return tuple(max(0.0, float(c)) for c in coef)  # type: ignore[return-value]


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def setup_by_kind(run: Run) -> dict[str, float]:
    """A measured record's prepare and first calls beside compiles and loads (a library's own compile counts):
    the mean per kind."""
    registry = default_registry()
    by_kind: dict[str, list[float]] = {kind: [] for kind in forecast.KINDS}
    for record in filter(measured, run.records):
        kind = forecast.kind_of(registry.get(record.backend))
        phases = record_phases(record)
        own = phases.get("compile", 0.0) if kind != "compiled" else 0.0
        by_kind[kind].append(phases.get("prepare", 0.0) + phases.get("check", 0.0) + own)
    return {kind: round(mean(values), 3) for kind, values in by_kind.items() if values}


def compiles(run: Run) -> dict[str, float]:
    """A forward's compile in the compile phase (the records' `precompile_s`), a load in a measurement, and each
    with a backward against a forward."""
    registry = default_registry()
    ahead: dict[bool, list[float]] = {False: [], True: []}
    loads: dict[bool, list[float]] = {False: [], True: []}
    for record in run.records:
        if record.extra.get("precompile_s") is not None:
            ahead[record.mode != "fwd"].append(float(record.extra["precompile_s"]))
        if measured(record) and registry.get(record.backend).cost.compiles:
            loads[record.mode != "fwd"].append(record_phases(record).get("compile", 0.0))
    cold, load = statistics.median(ahead[False]), mean(loads[False])
    return {"pool_compile_s": round(cold, 2), "pool_backward": round(statistics.median(ahead[True]) / cold, 2),
            "compile_cached_s": round(load, 3), "backward_load": round(mean(loads[True]) / load, 2)}


def reference_scale(run: Run, machine: calibration.Machine) -> float:
    """The recorded references against the model's (forecast.reference_s), before the first worker was replaced
    (a new worker makes its case's reference again) and but the first (made in a CUDA context just begun)."""
    first_end = next((i for i, r in enumerate(run.records) if ends_worker(r)), len(run.records))
    made = [i for i, r in enumerate(run.records[:first_end + 1]) if i and r.extra.get("reference_s")]
    recorded = sum(float(run.records[i].extra["reference_s"]) for i in made)
    model = sum(forecast.reference_s(case_of(run.records[i]), machine)
                for i in {run.records[i].case_id: i for i in made}.values())
    return round(recorded / model, 2)


def starts(run: Run) -> tuple[float, float]:
    """(startup, a worker's start): as the run timed them where it did, else from its timestamps (startup: the
    wall less the records' span and the forecast's report; a start: the restarts' median)."""
    timed, counts = run.env["actual"].get("phases_s") or {}, run.env["actual"].get("phase_counts") or {}
    if counts.get("worker_start"):
        return (sum(timed.get(name, 0.0) for name in ("startup", "calibration", "env")),
                timed["worker_start"] / counts["worker_start"])
    kept = forecast.GPU_OVERHEADS
    report = kept.report_s + kept.per_chart_s * len({group_of(case_of(r)) for r in run.records})
    return run.wall_s - (run.times[-1] - run.written) - report, statistics.median(restart_costs(run))


def fit(run: Run) -> forecast.Overheads:
    """GPU_OVERHEADS from one run's records (those in KEPT aside)."""
    machine = calibration.datasheet(GPU)
    kept = forecast.GPU_OVERHEADS
    per_measurement, per_skip, per_case = harness_fit(run)
    startup, worker_start = starts(run)
    measured_count = sum(map(measured, run.records))
    phases = [record_phases(r) for r in run.records if measured(r)]
    return forecast.Overheads(
        startup_s=round(startup, 2), per_measurement_s=round(per_measurement, 3),
        per_skip_s=round(per_skip, 3), per_case_s=round(per_case, 3),
        worker_start_s=round(worker_start, 2), profiler_s=0.0, **compiles(run),
        **{name: getattr(kept, name) for name in KEPT},
        profile_s=round(sum(p.get("profile", 0.0) for p in phases) / measured_count, 3),
        trace_s=round(sum(p.get("trace", 0.0) for p in phases) / measured_count, 3),
        setup_s=setup_by_kind(run), reference_scale=reference_scale(run, machine),
        basis=f"fitted by scripts/fit_forecast.py on reports/{run.name}")


def part(run: Run) -> Run:
    """The run's 4K measurements where longer ones errored, else all of it; its wall less what came after."""
    longer_failed = any(r.seq_len > PART_SEQ and r.status == "error" for r in run.records)
    if not longer_failed:
        return run
    last = max(i for i, r in enumerate(run.records) if r.seq_len <= PART_SEQ)
    env = {**run.env, "actual": {**run.env["actual"], "wall_s": run.wall_s - (run.times[-1] - run.times[last])}}
    return Run(f"{run.name} ({PART_SEQ // 1024}K part)", env, run.records[:last + 1], run.times[:last + 1])


def absent(run: Run) -> dict[str, str]:
    """Backends every record of which was skipped for one reason: not on that machine (or never asked there)."""
    reasons: dict[str, set[str | None]] = {}
    for record in run.records:
        reasons.setdefault(record.backend, set()).add(record.reason if record.status == "skipped" else None)
    return {name: next(iter(why)) for name, why in reasons.items() if len(why) == 1 and None not in why}  # type: ignore


def forecast_of(run: Run, overheads: forecast.Overheads | None = None) -> forecast.Forecast:
    """The forecast of the run's measurements on the datasheet GPU, as `--dry-run --estimate-gpu` makes it, with the
    run's timing, isolation, compile workers and --trace, and its absent backends skipped."""
    from attnbench.run.session import settings_of
    from attnbench.sweep.suite import load_suite

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "suite.yaml"
        path.write_text(run.env["suite_text"])
        suite = load_suite(path)
    registry = default_registry()
    tasks = [(case_of(r), registry.get(r.backend)) for r in run.records]
    workers = int((run.env.get("precompile") or {}).get("workers") or 0)
    settings = settings_of(suite, "cuda")
    if not any("sustain" in r.extra for r in run.records):  # made before the sustained-state loop
        settings = dataclasses.replace(settings, energy_ms=0.0)
    return forecast.forecast(tasks, settings, calibration.datasheet(GPU),
                             isolate=bool(run.env.get("isolated")), compile_workers=workers,
                             trace=any(r.trace for r in run.records), absent=absent(run), overheads=overheads)


def check(run: Run, overheads: forecast.Overheads | None = None) -> tuple[float, float]:
    """(forecast, measured) seconds."""
    return forecast_of(run, overheads).total_s, run.wall_s


def items(overheads: forecast.Overheads) -> list[str]:
    """`name=value` with the code's double quotes."""
    return [f"{f.name}={json.dumps(getattr(overheads, f.name))}" for f in dataclasses.fields(overheads)]


def literal(overheads: forecast.Overheads) -> str:
    return f"GPU_OVERHEADS = Overheads({', '.join(items(overheads))})"


def write(overheads: forecast.Overheads) -> None:
    lines = items(overheads)
    body, line = [], "GPU_OVERHEADS = Overheads("
    for item in lines:
        if len(line) + len(item) + 2 > 118:
            body.append(line.rstrip())
            line = " " * len("GPU_OVERHEADS = Overheads(")
        line += item + ", "
    body.append(line.rstrip(", ") + ")")
    text = FORECAST.read_text()
    block = "# fitted: begin\n" + "\n".join(body) + "\n# fitted: end"
    FORECAST.write_text(re.sub(r"# fitted: begin\n.*?# fitted: end", lambda _: block, text, flags=re.S))


def main() -> None:
    fitted = load(FIT_RUN)
    where = attribute(fitted)
    print(f"{fitted.name}: {fitted.wall_s:.1f} s wall, {len(fitted.records)} records")
    for name, seconds in sorted(where.phases.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<20} {seconds:7.2f} s{'  (estimated from timestamps)' if name in where.estimated else ''}")
    print(f"  {len(where.starts)} worker restarts: {', '.join(f'{s:.1f}' for s in where.starts)} s")
    overheads = fit(fitted)
    print(literal(overheads))
    for name, bar in [(FIT_RUN, BAR["fit"]), *((v, BAR["validation"]) for v in VALIDATION)]:
        whole = load(name)
        for run in {r.name: r for r in (part(whole), whole)}.values():
            predicted, wall = check(run, overheads)
            ratio = wall / predicted
            verdict = "within" if 1 / bar <= ratio <= bar else "OUTSIDE"
            print(f"{run.name}: forecast {predicted:.1f} s, measured {wall:.1f} s, measured/forecast {ratio:.2f} "
                  f"({verdict} {bar}x; {len(run.records)} measurements)")
    if "--write" in sys.argv:
        write(overheads)
        print(f"written into {FORECAST.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
