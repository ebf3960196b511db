"""Peak dense TFLOP/s and memory bandwidth of common accelerators: one table for the runner and the report; and
the shape of a CPU's roofs, which no table holds and each run measures (MeasuredRoofs).

The runner turns them into `percent_of_peak`; the report draws them as roofs. They were written from the
vendors' published datasheet figures (no network was at hand to re-check them; a correction is one line here).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from attnbench.core.case import FP8_DTYPES

# (label, pattern matched against the device name, dense fp16/bf16 tensor TFLOP/s, fp32 TFLOP/s,
#  memory bandwidth GB/s, dense TF32 tensor TFLOP/s). First match wins, so specific names come before
#  their family.
# - Tensor rates are *dense*: the datasheets' headline "with sparsity" figures are halved.
# - fp32 is the plain (non-TF32) CUDA-core rate: attnbench runs fp32 with TF32 off, so TF32 would
#   overstate the roof. None where the datasheet gives no plain fp32 figure we trust.
# - TF32 is the roof of kernels that compute fp32 on tensor cores as 3xTF32 (CUTLASS memory-efficient:
#   sdpa-efficient, xformers' cutlass op), which reach at most a third of it: see FP32_MATH.
# - Bandwidth is the datasheet's memory bandwidth in GB/s (1e9 bytes/s).
# Sources (vendor datasheets / whitepapers, as published):
#   H100 / H100 NVL: NVIDIA H100 Tensor Core GPU datasheet; H200 / H200 NVL: NVIDIA H200 datasheet (2024)
#   GH200: NVIDIA GH200 Grace Hopper Superchip datasheet (GPU as H100 SXM; 96 GB HBM3 at 4.0 TB/s,
#   144 GB HBM3e at 4.9 TB/s)
#   B200: NVIDIA HGX B200 / DGX B200 datasheet (per GPU: 2.25 PFLOP/s dense FP16/BF16, 8 TB/s HBM3e)
#   A100 40/80 GB, SXM/PCIe: NVIDIA A100 Tensor Core GPU datasheet (2021)
#   A10, L4, L40, L40S: their NVIDIA datasheets; V100: NVIDIA V100 datasheet; T4: NVIDIA T4 datasheet
#   RTX 4090 / RTX 3090: NVIDIA Ada / Ampere GA102 whitepapers (fp16 tensor with fp32 accumulate)
#   MI300X: AMD Instinct MI300X datasheet
PEAKS: tuple[tuple[str, str, float | None, float | None, float | None, float | None], ...] = (
    ("H100 PCIe", r"H100.*PCIe", 756.0, 51.0, 2000.0, 378.0),
    ("H100 NVL", r"H100.*NVL", 835.0, 60.0, 3900.0, 417.5),
    ("H100 SXM", r"H100", 989.0, 67.0, 3350.0, 494.5),
    ("GH200 144GB HBM3e", r"GH200.*(144|HBM3e)", 989.0, 67.0, 4900.0, 494.5),
    ("GH200 96GB HBM3", r"GH200", 989.0, 67.0, 4000.0, 494.5),
    ("H200 NVL", r"H200.*NVL", 835.0, 60.0, 4800.0, 417.5),
    ("H200 SXM", r"H200", 989.0, 67.0, 4800.0, 494.5),
    ("B200", r"B200", 2250.0, None, 8000.0, None),
    ("A100 80GB PCIe", r"A100.*(80GB.*PCIe|PCIe.*80GB)", 312.0, 19.5, 1935.0, 156.0),
    ("A100 80GB SXM", r"A100.*80GB", 312.0, 19.5, 2039.0, 156.0),
    ("A100 40GB", r"A100", 312.0, 19.5, 1555.0, 156.0),  # SXM and PCIe alike
    ("A10", r"\bA10\b", 125.0, 31.2, 600.0, 62.5),
    ("L40S", r"L40S", 362.0, 91.6, 864.0, 183.0),
    ("L40", r"\bL40\b", 181.0, 90.5, 864.0, 90.5),
    ("L4", r"\bL4\b", 121.0, 30.3, 300.0, 60.0),
    ("V100 PCIe", r"V100.*PCIe", 112.0, 14.0, 900.0, None),  # fp16 only: no bf16 or TF32 tensor cores
    ("V100 SXM2", r"V100", 125.0, 15.7, 900.0, None),
    ("T4", r"\bT4\b", 65.0, 8.1, 320.0, None),  # fp16 only
    ("RTX 4090", r"RTX 4090", 165.2, 82.6, 1008.0, 82.6),
    ("RTX 3090", r"RTX 3090", 71.0, 35.6, 936.0, 35.6),
    ("MI300X", r"MI300X", 1307.4, 163.4, 5300.0, 653.7),
)
# Dense FP8 tensor TFLOP/s (e4m3 and e5m2 alike) by row label, from the same datasheets (their sparse headline
# halved); rows without FP8 tensor cores (A100, V100, T4, A10, the RTX 3090) have none. An FP8 case (Q, K and V in
# FP8) is judged against it; an FP8 K/V cache under bf16 queries computes in bf16 and keeps the bf16 roof.
FP8_TFLOPS = {"H100 PCIe": 1513.0, "H100 NVL": 1670.5, "H100 SXM": 1979.0, "GH200 144GB HBM3e": 1979.0,
              "GH200 96GB HBM3": 1979.0, "H200 NVL": 1670.5, "H200 SXM": 1979.0, "B200": 4500.0, "L40S": 733.0,
              "L4": 242.5, "MI300X": 2614.9}
# How a kernel computes float32 (Prepared.extra["fp32_math"]), and the share of the TF32 roof it can reach.
FP32_MATH = {"3xTF32": 3.0}
NO_BF16 = (r"V100", r"\bT4\b")
HALF = ("float16", "bfloat16", "fp16", "bf16")
FULL = ("float32", "fp32")


@dataclass(frozen=True)
class Peak:
    """A device's roofs for one dtype, and where each came from (a datasheet row or a command-line option)."""

    tflops: float | None = None
    bandwidth_gbs: float | None = None
    tflops_source: str | None = None
    bandwidth_source: str | None = None

    @property
    def ridge(self) -> float | None:
        """FLOPs per byte where the compute roof meets the bandwidth roof."""
        if self.tflops and self.bandwidth_gbs:
            return self.tflops * 1e12 / (self.bandwidth_gbs * 1e9)
        return None


