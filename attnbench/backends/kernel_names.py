"""Each library's own kernels, by the names a profiler reports: declared once here, and composed into each backend's
`kernel_names` (what its call may run), so a library shared by several backends (FlashAttention 2 under sdpa-flash,
flash-attn, sdpa-varlen and xformers) has one set of patterns.

Patterns are regular expressions searched in a profiled kernel's name (attnbench.timing.profile.matches). Each names
the library's own kernels, never a word another library's names also carry: a templated kernel's demangled name
spells its template arguments (FlashAttention's `cutlass::bfloat16_t`, a CUTLASS `cutlass::gemm::...` collective), so
a bare `gemm`, `xmma` or `cutlass.*tensorop` would take any of them for cuBLAS's, and `triton_tem_` any Inductor
template (a compiled matmul's `triton_tem_fused_mm_0`) for flex's. docs/backends.md ("Which kernel ran") cites each
source; the CUDA names are read from the libraries' sources, and `scripts/check_kernel_names.py` holds them against a
GPU run's profiles.
"""

from __future__ import annotations

# ---- PyTorch on a CPU: ATen ops (aten/src/ATen/native/native_functions.yaml) -------------------------------------
# SDPA's fused CPU flash kernel, forward and backward (`..._for_cpu_backward`).
ATEN_CPU_FLASH = (r"^aten::_scaled_dot_product_flash_attention_for_cpu",)
# A composite's matmuls and softmax (naive, SDPA's MATH, the sliding window): the scale, the mask and copies are the
# rest of its call.
ATEN_CPU_MATMUL_SOFTMAX = (r"^aten::bmm$", r"^aten::_softmax", r"^aten::_softmax_backward_data$")

