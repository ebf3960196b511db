"""attnbench.backends.kernel_names: every backend declares its kernels, each library's names claim its own kernels
and no other library's, and each pattern is declared once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from attnbench.backends import kernel_names
from attnbench.backends.base import Backend, Capabilities
from attnbench.backends.registry import Registry, builtin_modules, default_registry
from attnbench.timing.profile import matches

MODES = ("fwd", "bwd", "fwd_bwd")
BACKENDS = Path(__file__).resolve().parents[1] / "attnbench" / "backends"

# Kernel names as the profiler spells them, each library's own, from the libraries' sources (kernel_names cites
# each): a templated kernel's demangled name carries its template arguments, `cutlass::` and `gemm` words included.
FA2_FWD = ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
           "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, "
           "false, true, true, false, false>(pytorch_flash::Flash_fwd_params)")
FA2_BWD = ("void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, "
           "2, false, false, cutlass::half_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::half_t> >, false, true, "
           "false, false, false, false, false, false>(flash::Flash_bwd_params)")
FA3_FWD = ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::"
           "CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<128>, "
           "cute::C<128>, cute::C<128> >, 128, cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, false>, "
           "cutlass::gemm::collective::KernelTmaWarpSpecializedCooperative> > >(flash::FlashAttnFwdSm90::Params)")
FA4_FWD = "kernel_cutlass_kernel_flash_attncuteflash_fwd_sm90FlashAttentionForwardSm90_object_at__tensorptrbf16gmem"
MEM_EFF = ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
           "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)")
CUDNN = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_kernel0_0"
XMMA = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
NVJET = "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT"
CUTLASS_GEMM = ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>("
                "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8::Params)")
SOFTMAX = ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::"
           "(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)")
FLEX_FWD, FLEX_BWD = "triton_tem_fused_flex_attention_0", "triton_tem_fused_flex_attention_backward_2"
INDUCTOR_MM = "triton_tem_fused_mm_0"  # a compiled matmul's template: Inductor's, not flex's
JAX_FMHA = "custom-call.7 (__cudnn$fmhaSoftmax)"
SAGE_ATTN = "_attn_fwd"

# Which backends claim each name on CUDA (forward): the library's own backends, no one else's.
CLAIMED_BY = {
    FA2_FWD: {"flash-attn", "sdpa-flash", "sdpa-varlen", "xformers", "sdpa"},
    FA2_BWD: {"flash-attn", "sdpa-flash", "sdpa-varlen", "xformers", "sdpa"},
    FA3_FWD: {"flash-attn-3", "sdpa-flash-fa3", "sdpa-fp8", "xformers", "sdpa"},
    FA4_FWD: {"flash-attn-4", "sdpa-flash-fa4"},
    MEM_EFF: {"sdpa-efficient", "xformers", "sdpa"},
    CUDNN: {"cudnn", "cudnn-fp8", "sdpa-cudnn", "sdpa"},
    XMMA: {"naive", "naive-fp8", "sdpa-math", "sliding-window", "sdpa"},
    NVJET: {"naive", "naive-fp8", "sdpa-math", "sliding-window", "sdpa"},
    CUTLASS_GEMM: {"naive", "naive-fp8", "sdpa-math", "sliding-window", "sdpa"},
    SOFTMAX: {"naive", "naive-fp8", "sdpa-math", "sliding-window", "sdpa"},
    FLEX_FWD: {"flex", "flex-dynamic"},
    FLEX_BWD: {"flex", "flex-dynamic"},
    INDUCTOR_MM: set(),
    JAX_FMHA: {"jax-cudnn"},
    SAGE_ATTN: {"sage"},
}


def undeclared(registry: Registry) -> list[str]:
    """Each (backend, device, mode) a backend runs on with no kernel name declared."""
    missing = []
    for name in registry.names():
        backend = registry.get(name)
        caps = backend.capabilities
        missing += [f"{name} {device}:{mode}" for device in caps.devices for mode in MODES
                    if not caps.attention_kernels(device, mode)]
    return missing


def shipped() -> Registry:
    """The built-in backends alone: a plugin another test loaded into the registry is its author's to declare."""
    registry, builtins, found = default_registry(), set(builtin_modules()), Registry()
    for name in registry.names():
        cls = type(registry.get(name))
        if cls.__module__ in builtins:
            found.register(cls)
    return found


