"""A quantized case's shared data, and each backend's yardstick and accuracy fields (docs/results.md
"Correctness")."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from attnbench.core import quant
from attnbench.verify import check
from attnbench.verify.emulate import emulate, metrics, sage_inputs
from attnbench.verify.inputs import (
    Answer,
    CaseData,
    Inputs,
    blocked_attention,
    make_inputs,
    reference,
)

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case
    from attnbench.core.quant import Numerics, Quantized


class QuantCaseData(CaseData):
    @cached_property
    def originals(self) -> Inputs:
        return make_inputs(self.case.unquantized)

    @cached_property
    def quantized(self) -> Quantized:
        o = self.originals
        return quant.quantize_inputs(self.case, o.q, o.k, o.v)

    @cached_property
    def inputs(self) -> Inputs:
        """`prepare` also gets `scales=`."""
        q = self.quantized
        return Inputs(q.q, q.k, q.v, None)

    @cached_property
    def dequantized(self) -> Inputs:
        return Inputs(*quant.dequantized(self.case, self.quantized), None)

    @cached_property
    def reference(self) -> Answer:
        inputs, rows = self.dequantized, self.rows
        with self._timed():
            return blocked_attention(self.case, inputs, rows, with_grads=False)

    @cached_property
    def original_reference(self) -> Answer:
        inputs, rows = self.originals, self.rows
        with self._timed():
            return reference(self.case.unquantized, inputs, rows)

    @cached_property
    def naive(self) -> Answer:
        """The yardstick of a backend that declares no numerics."""
        return emulation(self, quant.plain_numerics(self.case))

    @cached_property
    def quant_error(self) -> dict[str, float]:
        return metrics(self.reference.out, self.original_reference.out)


def case_data(case: Case) -> CaseData:
    return QuantCaseData(case) if case.quantized else CaseData(case)


def prepare_kwargs(data: CaseData) -> dict[str, Any]:
    return {"scales": data.quantized.scales} if isinstance(data, QuantCaseData) else {}


def emulation(data: CaseData, numerics: Numerics) -> Answer:
    cache: dict[Numerics, Answer] = data.__dict__.setdefault("_emulations", {})
    if numerics not in cache:
        with data._timed():
            cache[numerics] = _emulate(data, numerics)
    return cache[numerics]


def _emulate(data: CaseData, numerics: Numerics) -> Answer:
    case = data.case
    scale = case.head_dim ** -0.5
    if numerics.inputs == "sage-int8":
        q, k, v = sage_inputs(data.inputs.q, data.inputs.k, data.inputs.v, scale)
        return emulate(case, q, k, v, numerics, data.rows, 1.0)
    if isinstance(data, QuantCaseData):
        q, k, v = data.dequantized.q, data.dequantized.k, data.dequantized.v
        v_after = None
        if numerics.v_scale_after:
            assert case.quant == "tensor", "a descale applied to the output is one per tensor"
            v, v_after = data.quantized.v.double(), float(data.quantized.scales.v.flatten()[0])
        return emulate(case, q, k, v, numerics, data.rows, scale, v_after)
    return emulate(case, data.inputs.q, data.inputs.k, data.inputs.v, numerics, data.rows, scale)


@dataclass(frozen=True)
class Yardstick:
    answer: Answer
    floor_dtype: str
    errors: dict[str, float] | None
    numerics: Numerics | None


def yardstick(data: CaseData, backend: Any) -> Yardstick:
    """Naive in the case's dtype, or the emulation of the declared or plain numerics."""
    case = data.case
    numerics = backend.numerics(case)
    if numerics is None and not case.quantized:
        return Yardstick(data.naive, case.dtype, data.naive_errors, None)
    numerics = numerics or quant.plain_numerics(case)
    return Yardstick(emulation(data, numerics), numerics.out_dtype, None, numerics)


def recorded(errors: dict[str, float]) -> dict[str, float | None]:
    """Infinite errors become null: JSON has no infinity."""
    return {name: value if math.isfinite(value) else None for name, value in errors.items()}


def accuracy_extra(data: CaseData, stick: Yardstick, answer: Answer, out: torch.Tensor) -> dict[str, Any]:
    extra: dict[str, Any] = {"kernel_error": recorded(metrics(answer.out, data.reference.out))}
    if isinstance(data, QuantCaseData):
        extra.update(quantized="attnbench", quant_scheme=quant.scheme(data.case),
                     quant_error=data.quant_error,
                     error_vs_original=recorded(metrics(answer.out, data.original_reference.out)))
    if stick.numerics is not None:
        extra.update(bound_source=stick.numerics.describe(), out_dtype=str(out.dtype).removeprefix("torch."))
    elif stick.errors is not None:
        relative = check.relative(stick.errors["out"], data.reference.out)
        extra.update(naive_relative_error=relative,
                     dtype_limited=relative is None or relative > check.DTYPE_LIMITED,
                     reference_scale=float(data.reference.out.abs().max()))
    params = (data.originals if isinstance(data, QuantCaseData) else data.inputs).params
    if params:
        extra["inputs_params"] = params
    return extra
