"""Where FlashInfer would load its compiled kernels from (for `doctor`), and which JIT modules a call built or
loaded (flashinfer/jit/core.py `jit_spec_registry`)."""

from __future__ import annotations

import importlib
import sys
import time
from typing import Any

MODULE = "flashinfer"
# scripts/flashinfer_aot.py's: each arch's modules, in FlashInfer's AOT folder
MANIFEST = "attnbench-aot.json"


def nvcc_path(environ: Any = None) -> str | None:
    """The nvcc FlashInfer's JIT would run (flashinfer/jit/cpp_ext.py get_cuda_path), or None."""
    import os
    import shutil

    environ = os.environ if environ is None else environ
    home = environ.get("CUDA_HOME") or environ.get("CUDA_PATH")
    candidates = [environ.get("FLASHINFER_NVCC"),
                  os.path.join(home, "bin", "nvcc") if home else shutil.which("nvcc",
                                                                              path=environ.get("PATH")),
                  "/usr/local/cuda/bin/nvcc"]
    return next((c for c in candidates if c and os.path.isfile(c) and os.access(c, os.X_OK)), None)


def kernel_files() -> dict[str, Any]:
    """Where FlashInfer would load our calls' kernels from, without a GPU (flashinfer/jit/core.py
    JitSpec.build_and_load: AOT modules, else FLASHINFER_JIT_DIR, else nvcc; cubins counted apart). `state`:
    "precompiled", "jit" (nvcc here), "jit-cache", "absent" (a first GPU call fails) or "unknown"."""
    from pathlib import Path

    try:
        env = importlib.import_module(f"{MODULE}.jit.env")
        aot_dirs = [Path(d) for d in (getattr(env, "FLASHINFER_AOT_DIRS", None) or (env.FLASHINFER_AOT_DIR,))]
        jit_dir, cubin_dir = Path(env.FLASHINFER_JIT_DIR), Path(env.FLASHINFER_CUBIN_DIR)
        providers = [f"{p.distribution} {p.version} ({', '.join(sorted(p.cuda_architectures))})"
                     for p in getattr(env, "FLASHINFER_AOT_PROVIDERS", ())]
    except Exception as exc:  # a stand-in module, or a flashinfer whose settings moved
        return {"state": "unknown", "summary": f"cannot read {MODULE}.jit.env: {type(exc).__name__}: {exc}"}
    precompiled = sorted({so.parent.name for d in aot_dirs if d.is_dir() for so in d.glob("*/*.so")})
    compiled = sorted({so.parent.name for so in jit_dir.glob("*/*.so")}) if jit_dir.is_dir() else []
    cubins = sum(1 for _ in cubin_dir.rglob("*.cubin")) if cubin_dir.is_dir() else 0
    nvcc = nvcc_path()
    ahead = built_ahead(aot_dirs)
    found = {"aot_dirs": [str(d) for d in aot_dirs], "providers": providers, "precompiled": len(precompiled),
             "built_ahead": ahead, "jit_dir": str(jit_dir), "compiled": len(compiled), "nvcc": nvcc,
             "cubin_dir": str(cubin_dir), "cubins": cubins}
    cubin_note = f"; {cubins} cubins in {cubin_dir}" if cubins else ""
    if ahead:
        return {**found, "state": "precompiled", "summary": ahead_summary(ahead, nvcc) + cubin_note}
    if precompiled:
        source = ", ".join(providers) or ", ".join(str(d) for d in aot_dirs if d.is_dir())
        return {**found, "state": "precompiled",
                "summary": f"{len(precompiled)} precompiled modules ({source}){cubin_note}"}
    none_precompiled = ("no precompiled module (no flashinfer-jit-cache installed, no flashinfer/data/aot)"
                        if not providers else f"no precompiled module in {', '.join(providers)}")
    if nvcc:
        return {**found, "state": "jit",
                "summary": f"{none_precompiled}: JIT-compiled at first use by {nvcc} into "
                           f"{jit_dir} ({len(compiled)} there now){cubin_note}"}
    if compiled:
        return {**found, "state": "jit-cache",
                "summary": f"{none_precompiled}; {len(compiled)} modules compiled earlier in {jit_dir}, and "
                           f"no nvcc to compile any other{cubin_note}"}
    return {**found, "state": "absent",
            "summary": f"no kernels: {none_precompiled}, none compiled earlier in {jit_dir}, and no nvcc to "
                       "JIT-compile one (CUDA_HOME unset, none on PATH or in /usr/local/cuda): a first call "
                       f"on a GPU fails{cubin_note}"}


def built_ahead(aot_dirs: list[Any]) -> list[dict[str, Any]]:
    """Per arch of the first AOT folder's MANIFEST:
    the modules it lists, and those whose library is missing."""
    import json

    manifest = next((d / MANIFEST for d in aot_dirs if (d / MANIFEST).is_file()), None)
    try:
        archs = json.loads(manifest.read_text())["archs"] if manifest else {}
        listed = {str(arch): list(names) for arch, names in archs.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []
    return [{"arch": arch, "dir": str(manifest.parent), "modules": len(names),
             "missing": [n for n in names if not any((d / n / f"{n}.so").is_file() for d in aot_dirs)]}
            for arch, names in listed.items()]


def ahead_summary(ahead: list[dict[str, Any]], nvcc: str | None) -> str:
    """"5 for sm90a, 4 for sm100a built ahead in …", with what is missing and whether nvcc can JIT it."""
    parts = []
    for arch in ahead:
        sm = "sm" + arch["arch"].replace(".", "")
        have = arch["modules"] - len(arch["missing"])
        parts.append(f"{have} for {sm}" + (f" ({len(arch['missing'])} of {arch['modules']} missing)"
                                          if arch["missing"] else ""))
    text = f"{', '.join(parts)} built ahead in {ahead[0]['dir']}"
    if any(arch["missing"] for arch in ahead):
        text += ("; the missing "
                 f"JIT-compiled at first use by {nvcc}") if nvcc else "; no nvcc to JIT the missing"
    return text


def registered() -> dict[str, Any]:
    """The JitSpecs an imported flashinfer generated in this process, by module name."""
    core = sys.modules.get(f"{MODULE}.jit.core")
    try:
        return dict(core.jit_spec_registry.get_all_specs()) if core is not None else {}
    except Exception:  # a registry that moved
        return {}


def library_mtime(spec: Any) -> float | None:
    """When the module's library was written; None: not yet."""
    try:
        return spec.get_library_path().stat().st_mtime
    except (OSError, AttributeError):
        return None


def compiling_now() -> str | None:
    """The last module generated whose library does not exist yet."""
    unbuilt = [name for name, spec in registered().items() if library_mtime(spec) is None]
    return unbuilt[-1] if unbuilt else None


class JitWatch:
    """The modules a stretch of code used first in this process: built (written since) or loaded."""

    def __init__(self) -> None:
        self.readable = f"{MODULE}.jit.core" in sys.modules and hasattr(sys.modules[f"{MODULE}.jit.core"],
                                                                         "jit_spec_registry")
        self.before = set(registered())
        self.started = time.time()

    def split(self) -> tuple[list[str], list[str]]:
        built: list[str] = []
        loaded: list[str] = []
        for name, spec in registered().items():
            if name in self.before:
                continue
            written = library_mtime(spec)
            if written is not None:
                (built if written >= self.started else loaded).append(name)
        return built, loaded

    def extra(self) -> dict[str, Any]:
        if not self.readable:
            return {}
        built, loaded = self.split()
        return {"kernels_compiled": len(built), "cache_hits": len(loaded), "jit_built": built,
                "jit_loaded": loaded}
