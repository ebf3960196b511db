"""Each library's kernels by their profiler names, once, composed into backends' `kernel_names`. Regular expressions
(attnbench.timing.profile.matches) naming no word another library's names carry: a templated name spells its
template arguments (`cutlass::bfloat16_t`), so never a bare `gemm`, `xmma` or `triton_tem_`. Sources:
docs/backends.md#which-kernel-ran.
"""

from __future__ import annotations

# ATen ops on a CPU (native_functions.yaml).
ATEN_CPU_FLASH = (r"^aten::_scaled_dot_product_flash_attention_for_cpu",)
ATEN_CPU_MATMUL_SOFTMAX = (r"^aten::bmm$", r"^aten::_softmax", r"^aten::_softmax_backward_data$")

# FlashAttention 2 (csrc/flash_attn/src; PyTorch's copy too); the word boundary keeps FA4's
# `cuteflash_fwd_...` out.
FLASH_ATTENTION_2 = (r"\bflash_fwd_\w*kernel\b", r"\bflash_bwd_\w*kernel\b")
# FlashAttention 3 (hopper/flash_*_kernel*.h).
FLASH_ATTENTION_3 = (r"\bFlashAttn(Fwd|Bwd)\w*",)
# FlashAttention 4 (flash_attn/cute), inside CuTe DSL's mangled names: no word boundary.
FLASH_ATTENTION_4 = (r"FlashAttention(Forward|Backward)",)
# PyTorch's and xformers' CUTLASS memory-efficient attention (mem_eff_attention/kernels).
CUTLASS_FMHA = (r"\bfmha_cutlass[FB]_",)
CUDNN_SDPA = (r"\bcudnn_generated_fort_native_sdpa",)
# JAX's cuDNN custom call (jax/_src/cudnn/fused_attention_stablehlo.py), as jax_attention labels it.
JAX_CUDNN_FMHA = (r"\(__cudnn\$fmha\w*\)$",)
# FlashInfer (include/flashinfer/attention/prefill.cuh, decode.cuh).
FLASHINFER = (r"PrefillWith\w*KVCache", r"DecodeWith\w*KVCache")
# FlexAttention's Triton templates (torch/_inductor/kernel/flex/).
FLEX_TRITON = (r"^triton_tem_fused_\w*flex_attention",)
# Flex on a CPU: Inductor's C++ inside "## Call CompiledFxGraph <key> ##" (torch/_inductor/output_code.py).
FLEX_CPU = (r"^## Call CompiledFxGraph",)
# SageAttention 1.0.6 (attn_qk_int8_per_block*.py, quant_per_block*.py).
SAGE = (r"^_attn_fwd$", r"^quant_per_block_int8_kernel$")
# cuBLAS's GEMMs: nvjet, xmma, per-architecture, embedded CUTLASS (one identifier), small-matrix kernels.
CUBLAS_GEMM = (r"\bnvjet_\w+", r"\bsm\d+_xmma_gemm_", r"\b(volta|turing|ampere)_\w*gemm",
               r"\bcutlass_\d+_\w*gemm", r"\bgemmSN_[NT]{2}_kernel", r"\bgemv2[NT]_kernel")
# PyTorch's CUDA softmax (aten/src/ATen/native/cuda/SoftMax.cu, PersistentSoftmax.cuh).
ATEN_CUDA_SOFTMAX = (r"\bcunn_SoftMax(Forward|Backward)", r"\bsoftmax_warp_(forward|backward)")


def per_device(cpu: tuple[str, ...] = (), cuda: tuple[str, ...] = ()) -> dict[str, tuple[str, ...]]:
    """A backend's `kernel_names` from its libraries per device."""
    return {device: tuple(dict.fromkeys(names)) for device, names in (("cpu", cpu), ("cuda", cuda)) if names}


# A composite's matmuls and softmax (naive, SDPA's MATH, sliding-window, naive-fp8).
MATMUL_SOFTMAX = per_device(cpu=ATEN_CPU_MATMUL_SOFTMAX, cuda=CUBLAS_GEMM + ATEN_CUDA_SOFTMAX)
