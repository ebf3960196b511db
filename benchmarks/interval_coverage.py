"""Do a run's intervals hold the other runs' medians, and what does this machine's noise measure? Over repeated runs.

    python benchmarks/interval_coverage.py run DIR [--runs 6] [--suite quick]   # N back-to-back runs into DIR/run-<i>
    python benchmarks/interval_coverage.py calibrate DIR                       # the noise figures of core.policy
    python benchmarks/interval_coverage.py coverage DIR                        # leave-one-out coverage

`calibrate` measures, from the runs' records (each `ok` record's window medians in extra.rounds, and its median):

- window noise: the log standard deviation of one window's median around its run's, pooled over every measurement
  with two windows or more;
- run noise: what the run medians' log variance across runs holds beyond what their windows explain;
- pace noise: the log standard deviation of the pace (the median NEW/BASE ratio) over every pair of runs;
- ratio noise: the root mean square, over the pairs, of the ratios' robust spread around their pace.

`coverage` counts, for each run and measurement, whether the median of the other runs' medians lies inside that run's
stated interval, and prints the share beside the stated level. Both print JSON; the rule is fixed before the batch that
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnbench.records.results import key_of, load_records  # noqa: E402
from attnbench.report.change_rule import observed_spread  # noqa: E402


def run_batch(out: Path, runs: int, suite: str) -> None:
    """`runs` back-to-back runs of `suite` into out/run-<i>, each by the CLI a user runs."""
    out.mkdir(parents=True, exist_ok=True)
    for i in range(1, runs + 1):
        target = out / f"run-{i}"
        if (target / "results.jsonl").exists():
            continue
        subprocess.run([sys.executable, "-m", "attnbench", "run", suite, "--out", str(target)], check=True,
                       stdout=subprocess.DEVNULL)


def runs_in(folder: Path) -> list[dict[tuple, dict]]:
    """Each run's ok records by measurement key, in the order of the folders' names."""
    found = sorted((p.parent for p in folder.glob("run-*/results.jsonl")), key=lambda p: int(p.name.split("-")[1]))
    return [{key_of(r): r for r in load_records(p) if r["status"] == "ok" and r.get("time_ms")} for p in found]


def calibrate(runs: list[dict[tuple, dict]]) -> dict[str, float | int]:
    """The noise figures of this batch (see the module's docstring)."""
    within, explained, between = [], [], []
    shared = set.intersection(*(set(r) for r in runs))
    for key in shared:
        medians = []
        for run in runs:
            record = run[key]
            windows = [w["median_ms"] for w in (record.get("extra") or {}).get("rounds") or []]
            if len(windows) >= 2:
                within.append(statistics.variance(math.log(w) for w in windows))
            explained.append(len(windows) or 1)
            medians.append(math.log(record["time_ms"]))
        between.append(statistics.variance(medians))
    window_noise = math.sqrt(statistics.mean(within))
    windows_explain = statistics.mean(window_noise ** 2 / k for k in explained)
    run_noise = math.sqrt(max(0.0, statistics.mean(between) - windows_explain))
    paces, spreads = [], []
    for a, b in itertools.combinations(runs, 2):
        ratios = [b[k]["time_ms"] / a[k]["time_ms"] for k in shared]
        paces.append(math.log(statistics.median(ratios)))
        spreads.append(observed_spread(ratios))
    return {"runs": len(runs), "measurements": len(shared), "window_noise": round(window_noise, 4),
            "run_noise": round(run_noise, 4), "pace_noise": round(math.sqrt(statistics.mean(p * p for p in paces)), 4),
            "ratio_noise": round(math.sqrt(statistics.mean(s * s for s in spreads)), 4), "pairs": len(paces)}


def coverage(runs: list[dict[tuple, dict]]) -> dict[str, float | int]:
    """Leave-one-out: each run's interval against the median of the other runs' medians."""
    shared = set.intersection(*(set(r) for r in runs))
    held = total = 0
    levels, widths = [], []
    for i, run in enumerate(runs):
        for key in shared:
            record = run[key]
            others = statistics.median(r[key]["time_ms"] for j, r in enumerate(runs) if j != i)
            total += 1
            held += record["ci_low_ms"] <= others <= record["ci_high_ms"]
            levels.append(record["ci_level"])
            widths.append((record["ci_high_ms"] - record["ci_low_ms"]) / 2 / record["time_ms"])
    return {"runs": len(runs), "measurements": len(shared), "held": held, "total": total,
            "coverage": round(held / total, 4), "stated_level": round(statistics.median(levels), 4),
            "median_half_width": round(statistics.median(widths), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=("run", "calibrate", "coverage"))
    parser.add_argument("folder", type=Path)
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--suite", default="quick")
    args = parser.parse_args()
    if args.action == "run":
        run_batch(args.folder, args.runs, args.suite)
        return
    runs = runs_in(args.folder)
    result = calibrate(runs) if args.action == "calibrate" else coverage(runs)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
