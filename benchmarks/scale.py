"""How attnbench's readers scale with a run's size: a recorded run (tests/data/cpu-run) multiplied over cases into
synthetic results of N records, then `report`, `recommend`, `history add` and `compare` (the run against a copy of
itself) each timed in a fresh process, with that process's peak resident memory (the interpreter and its imports
included). Each copy of a record gets its own sequence length, so every record is a distinct measurement.

    python benchmarks/scale.py [--records 10000 100000] [--steps report recommend history-add compare]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "tests" / "data" / "cpu-run"


def synthetic(out: Path, n: int) -> Path:
    """A run directory of `n` records: the recorded run's records repeated, each copy at a new sequence length."""
    base = [json.loads(line) for line in (RUN / "results.jsonl").read_text().splitlines() if line.strip()]
    out.mkdir(parents=True)
    shutil.copy(RUN / "env.json", out / "env.json")
    with open(out / "results.jsonl", "w", encoding="utf-8") as file:
        for i in range(n):
            record = dict(base[i % len(base)])
            copy = i // len(base)
            record["seq_len"] = int(record["seq_len"]) + 8 * copy
            record["case_id"] = f"{record['case_id']}-x{copy}"
            file.write(json.dumps(record) + "\n")
    return out


STEPS = {
    "report": lambda run, tmp: ["report", run, "--out", tmp / "report"],
    "recommend": lambda run, tmp: ["recommend", run],
    "history-add": lambda run, tmp: ["history", "add", run, "--db", tmp / "h.sqlite"],
    "compare": lambda run, tmp: ["compare", run, run.with_name(run.name + "-again")],
}


# The command in a process of its own that, as it exits, prints its peak resident memory (KiB) as stderr's last line.
CHILD = """
import atexit, resource, sys
atexit.register(lambda: print("peak_kib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr))
sys.argv[0] = "attnbench"
from attnbench.cli.main import main
main()
"""


def measured(args: list[object]) -> tuple[float, float]:
    """(seconds, peak resident MiB) of one attnbench command in a process of its own."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, *map(str, args)], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    last = proc.stderr.strip().splitlines()[-1]
    if proc.returncode not in (0, 1) or not last.startswith("peak_kib "):
        raise SystemExit(f"attnbench {' '.join(map(str, args))} failed ({proc.returncode}): {proc.stderr[-400:]}")
    return seconds, int(last.split()[1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--steps", nargs="+", choices=list(STEPS), default=list(STEPS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.records:
            work = Path(tmp) / f"n{n}"
            run = synthetic(work / "run", n)
            shutil.copytree(run, work / "run-again")
            for name in args.steps:
                seconds, peak = measured(STEPS[name](run, work))
                size = f"  report.html {(work / 'report' / 'report.html').stat().st_size / 1e6:.1f} MB" \
                    if name == "report" else ""
                print(f"{n:>7} records  {name:<12} {seconds:8.2f} s  peak RSS {peak:8.1f} MiB{size}", flush=True)


if __name__ == "__main__":
    main()
