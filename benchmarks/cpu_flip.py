"""MKL VML's first-call race, alone: how often a fresh process's first float32 `tanh` comes back wrong on a share.

torch's CPU wheel computes a contiguous float32/float64 `tanh` (and `exp`, `sqrt`, `log`, ...) with MKL VML: each
intra-op thread calls `vmsTanh` on its share, asking for the high-accuracy kernel. oneMKL 2024.2 picks a function's
kernel on its first call, and a first call made on two threads at once can run one thread's share with the
low-accuracy kernel (pytorch/pytorch#188792). The next call is right, so only the first call in a process can flip.
This is what made attnbench's naive `mismatch` on its first soft-capped case in about one run of five on a 2-core
Xeon (issue 22): the case's tanh was the process's first, and heads 0-1 (the calling thread's half) came back off.

Each run is a fresh process that starts its intra-op threads with a few parallel ops (as a benchmark's earlier cases
do), then calls `op` twice on the same (4, 192, 192) float32 tensor (a soft-capped score matrix's size) and compares
the two calls bit for bit; runs go `--parallel` at a time, since the race needs the threads to meet. The script
prints each flipped run (which quarter of the tensor, by how much against float64), the rate, the load, torch's and
MKL's versions and the CPU, and whether VML's low-accuracy kernel differs from the high-accuracy one on this CPU at
all (where it does not, as on an AMD EPYC, nothing can flip). `--warm` first calls `op` on one element (what
attnbench.verify.vml does): the rate should drop to 0. Needs only torch.

    python benchmarks/cpu_flip.py [--runs 200] [--parallel 4] [--threads 2] [--op tanh] [--warm]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

SHAPE = (4, 192, 192)  # batch·heads, queries, keys: naive's score matrix on the failing case
VML_NAMES = {"tanh": "Tanh", "exp": "Exp", "sqrt": "Sqrt", "log": "Ln", "sin": "Sin", "erf": "Erf"}


def child(op: str, threads: int, warm: bool) -> dict:
    """One fresh process: threads started, then `op` twice on the same tensor; what differed between the calls."""
    import torch

    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(SHAPE[0], SHAPE[1], 32, generator=gen), torch.randn(SHAPE[0], SHAPE[2], 32, generator=gen)
    x = (q @ k.transpose(-2, -1)) / 32 ** 0.5 / 20  # scores over the cap, as soft-capping takes them
    if op in ("sqrt", "log"):
        x = x.abs() + 0.1
    for _ in range(3):  # parallel work before the first call, none of it through VML
        (x * 2 + 1).softmax(-1).sum()
    fn = getattr(torch, op)
    if warm:
        fn(torch.full((1,), 0.5))
    first, second = fn(x), fn(x)
    exact = fn(x.double())
    quarters = [float((first[i] - second[i]).abs().max()) for i in range(SHAPE[0])]
    return {"flipped": not torch.equal(first, second), "quarters": quarters,
            "first_error": float((first.double() - exact).abs().max()),
            "second_error": float((second.double() - exact).abs().max())}


def vml_modes_differ(op: str) -> bool | None:
    """Whether VML's low-accuracy (EP) and high-accuracy (HA) kernels give different results on this CPU; None when
    torch's MKL cannot be reached (no MKL, another platform)."""
    import torch

    name = VML_NAMES.get(op)
    try:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        fn = getattr(lib, f"vms{name}")
    except (OSError, AttributeError, TypeError):
        return None
    x = torch.rand(1 << 16) + 0.1
    outs = []
    for mode in (0x2, 0x3):  # VML_HA, VML_EP; with VML_FTZDAZ_OFF | VML_ERRMODE_IGNORE, as ATen passes them
        y = torch.empty_like(x)
        fn(ctypes.c_int(x.numel()), ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()),
           ctypes.c_longlong(mode | 0x140000 | 0x100))
        outs.append(y)
    return not torch.equal(outs[0], outs[1])


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def mkl_version() -> str:
    import torch

    for line in torch.__config__.show().splitlines():
        if "Math Kernel Library" in line:
            return line.strip().lstrip("- ")
    return "no MKL"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--parallel", type=int, default=4, help="fresh processes at a time")
    parser.add_argument("--threads", type=int, default=2, help="torch's intra-op threads in each")
    parser.add_argument("--op", default="tanh", choices=sorted(VML_NAMES))
    parser.add_argument("--warm", action="store_true", help="call op on one element first (attnbench.verify.vml's fix)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.op, args.threads, args.warm)))
        return 0

    import torch

    command = [sys.executable, os.path.abspath(__file__), "--child", "--op", args.op, "--threads", str(args.threads)]
    command += ["--warm"] if args.warm else []

    def one(_: int) -> dict:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            return {"error": proc.stderr.strip().splitlines()[-1:]}
        return json.loads(proc.stdout.strip().splitlines()[-1])

    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    with ThreadPoolExecutor(args.parallel) as pool:
        results = list(pool.map(one, range(args.runs)))
    load_after = os.getloadavg()[0]
    flipped = [r for r in results if r.get("flipped")]
    errors = [r for r in results if "error" in r]
    for i, r in enumerate(results):
        if r.get("flipped"):
            quarters = " ".join(f"{q:.2g}" for q in r["quarters"])
            print(f"run {i}: first call differs from the second; |first - second| per quarter: {quarters}; "
                  f"max error vs float64 {r['first_error']:.3g} (second call {r['second_error']:.3g})")
    for r in errors:
        print(f"a run failed: {r['error']}")
    differ = vml_modes_differ(args.op)
    print(f"torch {torch.__version__}; {mkl_version()}; CPU {cpu_model()} ({os.cpu_count()} CPUs); "
          f"{args.threads} intra-op threads; {args.parallel} processes at a time; load {load_before:.2f} -> "
          f"{load_after:.2f}; {time.perf_counter() - start:.0f} s")
    print(f"VML's low-accuracy kernel differs from the high-accuracy one here: "
          f"{'unknown' if differ is None else 'yes' if differ else 'no (nothing can flip on this CPU)'}")
    ran = len(results) - len(errors)
    print(f"{args.op}{' (warmed on one element first)' if args.warm else ''}: the first call flipped in "
          f"{len(flipped)} of {ran} fresh processes ({100 * len(flipped) / max(1, ran):.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
