"""What must be `ok` on each GPU generation, so that a GPU test cannot pass with nothing run.

A backend listed here for a case may not skip it: `skipped` (its library's refusal included) fails the test.
The lists hold only what the libraries document and a real run has shown:
- every generation: `naive`, `sdpa`, `sdpa-math` (plain PyTorch ops) and `sliding-window` on windowed cases
  (attnbench's own code in PyTorch ops);
- sm80 to sm90 (Ampere, Ada, Hopper): `flex` (PyTorch's own, compiled by Inductor to Triton); fp16/bf16: `sdpa-flash` where SDPA gets no explicit mask (no mask, or
  causal with Sq == Sk): PyTorch's flash kernel takes no attn_mask; `sdpa-efficient` on MHA cases: for GQA it
  refuses, "both fused kernels require query, key and value to have the same num_heads" (H200, torch 2.11);
  `flash-attn` (FlashAttention 2) when installed;
- sm90 (Hopper) only: `sdpa-cudnn` on bf16 MHA self-attention (Sq == Sk) cases, with or without a mask, as the
  H200 run showed; `flash-attn-3` when installed (built for Hopper); `cudnn` (cuDNN's own frontend) when installed,
  on fp16/bf16 cases without workload axes: cuDNN 9.19's support surface documents them on sm90, and SDPA's cuDNN
  path ran them there (not yet this adapter: a skip here is what the next H200 run must show or refute).
Quantized cases (an FP8 dtype or K/V cache): `naive-fp8` everywhere (PyTorch's FP8 casts and float32 math), nothing
else yet: cudnn-fp8, flash-attn-3's FP8, sdpa-fp8 and FlashInfer's FP8 K/V cache have run only against stand-ins.
Not listed (may skip with their library's reason): `flash-attn-4` and `xformers` (their support differs by
release and build: the H200 run's xformers wheel had no CUDA operator for torch 2.11), and anything on
generations not named here (Volta/Turing, Blackwell) until a run there shows what holds.
"""

from __future__ import annotations

from attnbench.core import workload
from attnbench.core.case import Case

EVERYWHERE = ("naive", "sdpa", "sdpa-math")
HALF = ("float16", "bfloat16")


def sdpa_explicit_mask(case: Case) -> bool:
    """Whether attnbench hands SDPA an explicit mask for this case (backends/sdpa.py: mask_arguments)."""
    return workload.has_mask(case) and not (case.causal and case.window is None and case.seq_len == case.kv_seq_len)


def must_be_ok(name: str, case: Case, capability: tuple[int, int]) -> bool:
    """Whether backend `name` must measure `case` (status `ok`) on a GPU of compute capability `capability`."""
    if case.quantized:
        return name == "naive-fp8"
    if name in EVERYWHERE:
        return True
    if name == "sliding-window":
        return case.window is not None
    ampere_to_hopper = (8, 0) <= capability < (10, 0)
    hopper = capability[0] == 9
    half = case.dtype in HALF
    mha = case.kv_heads == case.heads
    if name == "flex":
        return ampere_to_hopper
    if name == "sdpa-flash":
        return ampere_to_hopper and half and not sdpa_explicit_mask(case)
    if name == "sdpa-efficient":
        return ampere_to_hopper and half and mha
    if name == "sdpa-cudnn":
        return hopper and case.dtype == "bfloat16" and mha and case.seq_len == case.kv_seq_len
    if name == "flash-attn":
        return ampere_to_hopper and half
    if name == "flash-attn-3":
        return hopper and half
    if name == "cudnn":
        return hopper and half and not case.workload_axes
    return False
