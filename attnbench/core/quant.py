"""Quantized inputs: how attnbench quantizes a case's inputs (descale shapes: docs/suites.md "Quantized
inputs"), and the numerics a kernel declares so its accuracy bound can be emulated."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnbench.core.case import DTYPE_BYTES, FP8_DTYPES

if TYPE_CHECKING:
    from collections.abc import Mapping

    import torch

    from attnbench.core.case import Case

FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
assert set(FP8_MAX) == set(FP8_DTYPES)
GRANULARITIES = ("tensor", "head", "block")
EVERY_INPUT = frozenset(f"{kind}:{fmt}" for kind in ("qkv", "kv") for fmt in FP8_DTYPES)


def for_every_input(reason: str) -> dict[str, str]:
    return dict.fromkeys(sorted(EVERY_INPUT), reason)


def q_format(case: Case) -> str | None:
    return case.dtype if case.dtype in FP8_DTYPES else None


def kv_format(case: Case) -> str | None:
    return case.dtype if case.dtype in FP8_DTYPES else case.kv_dtype


def original_dtype(case: Case) -> str:
    return case.unquantized.dtype


def requirement(case: Case) -> tuple[str, ...]:
    """`qkv:<format>` or `kv:<format>`, and `scale:<granularity>`."""
    if not case.quantized:
        return ()
    fmt = q_format(case)
    stored = f"qkv:{fmt}" if fmt else f"kv:{case.kv_dtype}"
    return (stored, f"scale:{case.quant}")


REQUIREMENT_WORDS = {"qkv": "FP8 Q, K and V in {}", "kv": "an FP8 K/V cache in {} under {} queries"}
SCALE_WORDS = {"tensor": "per-tensor", "head": "per-(batch, KV head)", "block": "per-block"}


def requirement_words(item: str, case: Case) -> str:
    kind, _, value = item.partition(":")
    if kind == "scale":
        block = f" ({case.quant_block} tokens)" if value == "block" else ""
        return f"{SCALE_WORDS[value]} descale factors{block}"
    return REQUIREMENT_WORDS[kind].format(value, case.dtype)


def refusal(name: str, takes: frozenset[str], case: Case,
            reasons: Mapping[str, str] | None = None) -> str | None:
    """None, or why the backend is skipped: never run in bf16 instead."""
    missing = [item for item in requirement(case) if item not in takes]
    if not missing:
        return None
    for item in missing:
        if reasons and item in reasons:
            return reasons[item]
    if not any(item.startswith(("qkv:", "kv:")) for item in takes):
        return (f"{name} takes no quantized inputs ({requirement_words(missing[0], case)}); "
                "attnbench never runs an FP8 case in bf16 instead")
    return f"{name} does not take {' with '.join(requirement_words(m, case) for m in missing)}"


def element_bytes(case: Case) -> tuple[int, int, int]:
    original = DTYPE_BYTES[original_dtype(case)]
    return (1 if q_format(case) else original, 1 if kv_format(case) else original, original)


@dataclass(frozen=True)
class Scales:
    """Float32 descale factors; `q` None when the queries stay unquantized."""

    granularity: str
    block: int | None
    group: int
    q: torch.Tensor | None
    k: torch.Tensor
    v: torch.Tensor

    def per_row(self, name: str) -> torch.Tensor:
        return expand(getattr(self, name), self.granularity, self.block, self.group if name == "q" else 1)


def expand(descale: torch.Tensor, granularity: str, block: int | None, group: int) -> torch.Tensor:
    if granularity == "head":
        return descale.repeat_interleave(group, dim=1)
    if granularity == "block":
        return descale.repeat_interleave(int(block or 1), dim=2)
    return descale


@dataclass(frozen=True)
class Quantized:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    scales: Scales


def descale_of(x: torch.Tensor, fmt: str, granularity: str, block: int | None, group: int,
               fixed: float | None) -> torch.Tensor:
    """Granule amax over the format's largest value (a zero granule: 1), or the fixed scale."""
    import torch

    b, h, s, _ = x.shape
    if fixed is not None:
        shape = {"tensor": (1, 1, 1, 1), "head": (b, h // group, 1, 1),
                 "block": (b, h, s // int(block or 1), 1)}
        return torch.full(shape[granularity], float(fixed), dtype=torch.float32, device=x.device)
    a = x.detach().abs().float()
    if granularity == "tensor":
        amax = a.amax().reshape(1, 1, 1, 1)
    elif granularity == "head":
        amax = a.reshape(b, h // group, group * s * x.shape[-1]).amax(-1)[..., None, None]
    else:
        amax = a.reshape(b, h, s // int(block or 1), -1).amax(-1, keepdim=True)
    return torch.where(amax > 0, amax / FP8_MAX[fmt], torch.ones_like(amax)).float()


def quantize(x: torch.Tensor, fmt: str, descale: torch.Tensor) -> torch.Tensor:
    """Saturated, nearest-even (PyTorch's cast)."""
    import torch

    limit = FP8_MAX[fmt]
    return (x.float() / descale).clamp(-limit, limit).to(getattr(torch, fmt))


def dequantize(x: torch.Tensor, per_row: torch.Tensor) -> torch.Tensor:
    """Exact in float64."""
    import torch

    return x.to(torch.float64) * per_row.to(torch.float64)


def quantize_inputs(case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Quantized:
    """With `kv_shared`, V is K's first head_dim_v channels."""
    fmt_q, fmt_kv = q_format(case), kv_format(case)
    assert fmt_kv is not None and case.quant in GRANULARITIES, case.case_id
    gran, block, group, fixed = case.quant, case.quant_block, case.group_size, case.quant_scale

    def one(x: torch.Tensor, fmt: str, g: int) -> tuple[torch.Tensor, torch.Tensor]:
        descale = descale_of(x, fmt, gran, block, g, fixed)
        return quantize(x, fmt, expand(descale, gran, block, g)), descale

    q8, q_descale = (q, None) if fmt_q is None else one(q, fmt_q, group)
    k8, k_descale = one(k, fmt_kv, 1)
    if case.kv_shared:
        v8, v_descale = k8[..., :case.v_dim].clone(), k_descale
    else:
        v8, v_descale = one(v, fmt_kv, 1)
    return Quantized(q8, k8, v8, Scales(gran, block, group, q_descale, k_descale, v_descale))


def dequantized(case: Case, quantized: Quantized) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What the kernel error is measured against."""
    import torch

    s = quantized.scales
    q = quantized.q.to(torch.float64) if s.q is None else dequantize(quantized.q, s.per_row("q"))
    return q, dequantize(quantized.k, s.per_row("k")), dequantize(quantized.v, s.per_row("v"))


def scheme(case: Case) -> dict[str, object]:
    return {"by": "attnbench", "q": q_format(case) or case.dtype, "kv": kv_format(case),
            "granularity": case.quant, "block": case.quant_block,
            "scale": "amax" if case.quant_scale is None else case.quant_scale,
            "rounding": "nearest-even after dividing by the descale factor, saturated"}


@dataclass(frozen=True)
class Numerics:
    """How a kernel computes, for its emulated bound (verify.emulate). `inputs`: "as-given" or "sage-int8"
    (SageAttention's per-block INT8 of Q and mean-subtracted K)."""

    source: str
    out_dtype: str = "bfloat16"
    p_format: str | None = None
    p_scale: float = 1.0
    accumulate: str = "float32"
    pv_block: int | None = None
    v_scale_after: bool = False
    inputs: str = "as-given"

    def describe(self) -> str:
        words = [f"emulation of {self.source}: "]
        words.append({"as-given": "the inputs as given (dequantized)",
                      "sage-int8": "Q and mean-subtracted K quantized to INT8 per "
                                   "block (128 Q / 64 K tokens)"}
                     [self.inputs])
        if self.p_format is not None:
            scale = f" after ×{self.p_scale:g}" if self.p_scale != 1 else ""
            words.append(f", P rounded to {self.p_format}{scale}")
        block = f" per {self.pv_block} keys" if self.pv_block else ""
        words.append(f", {self.accumulate} accumulation{block}, {self.out_dtype} output")
        if self.v_scale_after:
            words.append(" times V's descale (rounded again)")
        return "".join(words)


def plain_numerics(case: Case) -> Numerics:
    """naive-fp8's, and the yardstick of a backend that declares none."""
    return Numerics(source="dequantized inputs in float32 (naive-fp8)", out_dtype=original_dtype(case))

