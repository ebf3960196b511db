"""What the integrity guards cost (docs/conventions.md "Integrity guards"): `suites/quick.yaml` run whole, with the
guards on and off, in turns (on off off on ...), each run its own process.

With the guards on, the seconds spent inside them (the checksums, the thread check, the sign-flipped inputs, and in
a backward mode the forward call on them) are summed by wrapping `Guard`'s three methods and `Probe`'s; with them
off, `Guard` is a stand-in that checks nothing and the profiled call runs on the inputs as they are. Prints each
run's wall time (the run's own `env.json` `actual.wall_s`, process start to report written), the guards' seconds,
and the medians.

    python benchmarks/guard_cost.py [--pairs 3] [--out /tmp/guard-cost]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

RUN = """
import atexit, json, runpy, sys, time
from attnbench.run import measure
from attnbench.verify import integrity

mode, out = sys.argv[1], sys.argv[2]
spent = [0.0]
if mode == "off":
    class Unguarded:
        checks: list = []
        def __init__(self, *args): pass
        def returned(self, out): pass
        def problems(self, out, other): return []
    measure.Guard = Unguarded
    measure.other_inputs = lambda *args: None
else:
    def timed(fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - start
        return wrapper
    for name in ("__init__", "returned", "problems"):
        setattr(integrity.Guard, name, timed(getattr(integrity.Guard, name)))
    for name in ("__init__", "stale"):  # a forward's probe call is its profiled call, made with or without guards
        setattr(integrity.Probe, name, timed(getattr(integrity.Probe, name)))
atexit.register(lambda: open(out + ".guard_s", "w").write(json.dumps(spent[0])))
sys.argv = ["attnbench", "run", "quick", "--out", out]
runpy.run_module("attnbench", run_name="__main__")
"""


def one_run(mode: str, out: Path) -> tuple[float, float]:
    """One quick run: its wall time (env.json) and the guards' seconds."""
    shutil.rmtree(out, ignore_errors=True)
    done = subprocess.run([sys.executable, "-c", RUN, mode, str(out)], cwd=ROOT, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{mode} run failed:\n{done.stderr[-3000:]}")
    wall = json.loads((out / "env.json").read_text())["actual"]["wall_s"]
    return float(wall), json.loads(Path(str(out) + ".guard_s").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("/tmp/guard-cost"))
    args = parser.parse_args()
    walls: dict[str, list[float]] = {"on": [], "off": []}
    guard_s: list[float] = []
    for i in range(args.pairs):
        for mode in (("on", "off") if i % 2 == 0 else ("off", "on")):
            wall, spent = one_run(mode, args.out / f"{mode}{i}")
            walls[mode].append(wall)
            if mode == "on":
                guard_s.append(spent)
            print(f"run {i} guards {mode:3}: wall {wall:6.2f} s" + (f", in the guards {spent:.3f} s "
                  f"({spent / wall:.2%} of the wall)" if mode == "on" else ""), flush=True)
    on, off = statistics.median(walls["on"]), statistics.median(walls["off"])
    print(f"median wall: guards on {on:.2f} s, off {off:.2f} s ({on / off - 1:+.1%}); in the guards "
          f"{statistics.median(guard_s):.3f} s ({statistics.median(s / w for s, w in zip(guard_s, walls['on'])):.2%} "
          f"of a guarded run's wall)")


if __name__ == "__main__":
    main()
