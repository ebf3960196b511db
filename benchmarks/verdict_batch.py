"""Are compare's verdicts true on real runs whose change is known? A batch of runs with planted slowdowns, counted.

Four backends are planted (this file's plugin): naive, sdpa, sdpa-math and sdpa-flash, each of whose calls (and its
backward) then spins for a share of its own time set per backend in the measuring process, as a kernel made slower
would. suites/quick.yaml's cases are run as rounds of five runs, in this order each round:

- I<k>: nothing slowed (the baseline; I<k> vs I<k+1> is an identical pair);
- one<k>: planted-flash 15% slower;
- three<k>: planted-sdpa, planted-math and planted-flash 25% slower, planted-naive unchanged;
- small<k>: planted-flash 5% slower, under compare's 10% threshold;
- thread<k>: nothing planted, on one thread instead of two (every backend slower for real);

then `attnbench compare I<k> X<k>` for each, as a user runs it. The counts, fixed before the batch is taken:

- identical: quiet when it exits 0 and nothing is flagged (no regression, no improvement, no backend across the board);
- one: caught when planted-flash is flagged slower and nothing else is;
- three: caught when exactly the three slowed backends are flagged slower;
- small: not flagged when it exits 0 and planted-flash is not flagged;
- thread: caught when it exits 1.

    python benchmarks/verdict_batch.py run DIR [--repeats 10]   # takes the runs (resumes a batch cut short)
    python benchmarks/verdict_batch.py count DIR                # compares and counts; writes DIR/counts.json
    python benchmarks/verdict_batch.py identical DIR [--repeats 8] [--gap 20]  # identical runs I<k>, `gap` s apart,
                                                                # to calibrate on (interval_coverage.py calibrate)
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

from attnbench.backends.naive import NaiveBackend  # noqa: E402
from attnbench.backends.sdpa import SdpaAuto, SdpaFlash, SdpaMath  # noqa: E402
from attnbench.records.results import stored_results  # noqa: E402

SLOWDOWN_ENV = "PLANTED_SLOWDOWN"  # "planted-flash=0.15,planted-sdpa=0.25": each backend's share of its own time
PLANTED = ("planted-naive", "planted-sdpa", "planted-math", "planted-flash")
KINDS: dict[str, tuple[dict[str, float], dict[str, str]]] = {
    "I": ({}, {}),
    "one": ({"planted-flash": 0.15}, {}),
    "three": ({"planted-sdpa": 0.25, "planted-math": 0.25, "planted-flash": 0.25}, {}),
    "small": ({"planted-flash": 0.05}, {}),
    "thread": ({}, {"OMP_NUM_THREADS": "1"}),
}


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


def share_of(name: str) -> float:
    """The planted share of backend `name` in this process (PLANTED_SLOWDOWN); a bare share is `planted`'s (how
    `attnbench ab --b-env PLANTED_SLOWDOWN=0.15` slows one side, benchmarks/ab_cpu.sh)."""
    for item in filter(None, os.environ.get(SLOWDOWN_ENV, "").split(",")):
        backend, named, share = item.partition("=")
        if not named:
            backend, share = "planted", backend
        if backend == name:
            return float(share)
    return 0.0


def planted(base: type, name: str) -> type:
    """`base` under the name `name`, each call made its planted share slower."""

    def prepare(self, case, q, k, v, **kwargs):  # noqa: ANN001, ANN202 - the base class's signature
        prepared = base.prepare(self, case, q, k, v, **kwargs)
        share = share_of(name)
        return dataclasses.replace(prepared, call=slowed(prepared.call, share)) if share else prepared

    return type(name.replace("-", "_").title(), (base,), {
        "name": name, "summary": f"{base.name} made slower by a planted share (benchmarks/verdict_batch.py)",
        "prepare": prepare})


PlantedNaive = planted(NaiveBackend, "planted-naive")
PlantedSdpa = planted(SdpaAuto, "planted-sdpa")
PlantedMath = planted(SdpaMath, "planted-math")
PlantedFlash = planted(SdpaFlash, "planted-flash")
Planted = planted(SdpaFlash, "planted")  # attnbench ab's planted backend (tests/test_ab.py, benchmarks/ab_cpu.sh)
PLUGINS = ("PlantedNaive", "PlantedSdpa", "PlantedMath", "PlantedFlash")


def run(out: Path, kind: str) -> None:
    """One run of quick.yaml's cases with the four planted backends, as `kind` plants them, into `out`."""
    shares, extra_env = KINDS[kind]
    env = {**os.environ, **extra_env, "PYTHONPATH": str(ROOT),
           SLOWDOWN_ENV: ",".join(f"{name}={share}" for name, share in shares.items())}
    args = [arg for plugin in PLUGINS for arg in ("--plugin", f"benchmarks.verdict_batch:{plugin}")]
    args += [arg for name in PLANTED for arg in ("--backend", name)]
    subprocess.run([sys.executable, "-m", "attnbench", "run", str(ROOT / "suites/quick.yaml"), "--out", str(out),
                    "--no-report", *args], env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def take(folder: Path, repeats: int) -> None:
    """The batch's runs, round by round (a run already whole is kept: a batch cut short resumes)."""
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(repeats + 1):
        for kind in KINDS if k < repeats else ("I",):
            target = folder / f"{kind}{k}"
            if stored_results(target) is None:
                run(target, kind)


def identical(folder: Path, repeats: int, gap_s: float) -> None:
    """`repeats` runs of kind I, `gap_s` apart (a run already whole is kept): identical runs spread over minutes,
    as the runs a comparison judges are."""
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(repeats):
        target = folder / f"I{k}"
        if stored_results(target) is None:
            if k:
                time.sleep(gap_s)
            run(target, "I")


def flagged(base: Path, new: Path, out: Path) -> tuple[int, set[str], set[str]]:
    """(exit code, backends flagged slower, backends flagged faster) by `attnbench compare BASE NEW --md`."""
    md = out / f"{base.name}-vs-{new.name}.md"
    done = subprocess.run([sys.executable, "-m", "attnbench", "compare", str(base), str(new), "--md", str(md)],
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    slower, faster, section = set(), set(), None
    for line in md.read_text().splitlines() if md.exists() else []:
        if line.startswith("### "):
            section = line[4:]
        elif line.startswith("| ") and not line.startswith(("| backend", "|---")):
            if section == "Regressions":
                slower.add(line.split("|")[1].strip())
            elif section == "Improvements":
                faster.add(line.split("|")[1].strip())
    if "every kernel together slower" in (md.read_text() if md.exists() else ""):
        slower |= set(PLANTED)
    return done.returncode, slower, faster


def count(folder: Path) -> dict[str, object]:
    """Each kind's count over the batch, by the rules of the module's docstring; every verdict listed."""
    repeats = sum(1 for p in folder.glob("one*") if p.is_dir())
    out = folder / "compare"
    out.mkdir(exist_ok=True)
    tally = {"identical_quiet": 0, "one_caught": 0, "three_caught": 0, "small_not_flagged": 0, "thread_caught": 0}
    verdicts = []
    for k in range(repeats):
        base = folder / f"I{k}"
        for kind, new in (("identical", folder / f"I{k + 1}"), *((kind, folder / f"{kind}{k}") for kind in KINDS
                                                                   if kind != "I")):
            code, slower, faster = flagged(base, new, out)
            verdicts.append({"pair": f"{base.name} vs {new.name}", "exit": code, "slower": sorted(slower),
                             "faster": sorted(faster)})
            if kind == "identical":
                tally["identical_quiet"] += code == 0 and not slower and not faster
            elif kind == "one":
                tally["one_caught"] += slower == {"planted-flash"}
            elif kind == "three":
                tally["three_caught"] += slower == {"planted-sdpa", "planted-math", "planted-flash"}
            elif kind == "small":
                tally["small_not_flagged"] += code == 0 and "planted-flash" not in slower
            else:
                tally["thread_caught"] += code == 1
    result = {"repeats": repeats, **tally, "verdicts": verdicts}
    (folder / "counts.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("run", "count", "identical"))
    parser.add_argument("folder", type=Path)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--gap", type=float, default=20.0, help="seconds between identical runs")
    args = parser.parse_args()
    if args.action == "run":
        take(args.folder, args.repeats)
    elif args.action == "identical":
        identical(args.folder, args.repeats, args.gap)
    else:
        result = count(args.folder)
        print(json.dumps({k: v for k, v in result.items() if k != "verdicts"}))


if __name__ == "__main__":
    main()
