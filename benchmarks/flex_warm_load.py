"""What a flex graph costs when --cache-dir already holds it: each shape's compile_s split into torch.compile's part
(tracing, the cache lookup and load: `dynamo_s`) and the first call's, in fresh processes.

One process compiles the shapes into an empty cache (cold); then `--repeats` fresh processes each prepare the same
shapes from it (warm), as a second `attnbench run` does. Printed per shape: the cold compile, then the warm medians
over the repeats, the first shape of each process apart (it also pays Inductor's start: its imports and the CPU's
vector-ISA probe). The forecast's CPU cache-load constant (attnbench.run.forecast) is this script's warm median of
`dynamo_s` for the shapes after the first.

    python benchmarks/flex_warm_load.py [--repeats 3] [--seq 1024 2048]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FIELDS = ("compile_s", "dynamo_s", "cpp_builds", "cpp_build_s", "kernels_compiled", "cache_hits")


def shapes(lengths: list[int]) -> list[dict]:
    """Case fields of suites/long.yaml's CPU block at these lengths: MHA and GQA, causal with and without a window."""
    return [dict(device="cpu", dtype="float32", batch=1, seq_len=s, kv_seq_len=s, heads=8, kv_heads=kv, head_dim=64,
                 causal=True, window=w, mode="fwd") for s in lengths for kv in (8, 2) for w in (None, 1024)]


def child(cases: list[dict]) -> list[dict]:
    """Prepare each case with flex in this process (inductor's cache: TORCHINDUCTOR_CACHE_DIR); what each cost."""
    from attnbench.backends.flex import FlexBackend
    from attnbench.core.case import Case
    from attnbench.verify.inputs import make_inputs

    out = []
    for fields in cases:
        case = Case(**fields)
        inputs = make_inputs(case)
        extra = FlexBackend().prepare(case, inputs.q, inputs.k, inputs.v).extra
        out.append({name: extra[name] for name in FIELDS})
    return out


def in_fresh_process(cache: Path, cases: list[dict]) -> list[dict]:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    code = ("import json, sys; from benchmarks.flex_warm_load import child; "
            "print(json.dumps(child(json.loads(sys.argv[1]))))")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(cases)], cwd=ROOT, env=env, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seq", type=int, nargs="+", default=[1024, 2048])
    args = parser.parse_args()
    cases = shapes(args.seq)
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "inductor"
        print(f"load before: {os.getloadavg()}")
        cold = in_fresh_process(cache, cases)
        warm = [in_fresh_process(cache, cases) for _ in range(args.repeats)]
        print(f"load after:  {os.getloadavg()}")
    print(f"{'shape':<28} {'cold compile_s':>14} {'warm compile_s':>14} {'warm dynamo_s':>13} "
          f"{'first call_s':>12} {'cpp_builds':>10} {'compiled':>8} {'hits':>4}")
    later = []
    for i, fields in enumerate(cases):
        runs = [w[i] for w in warm]
        compile_s = statistics.median(r["compile_s"] for r in runs)
        dynamo_s = statistics.median(r["dynamo_s"] for r in runs)
        if i:
            later.extend(r["dynamo_s"] for r in runs)
        name = f"s{fields['seq_len']} kv{fields['kv_heads']} w{fields['window']}" + (" (first)" if i == 0 else "")
        print(f"{name:<28} {cold[i]['compile_s']:>14.2f} {compile_s:>14.3f} {dynamo_s:>13.3f} "
              f"{compile_s - dynamo_s:>12.3f} {max(r['cpp_builds'] for r in runs):>10} "
              f"{max(r['kernels_compiled'] for r in runs):>8} {min(r['cache_hits'] for r in runs):>4}")
    print(f"warm load (dynamo_s), shapes after a process's first: median {statistics.median(later):.3f} s, "
          f"max {max(later):.3f} s over {len(later)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
