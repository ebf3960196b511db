"""Does `compare` stay quiet between identical runs and catch a real slowdown? Counted over repeated real runs.

Runs `suites/quick.yaml` with one more backend, `planted` (this file's plugin: sdpa-flash whose every call, and its
backward, then spins for a set share of its own time, as a kernel made slower would), as I0 P0 I1 P1 ... I<n>: each I with the
planted backend at full speed, each P with it 15% slower. Then, with the CLI a user runs:

- identical: `attnbench compare I<k> I<k+1>` — counted quiet when it exits 0 with no regression;
- planted: `attnbench compare I<k> P<k>` — counted caught when `planted` has a regression, and clean when
  nothing else does.

    python benchmarks/compare_repeat.py [--repeats 10] [--slowdown 0.15] [--out /tmp/compare-repeat] [--compare-only]

Prints each comparison's verdict and pace, and the counts; the issue's bar is 9 of 10 for each.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnbench.backends.sdpa import SdpaFlash  # noqa: E402
from attnbench.sweep.suite import load_suite  # noqa: E402

SLOWDOWN_ENV = "PLANTED_SLOWDOWN"  # read by the plugin in the measuring process: a share of each call's time


def spin(seconds: float) -> None:
    """Busy-wait, as a kernel that got slower would."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def slowed(call, share: float):  # noqa: ANN001, ANN201 - any Prepared.call
    """`call` made `share` slower, its backward too: the forward spins `share` of its own time; a backward taken
    through its output spins `share` of each stretch between marks on the output (first in the backward) and on
    each input (last), so every timed call, forward or forward and backward, is that much slower."""
    import torch

    clock: dict[str, float] = {}

    class Mark(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, first):  # noqa: ANN001, ANN205
            ctx.first = first
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):  # noqa: ANN001, ANN205
            if not ctx.first and "t" in clock:
                spin(share * (time.perf_counter() - clock["t"]))
            clock["t"] = time.perf_counter()
            return grad, None

    def wrapped(*inputs):  # noqa: ANN002, ANN202
        start = time.perf_counter()
        marked = [Mark.apply(t, False) if isinstance(t, torch.Tensor) and t.requires_grad else t for t in inputs]
        out = call(*marked)
        spin(share * (time.perf_counter() - start))
        return Mark.apply(out, True) if isinstance(out, torch.Tensor) and out.requires_grad else out

    return wrapped


class Planted(SdpaFlash):
    """sdpa-flash, each call (and its backward) made PLANTED_SLOWDOWN slower (0: none)."""

    name = "planted"
    summary = "sdpa-flash made slower by a planted share of each call (benchmarks/compare_repeat.py)"

    def prepare(self, case, q, k, v, **kwargs):  # noqa: ANN001, ANN201 - the base class's signature
        prepared = super().prepare(case, q, k, v, **kwargs)
        share = float(os.environ.get(SLOWDOWN_ENV, "0"))
        return dataclasses.replace(prepared, call=slowed(prepared.call, share)) if share else prepared


def run(out: Path, slowdown: float) -> float:
    """One run of quick.yaml with the planted backend into `out`; its wall seconds."""
    env = {**os.environ, SLOWDOWN_ENV: str(slowdown), "PYTHONPATH": str(ROOT)}
    suite = ROOT / "suites/quick.yaml"
    chosen = [arg for name in [*(load_suite(suite).model.backends or []), "planted"] for arg in ("--backend", name)]
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "attnbench", "run", str(suite), "--out", str(out),
                    "--plugin", "benchmarks.compare_repeat:Planted", *chosen],
                   env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def compare(base: Path, new: Path) -> tuple[int, list[str], str]:
    """(exit code, the backends with a regression, the pace line) of `attnbench compare BASE NEW --md`."""
    md = new.parent / f"{base.name}-vs-{new.name}.md"
    done = subprocess.run([sys.executable, "-m", "attnbench", "compare", str(base), str(new), "--md", str(md)],
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    text = md.read_text() if md.exists() else ""
    regressed, section = [], None
    for line in text.splitlines():
        if line.startswith("### "):
            section = line[4:]
        elif section == "Regressions" and line.startswith("| ") and not line.startswith(("| backend", "|---")):
            regressed.append(line.split("|")[1].strip())
    pace = next((line for line in text.splitlines() if line.startswith("NEW ran at")), "pace 1")
    return done.returncode, regressed, pace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--slowdown", type=float, default=0.15)
    parser.add_argument("--out", type=Path, default=Path("/tmp/compare-repeat"))
    parser.add_argument("--compare-only", action="store_true", help="Compare the runs already in --out again.")
    args = parser.parse_args()
    walls = []
    if not args.compare_only:
        args.out.mkdir(parents=True, exist_ok=False)
        for k in range(args.repeats):
            walls.append(run(args.out / f"I{k}", 0.0))
            walls.append(run(args.out / f"P{k}", args.slowdown))
        walls.append(run(args.out / f"I{args.repeats}", 0.0))
    quiet = caught = clean = 0
    for k in range(args.repeats):
        code, regressed, pace = compare(args.out / f"I{k}", args.out / f"I{k + 1}")
        quiet += code == 0 and not regressed
        print(f"identical I{k} -> I{k + 1}: exit {code}, regressions {regressed or 'none'}; {pace[:60]}")
        code, regressed, pace = compare(args.out / f"I{k}", args.out / f"P{k}")
        caught += "planted" in regressed
        clean += set(regressed) <= {"planted"}
        print(f"planted   I{k} -> P{k}: exit {code}, regressions {regressed or 'none'}; {pace[:60]}")
    summary = {"repeats": args.repeats, "slowdown": args.slowdown, "identical_quiet": quiet,
               "planted_caught": caught, "planted_only_planted": clean,
               "wall_s_median": sorted(walls)[len(walls) // 2] if walls else None, "load": os.getloadavg()[0]}
    print(json.dumps(summary))
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
