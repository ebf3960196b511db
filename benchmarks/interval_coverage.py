"""Do a run's intervals hold the other runs' medians, and what does this machine's noise measure? Over repeated runs.

    python benchmarks/interval_coverage.py run DIR [--runs 6] [--suite quick] [--every S]  # N runs into DIR/run-<i>,
                                                                               # back to back or one each S seconds
    python benchmarks/interval_coverage.py calibrate DIR [DIR ...]             # the noise figures of core.policy
    python benchmarks/interval_coverage.py coverage DIR [DIR ...] [--pooled]   # leave-one-out coverage

`calibrate` measures, from the runs' records (each `ok` record's window medians in extra.rounds, and its median):

- window noise: the log standard deviation of one window's median around its run's, over every measurement with two
  windows or more (robustly: the median of each one's variance over the median share of its chi-square, so a few
  calls with two modes do not set every interval);
- run noise: what the run medians' log variance across runs holds beyond what their windows explain (as robustly);
- pace noise: the log standard deviation of the pace (the median NEW/BASE ratio) over every pair of runs;
- ratio noise: the root mean square, over the pairs, of the ratios' robust spread around their pace.

`coverage` counts, for each run and measurement, whether the median of the other runs' medians lies inside that run's
stated interval, and prints the share beside the stated level; with `--pooled`, of the interval the rule before windows
stated (the order statistics of every sample of the run pooled as if independent), from the same records' samples. Both print JSON; the rule is fixed before the batch that
judges it (docs/verdicts.md): calibrate on one batch, validate on a fresh one.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnbench.core.interval import median_interval  # noqa: E402
from attnbench.records.results import Record, load_records  # noqa: E402
from attnbench.core.policy import MIN_BACKEND_CASES  # noqa: E402
from attnbench.records.env import read_env  # noqa: E402
from attnbench.records.results import stored_results  # noqa: E402
from attnbench.stats.change_rule import machine_pace, observed_spread  # noqa: E402


def run_batch(out: Path, runs: int, suite: str, every_s: float = 0.0) -> None:
    """`runs` runs of `suite` into out/run-<i>, each by the CLI a user runs: back to back, or each starting
    `every_s` seconds after the one before started (idle between), so the batch spreads over (runs - 1) × every_s."""
    out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    for i in range(1, runs + 1):
        target = out / f"run-{i}"
        if stored_results(target) is not None:
            continue
        time.sleep(max(0.0, began + (i - 1) * every_s - time.monotonic()))
        subprocess.run([sys.executable, "-m", "attnbench", "run", suite, "--out", str(target), "--no-report"], check=True,
                       stdout=subprocess.DEVNULL)


def run_folders(folders: list[Path]) -> list[Path]:
    """The runs named: a folder holding a run (its results, plain or compressed, or run/'s) is one; any other, its
    run-<i> folders in order."""
    found: list[Path] = []
    for folder in folders:
        if stored_results(folder) is not None or stored_results(folder / "run") is not None:
            found.append(folder if stored_results(folder) is not None else folder / "run")
        else:
            found += sorted((p for p in folder.glob("run-*") if stored_results(p) is not None),
                            key=lambda p: int(p.name.split("-")[1]))
    return found


def runs_in(folders: list[Path]) -> list[dict[tuple, Record]]:
    """Each run's ok records by measurement key (run_folders)."""
    return [{r.key: r for r in load_records(p) if r.status == "ok" and r.time_ms} for p in run_folders(folders)]


def probes_in(folders: list[Path]) -> list[dict | None]:
    """Each run's machine pace probe (env.json `pace_probe`), None where it timed none."""
    return [read_env(p).pace_probe for p in run_folders(folders)]


def chi2_median_share(df: int) -> float:
    """The median of a chi-square variable over its degrees of freedom (Wilson-Hilferty): what a sample variance of
    df degrees of freedom reads at its median, as a share of the true variance."""
    return (1 - 2 / (9 * df)) ** 3


def robust_variance(items: list[tuple[float, int]]) -> float:
    """A variance from many small samples' (variance, degrees of freedom): the median of each over its median
    share, so a few measurements that jump between runs (a call with two modes) do not set every interval."""
    return statistics.median(v / chi2_median_share(df) for v, df in items) if items else 0.0


def calibrate(runs: list[dict[tuple, Record]],
              probes: list[dict | None] | None = None) -> dict[str, float | int | None]:
    """The noise figures of this batch (see the module's docstring)."""
    within, between, explained = [], [], []
    shared = set.intersection(*(set(r) for r in runs))
    for key in shared:
        medians = []
        for run in runs:
            record = run[key]
            windows = [w["median_ms"] for w in (record.extra or {}).get("rounds") or []]
            if len(windows) >= 2:
                within.append((statistics.variance(math.log(w) for w in windows), len(windows) - 1))
            explained.append(len(windows) or 1)
            medians.append(math.log(record.time_ms))
        between.append((statistics.variance(medians), len(runs) - 1))
    window_noise = math.sqrt(robust_variance(within))
    windows_explain = statistics.median(window_noise ** 2 / k for k in explained)
    run_noise = math.sqrt(max(0.0, robust_variance(between) - windows_explain))
    paces, spreads, over_machine, backends = [], [], [], []
    probes = probes or [None] * len(runs)
    for (a, probe_a), (b, probe_b) in itertools.combinations(zip(runs, probes), 2):
        ratios = {k: b[k].time_ms / a[k].time_ms for k in shared}
        pace = math.log(statistics.median(ratios.values()))
        paces.append(pace)
        spreads.append(observed_spread(list(ratios.values())))
        machine = machine_pace(probe_a, probe_b)
        if machine is not None:
            over_machine.append(pace - math.log(machine.value))
        backends += backend_departures(ratios, pace)
    rms = lambda values: round(math.sqrt(statistics.mean(v * v for v in values)), 4) if values else None  # noqa: E731
    return {"runs": len(runs), "measurements": len(shared), "window_noise": round(window_noise, 4),
            "run_noise": round(run_noise, 4), "pace_noise": rms(paces), "ratio_noise": rms(spreads),
            "probe_noise": rms(over_machine), "backend_noise": round(math.sqrt(robust_variance(backends)), 4)
            if backends else None, "pairs": len(paces), "pairs_with_probe": len(over_machine)}


def backend_departures(ratios: dict[tuple, float], pace: float) -> list[tuple[float, int]]:
    """Each backend's (variance, 1) of its mean log ratio around the pace, less what its cases' own spread explains
    (spread² / cases): one degree of freedom each, for robust_variance."""
    by_backend: dict[str, list[float]] = {}
    for key, ratio in ratios.items():
        by_backend.setdefault(str(key[0]), []).append(ratio)
    out = []
    for values in by_backend.values():
        if len(values) >= MIN_BACKEND_CASES:
            departure = sum(math.log(r) for r in values) / len(values) - pace
            out.append((max(0.0, departure ** 2 - observed_spread(values) ** 2 / len(values)), 1))
    return out


def stated(record: Record, pooled: bool) -> tuple[float, float, float]:
    """(low, high, level) of a record's interval: as written, or the pooled samples' order-statistic interval."""
    if not pooled:
        return record.ci_low_ms, record.ci_high_ms, record.ci_level
    made = median_interval(record.times_ms)
    return made.low, made.high, made.level


def coverage(runs: list[dict[tuple, Record]], pooled: bool = False) -> dict[str, float | int]:
    """Leave-one-out: each run's interval against the median of the other runs' medians."""
    shared = set.intersection(*(set(r) for r in runs))
    held = total = 0
    levels, widths = [], []
    for i, run in enumerate(runs):
        for key in shared:
            record = run[key]
            others = statistics.median(r[key].time_ms for j, r in enumerate(runs) if j != i)
            low, high, level = stated(record, pooled)
            total += 1
            held += low <= others <= high
            levels.append(level)
            widths.append((high - low) / 2 / record.time_ms)
    return {"runs": len(runs), "measurements": len(shared), "held": held, "total": total,
            "coverage": round(held / total, 4), "stated_level": round(statistics.median(levels), 4),
            "median_half_width": round(statistics.median(widths), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=("run", "calibrate", "coverage"))
    parser.add_argument("folders", type=Path, nargs="+", help="a batch's folder, or the runs themselves")
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--suite", default="quick")
    parser.add_argument("--every", type=float, default=0.0, help="seconds from one run's start to the next's")
    parser.add_argument("--pooled", action="store_true", help="coverage of the pooled samples' interval instead")
    args = parser.parse_args()
    if args.action == "run":
        run_batch(args.folders[0], args.runs, args.suite, args.every)
        return
    runs = runs_in(args.folders)
    result = calibrate(runs, probes_in(args.folders)) if args.action == "calibrate" else coverage(runs, args.pooled)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