def test_every_backend_declares_its_kernels_on_every_device_it_runs_on() -> None:
    registry = shipped()
    assert len(registry.names()) >= 28 and undeclared(registry) == []


def test_a_backend_that_declares_no_kernels_is_named() -> None:
    class Silent(Backend):
        name = "silent"

    class OnlyCpu(Backend):
        name = "only-cpu"
        capabilities = Capabilities(kernel_names=kernel_names.per_device(cpu=kernel_names.ATEN_CPU_FLASH))

    registry = Registry()
    registry.register(Silent)
    registry.register(OnlyCpu)
    assert undeclared(registry) == [f"silent {d}:{m}" for d in ("cpu", "cuda") for m in MODES] + [
        f"only-cpu cuda:{m}" for m in MODES]


@pytest.mark.parametrize("name", sorted(CLAIMED_BY), ids=lambda n: n[:40])
def test_each_library_claims_its_own_kernels_and_no_other_librarys(name: str) -> None:
    registry = shipped()
    caps = {b: registry.get(b).capabilities for b in registry.names()}
    claimed = {b for b, c in caps.items() if "cuda" in c.devices and matches(name, c.attention_kernels("cuda", "fwd"))}
    assert claimed == CLAIMED_BY[name]


def test_the_math_paths_names_are_cublas_and_softmax_never_a_gemm_word_in_a_template() -> None:
    # A fused kernel's template arguments spell `cutlass::gemm::...` and `cutlass::arch::...`: no longer the math
    # path's (the bare `gemm`, `xmma` and `cutlass.*tensorop` patterns took FA3's kernel for naive's).
    math = kernel_names.MATMUL_SOFTMAX["cuda"]
    assert "cutlass::gemm" in FA3_FWD and not matches(FA3_FWD, math)
    for pattern in ("gemm", "xmma", "cutlass.*tensorop"):
        assert pattern not in math and matches(FA3_FWD, (pattern,)) == (pattern == "gemm")


def test_each_pattern_is_declared_once() -> None:
    """A library's patterns live in kernel_names.py alone; every other backend module composes them."""
    tables = {n: v for n, v in vars(kernel_names).items() if n.isupper() and isinstance(v, tuple)}
    patterns = {p for names in tables.values() for p in names}
    assert {r"\bflash_fwd_\w*kernel\b", r"^triton_tem_fused_\w*flex_attention"} <= patterns
    for module in sorted(BACKENDS.glob("*.py")):
        if module.name == "kernel_names.py":
            continue
        text = module.read_text()
        repeated = [p for p in patterns if f'r"{p}"' in text]
        assert repeated == [], module.name
        assert not re.search(r"r\"(flash_fwd|flash_bwd|triton_tem|fmha_cutlass|cudnn_generated)", text), module.name


def test_a_modes_own_patterns_serve_that_mode_and_the_devices_serve_the_others() -> None:
    """A plugin whose backward runs other kernels declares them under "cuda:bwd"; its forward keeps "cuda"'s."""
    caps = Capabilities(kernel_names={"cuda": ("flash_fwd",), "cuda:bwd": ("flash_bwd",)})
    assert caps.attention_kernels("cuda", "bwd") == ("flash_bwd",)
    assert caps.attention_kernels("cuda", "fwd") == caps.attention_kernels("cuda", "fwd_bwd") == ("flash_fwd",)
    assert caps.attention_kernels("cpu", "bwd") == ()
