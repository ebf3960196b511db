"""Peak dense TFLOP/s of common accelerators, so a chart can show how far a kernel is from the roof."""

from __future__ import annotations

import re

# (pattern matched against the device name, peak dense fp16/bf16 tensor TFLOP/s, peak fp32 TFLOP/s).
# Dense rates (the datasheets' headline tensor numbers are "with sparsity": half of them is dense).
# fp32 is the plain (non-TF32) rate: attnbench runs fp32 with TF32 off. First match wins, so
# specific names come before their family. Sources, vendor datasheets:
#   H100/H200: NVIDIA H100 Tensor Core GPU datasheet; NVIDIA H200 Tensor Core GPU datasheet (2024)
#   A100: NVIDIA A100 Tensor Core GPU datasheet (2021); A10, L4, L40, L40S: their NVIDIA datasheets
#   V100: NVIDIA V100 datasheet (SXM2); T4: NVIDIA T4 datasheet; RTX 4090/3090: NVIDIA Ada / Ampere
#   GA102 architecture whitepapers (fp16 tensor with fp32 accumulate); MI300X: AMD Instinct MI300X datasheet.
PEAKS: tuple[tuple[str, float | None, float | None], ...] = (
    (r"H100.*PCIe", 756.0, 51.0),
    (r"H100.*NVL", 835.0, 60.0),
    (r"H100", 989.0, 67.0),  # SXM
    (r"H200.*NVL", 835.0, 60.0),
    (r"H200", 989.0, 67.0),  # SXM, and GH200's GPU
    (r"A100", 312.0, 19.5),
    (r"\bA10\b", 125.0, 31.2),
    (r"L40S", 362.0, 91.6),
    (r"\bL40\b", 181.0, 90.5),
    (r"\bL4\b", 121.0, 30.3),
    (r"V100", 125.0, 15.7),  # fp16 only: no bf16 tensor cores
    (r"\bT4\b", 65.0, 8.1),  # fp16 only
    (r"RTX 4090", 165.2, 82.6),
    (r"RTX 3090", 71.0, 35.6),
    (r"MI300X", 1307.4, 163.4),
)
NO_BF16 = (r"V100", r"\bT4\b")
HALF = ("float16", "bfloat16", "fp16", "bf16")
FULL = ("float32", "fp32")


def peak_tflops_for(device_name: str | None, dtype: str) -> float | None:
    """The peak dense TFLOP/s for a device name and dtype, or None when we do not know it."""
    if not device_name:
        return None
    for pattern, half, full in PEAKS:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            if dtype in ("bfloat16", "bf16") and any(re.search(p, device_name) for p in NO_BF16):
                return None
            if dtype in HALF:
                return half
            if dtype in FULL:
                return full
            return None
    return None
