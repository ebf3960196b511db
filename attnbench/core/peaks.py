"""Peak dense TFLOP/s and bandwidth of common accelerators, and a CPU's measured roofs."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from typing import Any

from attnbench.core import policy
from attnbench.core.case import FP8_DTYPES

# (label, name pattern, fp16/bf16 TFLOP/s, fp32 (TF32 off), GB/s, TF32), first match wins; dense rates from
# the vendors' datasheets (RTX: Ada/GA102 whitepapers).
PeakRow = tuple[str, str, float | None, float | None, float | None, float | None]
PEAKS: tuple[PeakRow, ...] = (
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
    ("A100 40GB", r"A100", 312.0, 19.5, 1555.0, 156.0),
    ("A10", r"\bA10\b", 125.0, 31.2, 600.0, 62.5),
    ("L40S", r"L40S", 362.0, 91.6, 864.0, 183.0),
    ("L40", r"\bL40\b", 181.0, 90.5, 864.0, 90.5),
    ("L4", r"\bL4\b", 121.0, 30.3, 300.0, 60.0),
    ("V100 PCIe", r"V100.*PCIe", 112.0, 14.0, 900.0, None),  # fp16 only
    ("V100 SXM2", r"V100", 125.0, 15.7, 900.0, None),
    ("T4", r"\bT4\b", 65.0, 8.1, 320.0, None),  # fp16 only
    ("RTX 4090", r"RTX 4090", 165.2, 82.6, 1008.0, 82.6),
    ("RTX 3090", r"RTX 3090", 71.0, 35.6, 936.0, 35.6),
    ("MI300X", r"MI300X", 1307.4, 163.4, 5300.0, 653.7),
)
# dense FP8 TFLOP/s by row label
FP8_TFLOPS = {"H100 PCIe": 1513.0, "H100 NVL": 1670.5, "H100 SXM": 1979.0, "GH200 144GB HBM3e": 1979.0,
              "GH200 96GB HBM3": 1979.0, "H200 NVL": 1670.5, "H200 SXM": 1979.0, "B200": 4500.0,
              "L40S": 733.0, "L4": 242.5, "MI300X": 2614.9}
FP32_MATH = {"3xTF32": 3.0}
NO_BF16 = (r"V100", r"\bT4\b")
HALF = ("float16", "bfloat16", "fp16", "bf16")
FULL = ("float32", "fp32")


@dataclass(frozen=True)
class Peak:
    tflops: float | None = None
    bandwidth_gbs: float | None = None
    tflops_source: str | None = None
    bandwidth_source: str | None = None

    @property
    def ridge(self) -> float | None:
        if self.tflops and self.bandwidth_gbs:
            return self.tflops * 1e12 / (self.bandwidth_gbs * 1e9)
        return None


def _row(device_name: str | None) -> PeakRow | None:
    if not device_name:
        return None
    for row in PEAKS:
        if re.search(row[1], device_name, flags=re.IGNORECASE):
            return row
    return None


def peak_tflops_for(device_name: str | None, dtype: str) -> float | None:
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
    row = _row(device_name)
    return None if row is None else row[4]


def peak_for(device_name: str | None, dtype: str, tflops: float | None = None,
             bandwidth_gbs: float | None = None, fp32_math: str | None = None) -> Peak:
    """`fp32_math` "3xTF32" takes the TF32 rate over 3 as the roof."""
    row = _row(device_name)
    label = f"datasheet: {row[0]}" if row else None
    table_tflops = peak_tflops_for(device_name, dtype)
    tflops_label = label
    if dtype in FULL and fp32_math in FP32_MATH:
        tf32 = row[5] if row else None
        table_tflops = tf32 / FP32_MATH[fp32_math] if tf32 else None
        tflops_label = f"{label} TF32 / {FP32_MATH[fp32_math]:g} (fp32 as {fp32_math} on tensor cores)"
    table_bw = peak_bandwidth_for(device_name)
    tflops_source = tflops_label if table_tflops else None
    bandwidth_source = label if table_bw else None
    if tflops is not None:
        table_tflops, tflops_source = tflops, "--peak-tflops"
    if bandwidth_gbs is not None:
        table_bw, bandwidth_source = bandwidth_gbs, "--peak-bandwidth"
    return Peak(table_tflops, table_bw, tflops_source, bandwidth_source)


def datasheet_ceiling(device_name: str | None, dtype: str) -> Peak:
    """The fastest a kernel on `dtype` may run by the device's datasheet row, never a user's or a measured
    roof: the dtype's dense rate (float32: TF32's where the device has it, as fp32 matmuls may run on TF32
    tensor cores) and the memory bandwidth."""
    row = _row(device_name)
    if row is None:
        return Peak()
    tflops = (row[5] or row[3]) if dtype in FULL else peak_tflops_for(device_name, dtype)
    label = f"datasheet: {row[0]}"
    return Peak(tflops, row[4], label if tflops else None, label if row[4] else None)


def beyond_datasheet(device_name: str | None, dtype: str, tflops: float | None,
                     bandwidth_gbs: float | None) -> dict[str, float]:
    """How many times its datasheet roof each rate reached, for each over the policy's PLAUSIBLE_MARGIN times
    it ({"compute": 34.0, "memory": 6.8}); empty when both are within, or the device has no row."""
    ceiling = datasheet_ceiling(device_name, dtype)
    rates = (("compute", tflops, ceiling.tflops), ("memory", bandwidth_gbs, ceiling.bandwidth_gbs))
    return {kind: rate / roof for kind, rate, roof in rates if rate is not None and roof
            and rate > policy.PLAUSIBLE_MARGIN * roof}


def times_words(low: float, high: float | None = None) -> str:
    """"34×", or a range "24×–54×"."""
    words = f"{low:.2g}×"
    return words if high is None or f"{high:.2g}×" == words else f"{words}–{high:.2g}×"


def beyond_words(device_name: str | None, dtype: str, compute: str | None, memory: str | None,
                 what: str = "the timing is") -> str | None:
    """Why a timing `compute` and `memory` times ("34×") its datasheet's roofs is broken, not fast (None: the
    device has no row)."""
    row = _row(device_name)
    if row is None:
        return None
    ceiling = datasheet_ceiling(device_name, dtype)
    parts = [f"{compute} the {_rate_words(row, dtype)} of the {row[0]} "
             f"({ceiling.tflops:g} TFLOP/s)"] if compute else []
    if memory:
        whose = "its" if compute else f"the {row[0]}'s"
        parts.append(f"{memory} {whose} bandwidth ({ceiling.bandwidth_gbs:g} GB/s)")
    return (f"faster than the GPU can run: {' and '.join(parts)} by its datasheet; no kernel beats a "
            f"datasheet roof by over {policy.PLAUSIBLE_MARGIN:g}×, so {what} broken")


def _rate_words(row: tuple[str, str, float | None, float | None, float | None, float | None],
                dtype: str) -> str:
    if dtype in FP8_DTYPES:
        return "dense FP8 rate"
    if dtype in FULL:
        return "TF32 rate" if row[5] else "float32 rate"
    return f"dense {dtype} rate"


@dataclass(frozen=True)
class MatmulRoof:
    """The best repetition over every size tried."""

    dtype: str
    gflops: float
    size: int
    reps: int
    median_gflops: float  # how far interference pulled the rest down

    @property
    def source(self) -> str:
        return f"{self.gflops:.0f} GFLOP/s {self.dtype} matmul"


@dataclass(frozen=True)
class MeasuredRoofs:
    """Measured at the run's start (run.calibration.measure_roofs)."""

    threads: int
    matmul: tuple[MatmulRoof, ...]
    copy_gbs: float
    copy_bytes: int
    copy_reps: int
    seconds: float
    method: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MeasuredRoofs:
        return cls(**{**data, "matmul": tuple(MatmulRoof(**m) for m in data["matmul"])})

    def matmul_for(self, dtype: str) -> MatmulRoof | None:
        want = "bfloat16" if dtype in FP8_DTYPES else dtype
        return next((m for m in self.matmul if m.dtype == want), None)

    def peak(self, dtype: str) -> Peak:
        matmul = self.matmul_for(dtype)
        threads = f"{self.threads} thread{'s' if self.threads != 1 else ''}"
        return Peak(matmul.gflops / 1e3 if matmul else None, self.copy_gbs or None,
                    f"measured roof: {matmul.source}, {threads}" if matmul else None,
                    f"measured roof: {self.copy_gbs:.1f} GB/s copy, {threads}" if self.copy_gbs else None)


def roofs_peak(roofs: MeasuredRoofs | None, dtype: str, tflops: float | None = None,
               bandwidth_gbs: float | None = None) -> Peak:
    peak = roofs.peak(dtype) if roofs is not None else Peak()
    if tflops is not None:
        peak = replace(peak, tflops=tflops, tflops_source="--peak-tflops")
    if bandwidth_gbs is not None:
        peak = replace(peak, bandwidth_gbs=bandwidth_gbs, bandwidth_source="--peak-bandwidth")
    return peak


# GB: a case estimated above twice the free memory is skipped
GPU_MEMORY_GB = {"H100 PCIe": 80, "H100 NVL": 94, "H100 SXM": 80, "GH200 144GB HBM3e": 144,
                 "GH200 96GB HBM3": 96, "H200 NVL": 141, "H200 SXM": 141, "B200": 180, "A100 80GB PCIe": 80,
                 "A100 80GB SXM": 80, "A100 40GB": 40, "A10": 24, "L40S": 48, "L40": 48, "L4": 24,
                 "V100 PCIe": 16, "V100 SXM2": 16, "T4": 16, "RTX 4090": 24, "RTX 3090": 24, "MI300X": 192}
