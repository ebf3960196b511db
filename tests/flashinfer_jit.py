"""A stand-in FlashInfer with its JIT, for the compile phase's tests: a plugin (`tests.flashinfer_jit:STANDIN`)
registering `flashinfer-jit`, FlashInfer's own adapter allowed on the CPU, over tests/test_flashinfer_standin.py's
stand-in arithmetic, to which this adds FlashInfer 0.7.2.post1's JIT as flashinfer/jit/core.py and env.py run it:

- each entry point generates its module, named as flashinfer/jit/attention/modules.py names it (get_single_prefill_uri,
  get_batch_prefill_uri, get_batch_decode_uri, get_batch_mla_uri; FA2's batch prefill builds a second, paged-only
  module at its first paged run), registers its JitSpec in `flashinfer.jit.core.jit_spec_registry` and calls
  build_and_load(), once per process (the get_*_module functions are functools.cache'd);
- build_and_load() loads FLASHINFER_JIT_DIR/<name>/<name>.so where it exists, else writes build.ninja and builds:
  a child process in a process group of its own (`sleep`, as ninja's nvcc is one) taking ATTNBENCH_STANDIN_FI_BUILD_S
  seconds (default 0.3), then
  the library, and a line "<name> <pid>" in FLASHINFER_JIT_DIR/builds.log;
- FLASHINFER_JIT_DIR is $FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/<version>/<arch>/cached_ops, read at import
  (the user's home without it).

A module of its own, so the compile and measuring processes import it without pytest."""

from __future__ import annotations

import dataclasses
import functools
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnbench.backends.flashinfer import FlashInferBackend

if TYPE_CHECKING:
    import torch

    from attnbench.backends.base import LibraryCall, Prepared
    from attnbench.core.case import Case

BUILD_S_VAR = "ATTNBENCH_STANDIN_FI_BUILD_S"
VERSION = "0.7.2.post1"
ARCH = "90a"
BUILDS_LOG = "builds.log"
DTYPES = {"torch.float16": "f16", "torch.bfloat16": "bf16", "torch.float8_e4m3fn": "e4m3", "torch.float8_e5m2": "e5m2",
          "torch.int32": "i32"}


def jit_dir() -> Path:
    base = Path(os.environ.get("FLASHINFER_WORKSPACE_BASE", str(Path.home())))
    return base / ".cache" / "flashinfer" / VERSION / ARCH / "cached_ops"


def builds(directory: Path) -> list[tuple[str, int]]:
    """The modules built into `directory` (a FLASHINFER_JIT_DIR), in order, with the process that built each."""
    log = directory / BUILDS_LOG
    lines = log.read_text().split("\n") if log.is_file() else []
    return [(name, int(pid)) for name, pid in (line.split() for line in lines if line)]


class JitSpec:
    """flashinfer/jit/core.py JitSpecNvcc as far as attnbench reads it: name, library path, build_and_load."""

    def __init__(self, name: str, directory: Path) -> None:
        self.name = name
        self.build_dir = directory / name

    def get_library_path(self) -> Path:
        return self.build_dir / f"{self.name}.so"

    @property
    def is_compiled(self) -> bool:
        return self.get_library_path().exists()

    def build_and_load(self) -> JitSpec:
        if not self.is_compiled:
            self.build_dir.mkdir(parents=True, exist_ok=True)
            (self.build_dir / "build.ninja").write_text(f"# {self.name}\n")
            # in a process group of its own, as ninja starts each command
            subprocess.run(["sleep", os.environ.get(BUILD_S_VAR, "0.3")], check=True, process_group=0)
            partial = self.build_dir / f"{self.name}.so.tmp"
            partial.write_text(self.name)
            partial.rename(self.get_library_path())
            with open(self.build_dir.parent / BUILDS_LOG, "a") as log:
                log.write(f"{self.name} {os.getpid()}\n")
        return self


class Registry:
    def __init__(self) -> None:
        self.specs: dict[str, JitSpec] = {}

    def register(self, spec: JitSpec) -> None:
        self.specs.setdefault(spec.name, spec)

    def get_all_specs(self) -> dict[str, JitSpec]:
        return dict(self.specs)


def dtype_name(dtype: Any) -> str:
    return DTYPES[str(dtype)]


def uri(kind: str, q: Any, kv: Any, head_dim_qk: int, head_dim_vo: int, pos_encoding_mode: str = "NONE",
        window_left: int = -1, logits_soft_cap: float | None = None) -> str:
    """The module's name as modules.py spells it (FA2's, with fp16 QK reduction off)."""
    posenc = {"NONE": 0, "ROPE_LLAMA": 1, "ALIBI": 2}[pos_encoding_mode]
    idx = "" if kind == "single_prefill_with_kv_cache" else "dtype_idx_i32_"
    tail = f"use_swa_{window_left >= 0}_use_logits_cap_{bool(logits_soft_cap and logits_soft_cap > 0)}"
    return (f"{kind}_dtype_q_{dtype_name(q)}_dtype_kv_{dtype_name(kv)}_dtype_o_{dtype_name(q)}_{idx}"
            f"head_dim_qk_{head_dim_qk}_head_dim_vo_{head_dim_vo}_posenc_{posenc}_{tail}"
            + ("" if kind == "batch_decode_with_kv_cache" else "_f16qk_False"))


