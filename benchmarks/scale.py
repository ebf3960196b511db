"""How attnbench's readers scale with a run's size: a recorded run (tests/data/cpu-run) multiplied over cases into
synthetic results of N records, then `report`, `recommend`, `history add` and `compare` (the run against a copy of
itself) each timed in a fresh process, with that process's peak resident memory (the interpreter and its imports
included). Each copy of a record gets its own sequence length, so every record is a distinct measurement.

    python benchmarks/scale.py [--records 10000 100000] [--steps report recommend history-add compare]

Measured 2026-12-02 on the 2-core development machine, shared with other jobs (load around 10, so wall time is
well above CPU time; CPU seconds are the process's and its chart workers'). Every step grows linearly:

    records  step          CPU s   wall s   peak RSS
     10,000  report         20.4     29.7    221 MiB   report.html 5.9 MB
     10,000  recommend       1.6      2.8     92 MiB
     10,000  history add     1.7      3.0    105 MiB
     10,000  compare         2.8      5.1    150 MiB
    100,000  report        160.0    173.3   1308 MiB   report.html 40.9 MB
    100,000  recommend      14.6     23.9    599 MiB
    100,000  history add    14.4     28.4    719 MiB
    100,000  compare        25.2     40.7   1177 MiB

The 100,000-record report.html in headless Chromium on the same machine: loaded in 3.5 s, sorted by a column in
0.36 s, filtered to one backend (16,667 records, 167 pages) in 0.25 s, the next page in 0.12 s.
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
            if record["kv_seq_len"] == record["seq_len"]:  # a self-attention case stays one: both lengths move
                record["kv_seq_len"] = int(record["kv_seq_len"]) + 8 * copy
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


# The command in a process of its own that, as it exits, prints as stderr's last line its peak resident memory (KiB;
# the largest of it and its worker processes, the report's chart workers) and the CPU seconds they all used.
CHILD = """
import atexit, resource, sys
def done():
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    print("peak_kib", max(me.ru_maxrss, kids.ru_maxrss), "cpu_s", cpu, file=sys.stderr)
atexit.register(done)
sys.argv[0] = "attnbench"
from attnbench.cli.main import main
main()
"""


def measured(args: list[object]) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak resident MiB) of one attnbench command in a process of its own."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, *map(str, args)], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    last = proc.stderr.strip().splitlines()[-1]
    if proc.returncode not in (0, 1) or not last.startswith("peak_kib "):
        raise SystemExit(f"attnbench {' '.join(map(str, args))} failed ({proc.returncode}): {proc.stderr[-400:]}")
    words = last.split()
    return seconds, float(words[3]), int(words[1]) / 1024


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
                seconds, cpu, peak = measured(STEPS[name](run, work))
                size = f"  report.html {(work / 'report' / 'report.html').stat().st_size / 1e6:.1f} MB" \
                    if name == "report" else ""
                print(f"{n:>7} records  {name:<12} {seconds:8.2f} s wall {cpu:8.2f} s CPU  peak RSS {peak:8.1f} MiB{size}", flush=True)


if __name__ == "__main__":
    main()
