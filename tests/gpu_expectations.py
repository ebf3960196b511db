"""What must be `ok` on each GPU generation, so that a GPU test cannot pass with nothing run.

A backend listed here for a case may not skip it: `skipped` (its library's refusal included) fails the test.
The lists hold only what the libraries document and a real run has shown:
- every generation: `naive`, `sdpa`, `sdpa-math` (plain PyTorch ops) and `sliding-window` on windowed cases
  (attnbench's own code in PyTorch ops);
- sm80 to sm90 (Ampere, Ada, Hopper): `flex` (PyTorch's own, compiled by Inductor to Triton); fp16/bf16:
  `sdpa-flash` where SDPA gets no explicit mask (no mask, or causal with Sq == Sk): PyTorch's flash kernel takes no
  attn_mask; `sdpa-efficient` on MHA cases: for GQA it refuses, "both fused kernels require query, key and value to
  have the same num_heads" (H200, torch 2.11);
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

from collections.abc import Callable

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
    rule = BY_GENERATION.get(name)
    return rule is not None and rule(case, capability)


def _ampere_to_hopper(capability: tuple[int, int]) -> bool:
    return (8, 0) <= capability < (10, 0)


def _hopper(capability: tuple[int, int]) -> bool:
    return capability[0] == 9


def _mha(case: Case) -> bool:
    return case.kv_heads == case.heads


# The backends that must be `ok` on some generations only: whether on this case at this compute capability.
BY_GENERATION: dict[str, Callable[[Case, tuple[int, int]], bool]] = {
    "flex": lambda c, cap: _ampere_to_hopper(cap),
    "sdpa-flash": lambda c, cap: _ampere_to_hopper(cap) and c.dtype in HALF and not sdpa_explicit_mask(c),
    "sdpa-efficient": lambda c, cap: _ampere_to_hopper(cap) and c.dtype in HALF and _mha(c),
    "sdpa-cudnn": lambda c, cap: _hopper(cap) and c.dtype == "bfloat16" and _mha(c) and c.seq_len == c.kv_seq_len,
    "flash-attn": lambda c, cap: _ampere_to_hopper(cap) and c.dtype in HALF,
    "flash-attn-3": lambda c, cap: _hopper(cap) and c.dtype in HALF,
    "cudnn": lambda c, cap: _hopper(cap) and c.dtype in HALF and not c.workload_axes,
}