def with_jit(module: types.ModuleType) -> None:
    """Add the JIT to the stand-in `module`: every entry point builds or loads its module first."""
    registry = Registry()
    directory = jit_dir()

    @functools.cache
    def load(name: str) -> JitSpec:
        spec = JitSpec(name, directory)
        registry.register(spec)
        return spec.build_and_load()

    single = module.single_prefill_with_kv_cache

    @functools.wraps(single)
    def single_prefill_with_kv_cache(q, k, v, *args, pos_encoding_mode="NONE", window_left=-1, logits_soft_cap=None,
                                     **kw):  # type: ignore[no-untyped-def]
        load(uri("single_prefill_with_kv_cache", q.dtype, k.dtype, q.shape[-1], v.shape[-1], pos_encoding_mode,
                 window_left, logits_soft_cap))
        return single(q, k, v, *args, pos_encoding_mode=pos_encoding_mode, window_left=window_left,
                      logits_soft_cap=logits_soft_cap, **kw)

    module.single_prefill_with_kv_cache = single_prefill_with_kv_cache
    module.BatchPrefillWithRaggedKVCacheWrapper = planning(module.BatchPrefillWithRaggedKVCacheWrapper, load,
                                                           "batch_prefill_with_kv_cache", 4)
    module.BatchPrefillWithPagedKVCacheWrapper = planning(module.BatchPrefillWithPagedKVCacheWrapper, load,
                                                          "batch_prefill_with_kv_cache", 6, paged=True)
    module.BatchDecodeWithPagedKVCacheWrapper = planning(module.BatchDecodeWithPagedKVCacheWrapper, load,
                                                         "batch_decode_with_kv_cache", 5)
    mla = module.mla.BatchMLAPagedAttentionWrapper
    module.mla.BatchMLAPagedAttentionWrapper = type(mla.__name__, (mla,), {"plan": mla_plan(mla.plan, load)})
    core = types.ModuleType("flashinfer.jit.core")
    core.jit_spec_registry = registry
    env = types.ModuleType("flashinfer.jit.env")
    env.FLASHINFER_JIT_DIR = directory
    env.FLASHINFER_AOT_DIR = directory.parent / "aot-none"
    env.FLASHINFER_CUBIN_DIR = directory.parent / "cubins"
    module.jit = types.SimpleNamespace(core=core, env=env)


def planning(base: type, load: Any, kind: str, head_dim_at: int, paged: bool = False) -> type:
    """`base` whose plan() builds or loads its module first (as a wrapper's plan() does), and, with `paged`, whose
    first run() the paged-only one."""
    def plan(self, *args, q_data_type=None, kv_data_type=None, head_dim_vo=None, **kw):  # type: ignore[no-untyped-def]
        head_dim = args[head_dim_at]
        self.module = uri(kind, q_data_type, kv_data_type or q_data_type, head_dim, head_dim_vo or head_dim,
                          kw.get("pos_encoding_mode", "NONE"), kw.get("window_left", -1), kw.get("logits_soft_cap"))
        load(self.module)
        extra = {} if head_dim_vo is None else {"head_dim_vo": head_dim_vo}
        return base.plan(self, *args, q_data_type=q_data_type, kv_data_type=kv_data_type, **extra, **kw)

    def run(self, *args, **kw):  # type: ignore[no-untyped-def]
        load(f"{self.module}_independent_paged")
        return base.run(self, *args, **kw)

    return type(base.__name__, (base,), {"plan": plan, **({"run": run} if paged else {})})


def mla_plan(base_plan: Any, load: Any) -> Any:
    def plan(self, **kw):  # type: ignore[no-untyped-def]
        load(f"batch_mla_attention_dtype_q_{dtype_name(kw['q_data_type'])}_dtype_kv_{dtype_name(kw['kv_data_type'])}_"
             f"dtype_o_{dtype_name(kw['q_data_type'])}_dtype_idx_i32_head_dim_ckv_{kw['head_dim_ckv']}_"
             f"head_dim_kpe_{kw['head_dim_kpe']}_profiler_False_planabi2")
        return base_plan(self, **kw)

    return plan


def install() -> types.ModuleType:
    """The stand-in as `flashinfer` in this process (once)."""
    found = sys.modules.get("flashinfer")
    if found is not None and hasattr(found, "jit"):
        return found
    from tests.test_flashinfer_standin import make_flashinfer

    module = make_flashinfer([])
    with_jit(module)
    sys.modules.update({"flashinfer": module, "flashinfer.jit.core": module.jit.core,
                        "flashinfer.jit.env": module.jit.env})
    return module


class FlashInferJit(FlashInferBackend):
    """FlashInfer's adapter, unchanged but for the device (the stand-in computes on the CPU) and conformance (the
    stand-in is not the library whose signatures tests/signatures records)."""

    name = "flashinfer-jit"
    capabilities = dataclasses.replace(FlashInferBackend.capabilities, devices=("cpu", "cuda"))

    def library_calls(self) -> tuple[LibraryCall, ...]:
        return ()

    def availability(self, device: str) -> str | None:
        install()
        return super().availability(device)

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scales: Any = None) -> Prepared:
        install()
        return super().prepare(case, q, k, v, scales)


STANDIN = [FlashInferJit]
