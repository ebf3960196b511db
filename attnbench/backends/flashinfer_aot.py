"""The FlashInfer JIT modules a case loads on a GPU arch, as its runtime picks them (prefill.py, decode.py:
determine_attention_backend, get_*_module), so they can be built ahead without a GPU (docs/docker.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from attnbench.backends.flashinfer import route

if TYPE_CHECKING:
    from attnbench.core.case import Case

ALIBI, NO_POSENC = 2, 0  # flashinfer.utils.PosEncodingMode


class ModuleArgs(NamedTuple):
    """One `flashinfer.jit.attention.modules` generator and its arguments."""

    gen: str
    args: tuple[Any, ...]


def arch_major(arch: str) -> int:
    """"9.0a" → 9; bad input raises ValueError."""
    major, _, minor = arch.partition(".")
    if not major.isdigit() or not minor[:1].isdigit():
        raise ValueError(f"{arch!r} is not a CUDA arch like 9.0a")
    return int(major)


def prefill_backend(case: Case, arch: str) -> str:
    """determine_attention_backend's answer on `arch` (torch's CUDA >= 12.3 assumed)."""
    from flashinfer.utils import is_fa3_backend_supported, is_fa3_prefill_head_dim_supported

    q, kv = _dtypes(case)
    fa3 = (arch_major(arch) == 9 and is_fa3_backend_supported(_posenc(case), False, False, q, kv)
           and is_fa3_prefill_head_dim_supported(case.head_dim, case.v_dim))
    return "fa3" if fa3 else "fa2"


def module_args(case: Case, arch: str) -> tuple[list[ModuleArgs], str | None]:
    """The modules `case`'s call builds on `arch`, or a reason they are not mapped."""
    import torch

    how = route(case)
    q, kv = _dtypes(case)
    flags = (_posenc(case), case.window is not None, bool(case.softcap))
    if how == "mla":
        return [], "FlashInfer's MLA wrapper picks among seven backends at plan(): not mapped ahead"
    if how == "decode":  # use_tensor_cores=False: the CUDA-core decode module
        return [ModuleArgs("gen_batch_decode_module", (q, kv, q, torch.int32, case.head_dim, case.head_dim,
                                                       *flags))], None
    backend = prefill_backend(case, arch)
    if how == "ragged" and backend == "fa2" and arch_major(arch) >= 10:
        return [], ("FlashInfer's ragged prefill on SM100 may take cuDNN or CUTLASS "
                    "at plan(): not mapped ahead")
    dims = (case.head_dim, case.v_dim, *flags, False)
    if how == "single":
        return [ModuleArgs("gen_single_prefill_module", (backend, q, kv, q, *dims))], None
    gen = "gen_batch_prefill_module" if backend == "fa3" else "_gen_batch_prefill_primary_module"
    return [ModuleArgs(gen, (backend, q, kv, q, torch.int32, *dims))], None


def spec(module: ModuleArgs) -> Any:
    """The JitSpec (its `name` is the cache folder under FlashInfer's cached_ops)."""
    from flashinfer.jit.attention import modules

    return getattr(modules, module.gen)(*module.args)


def uri(module: ModuleArgs) -> str:
    """The module's name without generating its sources."""
    from flashinfer.jit.attention import modules

    if module.gen == "gen_batch_decode_module":
        return modules.get_batch_decode_uri(*module.args)
    if module.gen == "gen_single_prefill_module":
        return modules.get_single_prefill_uri(*module.args)
    base = modules.get_batch_prefill_uri(*module.args)
    return base if module.gen == "gen_batch_prefill_module" else base + "_kv_stride_equal"


def _dtypes(case: Case) -> tuple[Any, Any]:
    import torch

    return getattr(torch, case.dtype), getattr(torch, case.kv_dtype or case.dtype)


def _posenc(case: Case) -> int:
    return ALIBI if case.alibi else NO_POSENC