def _row(device_name: str | None) -> tuple[str, str, float | None, float | None, float | None, float | None] | None:
    if not device_name:
        return None
    for row in PEAKS:
        if re.search(row[1], device_name, flags=re.IGNORECASE):
            return row
    return None


def peak_tflops_for(device_name: str | None, dtype: str) -> float | None:
    """The peak dense TFLOP/s for a device name and dtype, or None when we do not know it."""
    row = _row(device_name)
    if row is None or device_name is None:
        return None
    if dtype in ("bfloat16", "bf16") and any(re.search(p, device_name) for p in NO_BF16):
        return None
    if dtype in FP8_DTYPES:
        return FP8_TFLOPS.get(row[0])
    if dtype in HALF:
        return row[2]
    if dtype in FULL:
        return row[3]
    return None


def peak_bandwidth_for(device_name: str | None) -> float | None:
    """The memory bandwidth (GB/s) for a device name, or None when we do not know it."""
    row = _row(device_name)
    return None if row is None else row[4]


def peak_for(device_name: str | None, dtype: str, tflops: float | None = None,
             bandwidth_gbs: float | None = None, fp32_math: str | None = None) -> Peak:
    """The roofs for a device and dtype: the given overrides where set, else the datasheet table.

    `fp32_math` names how a kernel computes float32 when not on CUDA cores ("3xTF32": tensor cores,
    three TF32 products per fp32 one): its compute roof is then the TF32 rate over that count, a roof
    it can reach, where the plain fp32 rate would put it above 100%. None where TF32 is unknown.
    """
    row = _row(device_name)
    label = f"datasheet: {row[0]}" if row else None
    table_tflops = peak_tflops_for(device_name, dtype)
    tflops_label = label
    if dtype in FULL and fp32_math in FP32_MATH:
        tf32 = row[5] if row else None
        table_tflops = tf32 / FP32_MATH[fp32_math] if tf32 else None
        tflops_label = f"{label} TF32 / {FP32_MATH[fp32_math]:g} (fp32 as {fp32_math} on tensor cores)"
    table_bw = peak_bandwidth_for(device_name)
    return Peak(
        tflops if tflops is not None else table_tflops,
        bandwidth_gbs if bandwidth_gbs is not None else table_bw,
        "--peak-tflops" if tflops is not None else (tflops_label if table_tflops else None),
        "--peak-bandwidth" if bandwidth_gbs is not None else (label if table_bw else None),
    )


