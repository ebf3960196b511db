"""How attnbench's readers scale with a run's size: a recorded run (tests/data/cpu-run) multiplied over cases into
synthetic results of N records, then `history add` and `recommend` timed on it with their peak Python memory
(tracemalloc). Each copy of a record gets its own sequence length, so every record is a distinct measurement.

    python benchmarks/scale.py [--records 10000 100000] [--steps history-add recommend]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Callable

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


def measured(step: Callable[[], object]) -> tuple[float, float]:
    """(seconds, peak MiB traced) of one call."""
    tracemalloc.start()
    start = time.perf_counter()
    step()
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return seconds, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--steps", nargs="+", default=["history-add", "recommend"])
    args = parser.parse_args()
    from attnbench.history.store import add_runs
    from attnbench.report.recommend import recommend_runs

    with tempfile.TemporaryDirectory() as tmp:
        for n in args.records:
            run = synthetic(Path(tmp) / f"run{n}", n)
            steps = {"history-add": lambda: add_runs([run], Path(tmp) / f"h{n}.sqlite"),
                     "recommend": lambda: recommend_runs([run], "time")}
            for name in args.steps:
                seconds, peak = measured(steps[name])
                print(f"{n:>7} records  {name:<12} {seconds:8.2f} s  peak {peak:8.1f} MiB", flush=True)


if __name__ == "__main__":
    main()
