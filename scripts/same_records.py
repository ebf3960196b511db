"""Run suites with two checkouts of attnbench and diff their records, timings and timestamps aside.

A refactoring must not change what a run records. This runs each suite once per checkout (same interpreter,
same compile cache), matches the records by case and backend, and prints every field that differs:

    python scripts/same_records.py OLD_CHECKOUT NEW_CHECKOUT [--suite quick --suite workloads] [--keep DIR]

Exit 0 when every record agrees on every compared field, 1 otherwise. Fields that are measurements of time
(and what is derived from them: rates, sampling decisions, noise flags) or of this process (memory peaks,
setup costs) are left out; everything else — status, reason, kernel, errors and bounds, FLOPs, bytes, the
case's fields, memory estimates, rows checked — must be identical.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's reader, whichever two are compared

from attnbench.records.results import stored_lines  # noqa: E402

# Measured times and what follows from them; identifiers of the run.
VOLATILE = {
    "run_id", "timestamp", "time_ms", "time_ms_iqr", "time_ms_min", "samples", "times_ms", "ci_low_ms",
    "ci_high_ms", "ci_level", "stop", "noisy", "tflops", "bandwidth_gbs", "percent_of_peak", "peak_memory_bytes",
    "throttled",
    # the profile's shares of the call and what it says of the rest
    "attention_share", "overhead",
}
# extra's measured entries (times of setup, warm-up, the checked call, compiles, the reference, each stage).
VOLATILE_EXTRA = {
    "setup_ms", "setup_parts", "warmup_ms", "warmup_calls", "warmup_steady", "check_ms", "check_sampled",
    "check_call_ms", "compile_s", "reference_s", "plan_ms", "mask_build_s", "kernels_compiled", "launch_cover_us",
    "cache_hits", "compile_cache", "phases_ms",
    # derived from the times: the share of the peak this run measured, whether the time beat it, and whether the
    # samples split in two
    "percent_of_measured_peak", "above_roof", "bimodal", "rounds",
    # the roof this run measured on the CPU (each run times its own), and the compile cache's work (a warm cache
    # builds nothing)
    "peak", "measured_peak", "peak_source", "cpp_builds", "cpp_build_s", "dynamo_s",
}


def run(checkout: Path, suite: str, out: Path, cache: Path) -> Path:
    """`attnbench run SUITE` with the package of `checkout` first on the path; the run's directory."""
    env = dict(os.environ, PYTHONPATH=str(checkout.resolve()))
    command = [sys.executable, "-m", "attnbench", "run", suite, "--out", str(out), "--cache-dir", str(cache)]
    done = subprocess.run(command, env=env, cwd=checkout, capture_output=True, text=True)
    if done.returncode not in (0, 1):  # 1: a mismatch, which is a record like any other
        sys.exit(f"{checkout}: {' '.join(command)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return out


def records(directory: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The run's records by (case_id, backend), volatile fields removed."""
    out = {}
    for record in stored_lines(directory):
        extra = {k: v for k, v in record.pop("extra", {}).items() if k not in VOLATILE_EXTRA}
        kept = {k: v for k, v in record.items() if k not in VOLATILE}
        kept["extra"] = extra
        if kept.get("kernels"):  # the profile's kernels: which ran and how often, not their times (nor their order)
            kept["kernels"] = sorted((k["name"], k.get("calls")) for k in kept["kernels"])
        out[(record["case_id"], record["backend"])] = kept
    return out


def differences(old: dict, new: dict) -> list[str]:
    """One line per (measurement, field) that differs, and per measurement only one side has."""
    lines = []
    for key in sorted(set(old) | set(new)):
        if key not in old or key not in new:
            lines.append(f"{key}: only in {'new' if key in new else 'old'}")
            continue
        a, b = old[key], new[key]
        for name in sorted(set(a) | set(b)):
            if name == "extra":
                for sub in sorted(set(a["extra"]) | set(b["extra"])):
                    if a["extra"].get(sub) != b["extra"].get(sub):
                        lines.append(f"{key} extra.{sub}: {a['extra'].get(sub)!r} -> {b['extra'].get(sub)!r}")
            elif a.get(name) != b.get(name):
                lines.append(f"{key} {name}: {a.get(name)!r} -> {b.get(name)!r}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--suite", action="append", help="packaged suite name (default: quick and workloads)")
    parser.add_argument("--keep", type=Path, help="write the runs here instead of a temporary directory")
    args = parser.parse_args()
    suites = args.suite or ["quick", "workloads"]
    base = args.keep or Path(tempfile.mkdtemp(prefix="attnbench-same-"))
    failed = False
    for suite in suites:
        old = records(run(args.old, suite, base / f"old-{suite}", base / "cache"))
        new = records(run(args.new, suite, base / f"new-{suite}", base / "cache"))
        lines = differences(old, new)
        print(f"{suite}: {len(old)} records before, {len(new)} after; {len(lines)} differences")
        for line in lines:
            print("  " + line)
        failed |= bool(lines)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
