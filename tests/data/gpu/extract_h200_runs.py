"""Write h200-runs.json: what the two H200 runs of 2026-11-30 recorded about their GPU (run from the repo root:
python tests/data/gpu/extract_h200_runs.py). Rerunning rewrites the same bytes.

Per run: env.json's "gpu_state" (read before the run, idle), `attnbench doctor --json`'s GPU state and advice, and, for
every timed record, the GPU sample taken right after its timing (`throttled` and the `extra` fields). Every record says
`throttled: true` with one other process: the run's own parent held a CUDA context (xformers' probe), and the workers
counted it. The process lists and pids themselves were not recorded, only that count.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # run from the repo root without installing

from attnbench.records.results import stored_lines  # noqa: E402

RUNS = ("NVIDIA-H200-20261130-012030", "NVIDIA-H200-20261130-012712")
SAMPLED = ("sm_clock_mhz", "clock_event_reasons", "other_gpu_processes")


def main() -> None:
    out = {"_source": __doc__.split("\n\n")[1].replace("\n", " ").strip(), "runs": {}}
    for run in RUNS:
        directory = Path("reports") / run / "run"
        env = json.loads((directory / "env.json").read_text())
        records = stored_lines(directory)
        doctor = json.loads((directory.parent / "doctor.json").read_text())
        out["runs"][run] = {
            "gpu_state": env["gpu_state"],
            "doctor": {"gpu_state": doctor["environment"]["gpu_state"], "gpu_advice": doctor["gpu_advice"]},
            "records": [{"backend": r["backend"], "case_id": r["case_id"], "status": r["status"],
                         "time_ms": r["time_ms"], "throttled": r["throttled"],
                         "extra": {key: r["extra"][key] for key in SAMPLED}}
                        for r in records if "sm_clock_mhz" in (r.get("extra") or {})],
        }
    lines = {}  # one record a line: each is first dumped as a placeholder string
    for run in out["runs"].values():
        for n, record in enumerate(run["records"]):
            lines[f"@record{len(lines)}@"] = json.dumps(record)
            run["records"][n] = f"@record{len(lines) - 1}@"
    text = json.dumps(out, indent=1)
    for key, line in lines.items():
        text = text.replace(f'"{key}"', line)
    Path(__file__).with_name("h200-runs.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