@dataclass(frozen=True)
class MatmulRoof:
    """The best rate a dtype's matmul reached on this CPU: the best repetition of any size tried."""

    dtype: str
    gflops: float  # the best repetition's rate: the roof
    size: int  # n of the n×n matmul that reached it
    reps: int  # repetitions timed, every size together
    median_gflops: float  # the median repetition at that size: how far interference pulled the rest down

    @property
    def source(self) -> str:
        return f"{self.gflops:.0f} GFLOP/s {self.dtype} matmul"


@dataclass(frozen=True)
class MeasuredRoofs:
    """A CPU's roofs, measured by the run at its start on its own thread count (attnbench.run.calibration.measure_roofs):
    a matmul per dtype the run's cases compute in, and a copy. env.json's `roofs` holds them (to_dict)."""

    threads: int
    matmul: tuple[MatmulRoof, ...]
    copy_gbs: float
    copy_bytes: int  # the size of the copied buffer
    copy_reps: int
    seconds: float  # the whole measurement's wall time
    method: str  # how, in words

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MeasuredRoofs:
        return cls(**{**data, "matmul": tuple(MatmulRoof(**m) for m in data["matmul"])})

    def matmul_for(self, dtype: str) -> MatmulRoof | None:
        """The roof of a case's dtype; an FP8 case (no FP8 matmul on a CPU) has its originals' bf16 one."""
        want = "bfloat16" if dtype in FP8_DTYPES else dtype
        return next((m for m in self.matmul if m.dtype == want), None)

    def peak(self, dtype: str) -> Peak:
        """The dtype's compute roof and the copy's bandwidth roof, each with its source in words."""
        matmul = self.matmul_for(dtype)
        threads = f"{self.threads} thread{'s' if self.threads != 1 else ''}"
        return Peak(matmul.gflops / 1e3 if matmul else None, self.copy_gbs or None,
                    f"measured roof: {matmul.source}, {threads}" if matmul else None,
                    f"measured roof: {self.copy_gbs:.1f} GB/s copy, {threads}" if self.copy_gbs else None)


def roofs_peak(roofs: MeasuredRoofs | None, dtype: str, tflops: float | None = None,
               bandwidth_gbs: float | None = None) -> Peak:
    """A CPU's roofs for a dtype: the given overrides (--peak-tflops, --peak-bandwidth) where set, else the run's
    measured roofs; no datasheet row describes a CPU."""
    measured = roofs.peak(dtype) if roofs is not None else Peak()
    return Peak(tflops if tflops is not None else measured.tflops,
                bandwidth_gbs if bandwidth_gbs is not None else measured.bandwidth_gbs,
                "--peak-tflops" if tflops is not None else measured.tflops_source,
                "--peak-bandwidth" if bandwidth_gbs is not None else measured.bandwidth_source)


# Memory of the GPUs in the datasheet table (GB), for the run's own rule: a case estimated above twice the
# free memory is skipped without trying it.
GPU_MEMORY_GB = {"H100 PCIe": 80, "H100 NVL": 94, "H100 SXM": 80, "GH200 144GB HBM3e": 144, "GH200 96GB HBM3": 96,
                 "H200 NVL": 141, "H200 SXM": 141, "B200": 180, "A100 80GB PCIe": 80, "A100 80GB SXM": 80,
                 "A100 40GB": 40, "A10": 24, "L40S": 48, "L40": 48, "L4": 24, "V100 PCIe": 16, "V100 SXM2": 16,
                 "T4": 16, "RTX 4090": 24, "RTX 3090": 24, "MI300X": 192}