# ---- CUDA libraries ----------------------------------------------------------------------------------------------
# FlashAttention 2 (csrc/flash_attn/src/flash_fwd_kernel.h, flash_bwd_kernel.h; PyTorch's copy in
# aten/src/ATen/native/transformers/cuda/flash_attn, namespace pytorch_flash): flash_fwd_kernel,
# flash_fwd_splitkv_kernel, flash_fwd_splitkv_combine_kernel, flash_bwd_dot_do_o_kernel,
# flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel, flash_bwd_convert_dq_kernel. The leading word boundary keeps FA4's
# CuTe DSL names (`...cuteflash_fwd_sm90FlashAttentionForwardSm90...`) out.
FLASH_ATTENTION_2 = (r"\bflash_fwd_\w*kernel\b", r"\bflash_bwd_\w*kernel\b")
# FlashAttention 3 (hopper/flash_fwd_kernel_sm90.h, flash_fwd_combine_kernel.h, flash_bwd_kernel_sm90.h,
# flash_bwd_preprocess_kernel.h, flash_bwd_postprocess_kernel.h): flash::FlashAttnFwdSm90, FlashAttnFwdCombine,
# FlashAttnBwdSm90, FlashAttnBwdPreprocess, FlashAttnBwdPostprocessConvertdQ (and their Sm80 builds).
FLASH_ATTENTION_3 = (r"\bFlashAttn(Fwd|Bwd)\w*",)
# FlashAttention 4 (flash_attn/cute): FlashAttentionForwardSm90/Sm100, FlashAttentionBackwardSm90/Sm100 and their
# pre/postprocess, inside the CuTe DSL's mangled kernel names (no word boundary there).
FLASH_ATTENTION_4 = (r"FlashAttention(Forward|Backward)",)
# PyTorch's memory-efficient attention, xformers' CUTLASS kernels (mem_eff_attention/kernels, xformers/csrc/attention/
# cuda/fmha): fmha_cutlassF_bf16_aligned_64x64_rf_sm80, fmha_cutlassB_...
CUTLASS_FMHA = (r"\bfmha_cutlass[FB]_",)
# cuDNN's SDPA engines (cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_...).
CUDNN_SDPA = (r"\bcudnn_generated_fort_native_sdpa",)
# JAX's cuDNN fused attention: its custom call's target (jax/_src/cudnn/fused_attention_stablehlo.py: __cudnn$fmha
# Softmax, __cudnn$fmhaScaleMaskSoftmax, ..., __cudnn$fmhaSoftmaxBackward), as attnbench.backends.jax_attention
# labels each HLO op JAX's profiler times: "custom-call.7 (__cudnn$fmhaSoftmax)".
JAX_CUDNN_FMHA = (r"\(__cudnn\$fmha\w*\)$",)
# FlashInfer (include/flashinfer/attention/prefill.cuh, decode.cuh): SinglePrefillWithKVCacheKernel,
# BatchPrefillWithPagedKVCacheKernel, BatchDecodeWithPagedKVCacheKernel...
FLASHINFER = (r"PrefillWith\w*KVCache", r"DecodeWith\w*KVCache")
# FlexAttention's Triton templates (torch/_inductor/kernel/flex/: templates flex_attention, flex_attention_backward,
# flex_decoding), named by Inductor after the higher-order op: triton_tem_fused_flex_attention_0,
# triton_tem_fused_flex_attention_backward_2 (ops fused into the template join the name in sorted order).
FLEX_TRITON = (r"^triton_tem_fused_\w*flex_attention",)
# FlexAttention on a CPU: Inductor's C++ runs inside the record_function "## Call CompiledFxGraph <key> ##"
# (torch/_inductor/output_code.py); flex is the one backend whose timed call is a compiled graph.
FLEX_CPU = (r"^## Call CompiledFxGraph",)
# SageAttention 1.0.6, Triton only (attn_qk_int8_per_block*.py: _attn_fwd; quant_per_block*.py:
# quant_per_block_int8_kernel, its own INT8 quantization of Q and K inside the call).
SAGE = (r"^_attn_fwd$", r"^quant_per_block_int8_kernel$")
# cuBLAS's GEMMs, which a composite's matmuls run on: cuBLASLt's Hopper kernels (nvjet_tst_..., nvjet_hsh_...), its
# xmma kernels (sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_..._cublas), the per-architecture names (ampere_sgemm_...,
# ampere_bf16_s16816gemm_...), the CUTLASS kernels it embeds (cutlass_80_tensorop_bf16_s16816gemm_..., one
# identifier, never a `cutlass::` template argument) and its small-matrix kernels (gemmSN_TN_kernel, gemv2T_kernel).
CUBLAS_GEMM = (r"\bnvjet_\w+", r"\bsm\d+_xmma_gemm_", r"\b(volta|turing|ampere)_\w*gemm", r"\bcutlass_\d+_\w*gemm",
               r"\bgemmSN_[NT]{2}_kernel", r"\bgemv2[NT]_kernel")
# PyTorch's CUDA softmax (aten/src/ATen/native/cuda/SoftMax.cu: cunn_SoftMaxForward, cunn_SoftMaxForwardSmem,
# cunn_SoftMaxBackward; PersistentSoftmax.cuh: softmax_warp_forward, softmax_warp_backward).
ATEN_CUDA_SOFTMAX = (r"\bcunn_SoftMax(Forward|Backward)", r"\bsoftmax_warp_(forward|backward)")


def per_device(cpu: tuple[str, ...] = (), cuda: tuple[str, ...] = ()) -> dict[str, tuple[str, ...]]:
    """A backend's `kernel_names` from the libraries it runs on each device (a device it never runs on left out)."""
    return {device: tuple(dict.fromkeys(names)) for device, names in (("cpu", cpu), ("cuda", cuda)) if names}


# The matmuls and softmax a composite runs (naive, SDPA's MATH, the sliding window, naive-fp8's float32 attention).
MATMUL_SOFTMAX = per_device(cpu=ATEN_CPU_MATMUL_SOFTMAX, cuda=CUBLAS_GEMM + ATEN_CUDA_SOFTMAX)
