"""Build, without a GPU, the FlashInfer JIT modules that suites' FlashInfer cases load on each arch, and install
them where FlashInfer loads a module without building it: its AOT folder (flashinfer/data/aot/<name>/<name>.so,
jit/env.py FLASHINFER_AOT_DIR), as FlashInfer's own aot.py does: one process with FLASHINFER_CUDA_ARCH_LIST set to
every arch (one library holds each arch's code), each module built by FlashInfer's JitSpec.build (nvcc, ninja).

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


def build(suites: list[str], arches: list[str], listing: bool, only: str | None = None) -> int:
    """In a process whose FLASHINFER_CUDA_ARCH_LIST names `arches`: build (or list) the modules, then copy each
    library into FlashInfer's AOT folder with a manifest of what each arch needs."""
    import shutil

    from flashinfer.jit import env

    from attnbench.backends.flashinfer_aot import spec
    from attnbench.backends.flashinfer_kernels import MANIFEST

    needs: dict[str, list[str]] = {}
    found: dict[str, object] = {}
    unmapped: dict[str, list[str]] = {}
    for arch in arches:
        modules, unmapped[arch] = modules_for(suites, arch)
        needs[arch] = sorted(modules)
        found.update(modules)
        for line in unmapped[arch]:
            print(f"{arch} not mapped: {line}")
    aot = env.FLASHINFER_AOT_DIR
    for name, module in sorted(found.items()):
        target = aot / name / f"{name}.so"
        if listing or target.exists() or (only is not None and only not in name):
            wanted = " ".join(a for a in arches if name in needs[a])
            print(f"{'built' if target.exists() else 'missing'} {name} ({wanted})")
            continue
        jit = spec(module)
        if jit.name != name:
            print(f"FlashInfer names the module {jit.name}, attnbench expected {name}", file=sys.stderr)
            return 1
        wall, cpu = time.perf_counter(), cpu_s()
        jit.build(verbose=False)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(jit.get_library_path(), target)
        print(f"compiled {name} for {' '.join(arches)} in {time.perf_counter() - wall:.1f} s wall, "
              f"{cpu_s() - cpu:.1f} s CPU ({os.environ.get('MAX_JOBS', 'all')} jobs) -> {target}", flush=True)
    if not listing:
        manifest = {"archs": needs, "suites": suites, "unmapped": unmapped}
        (aot / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
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
        return build(args.suites, arches, args.list, args.only)
    command = [sys.executable, __file__, "--in-process", *args.suites] + (["--list"] * args.list)
    command += [word for arch in arches for word in ("--arch", arch)] + (["--only", args.only] if args.only else [])
    # FlashInfer reads the arch list once, at import
    return subprocess.run(command, env={**os.environ, "FLASHINFER_CUDA_ARCH_LIST": " ".join(arches)},
                          check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
