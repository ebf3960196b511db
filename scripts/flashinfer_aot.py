"""Build, without a GPU, the FlashInfer JIT modules that suites' FlashInfer cases load, into the cache FlashInfer
reads at run time ($FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/<version>/<arch>/cached_ops): one process per arch,
FLASHINFER_CUDA_ARCH_LIST set to it, each module by FlashInfer's own JitSpec.build (nvcc through ninja).

    python scripts/flashinfer_aot.py --arch 9.0a --arch 10.0a suites/gpu-check.yaml [--list]

Needs nvcc (CUDA_HOME, or on PATH); MAX_JOBS bounds ninja's jobs. A build step, not a measurement: the image build
and a lent machine's carried cache run it (docs/docker.md, "FlashInfer's kernels built ahead")."""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

ARCHES = ("9.0a", "10.0a")


def modules_for(suites: list[str], arch: str) -> tuple[dict[str, object], list[str]]:
    """Each module the suites' FlashInfer cases load on `arch`, by name; the reasons some are not mapped."""
    from attnbench.backends.base import refusal
    from attnbench.backends.flashinfer import FlashInferBackend
    from attnbench.backends.flashinfer_aot import module_args, uri
    from attnbench.sweep.suite import load_suite

    backend = FlashInferBackend()
    found: dict[str, object] = {}
    unmapped: list[str] = []
    for path in suites:
        suite = load_suite(path)
        if suite.model.backends is not None and backend.name not in suite.model.backends:
            continue
        for case in suite.cases("cuda"):
            if refusal(backend, case):
                continue
            modules, why = module_args(case, arch)
            if why:
                unmapped.append(f"{case.case_id}: {why}")
            found.update({uri(m): m for m in modules})
    return found, unmapped


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def build_arch(suites: list[str], arch: str, listing: bool, only: str | None = None) -> int:
    """In a process whose FLASHINFER_CUDA_ARCH_LIST is `arch`: build (or list) the modules."""
    from flashinfer.jit import env

    from attnbench.backends.flashinfer_aot import spec
    from attnbench.backends.flashinfer_kernels import MANIFEST

    found, unmapped = modules_for(suites, arch)
    for line in unmapped:
        print(f"{arch} not mapped: {line}")
    if not listing:
        env.FLASHINFER_WORKSPACE_DIR.mkdir(parents=True, exist_ok=True)
        manifest = {"arch": arch, "suites": suites, "modules": sorted(found), "unmapped": unmapped}
        (env.FLASHINFER_WORKSPACE_DIR / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    for name, module in sorted(found.items()):
        if only is not None and only not in name:
            continue
        built = env.FLASHINFER_JIT_DIR / name / f"{name}.so"
        if listing or built.exists():
            print(f"{arch} {'built' if built.exists() else 'missing'} {name}")
            continue
        jit = spec(module)
        if jit.name != name:
            print(f"{arch}: FlashInfer names the module {jit.name}, attnbench expected {name}", file=sys.stderr)
            return 1
        wall, cpu = time.perf_counter(), cpu_s()
        jit.build(verbose=False)
        print(f"{arch} compiled {name} in {time.perf_counter() - wall:.1f} s wall, {cpu_s() - cpu:.1f} s CPU "
              f"({os.environ.get('MAX_JOBS', 'all')} jobs) -> {built}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suites", nargs="+")
    parser.add_argument("--arch", action="append", help=f"CUDA arch, repeatable (default: {' '.join(ARCHES)})")
    parser.add_argument("--list", action="store_true", help="name the modules and whether each is built; build none")
    parser.add_argument("--only", help="the modules whose name contains this")
    parser.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    arches = args.arch or list(ARCHES)
    from attnbench.backends.flashinfer_aot import arch_major

    for arch in arches:
        try:
            arch_major(arch)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if args.in_process:
        return build_arch(args.suites, arches[0], args.list, args.only)
    for arch in arches:
        command = [sys.executable, __file__, "--in-process", "--arch", arch, *args.suites] + (["--list"] * args.list)
        command += ["--only", args.only] if args.only else []
        done = subprocess.run(command, env={**os.environ, "FLASHINFER_CUDA_ARCH_LIST": arch}, check=False)
        if done.returncode:
            return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
