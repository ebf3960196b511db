"""A backend's facts as data: the case fields it refuses and its answers to `deterministic: true`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from attnbench.records.parts import Determinism
from attnbench.verify.determinism import CUBLAS_DETERMINISTIC, CUBLAS_VARIABLE

if TYPE_CHECKING:
    from attnbench.core.case import Case

HONOURED, NOT_APPLICABLE, REFUSED = Determinism.HONOURED, Determinism.NOT_APPLICABLE, Determinism.REFUSED


@dataclass(frozen=True)
class Answer:
    """One answer to `deterministic: true`; `cublas`: the sentence names the cuBLAS workspace in force."""

    kind: Determinism
    reason: str
    cublas: bool = False

    def sentence(self) -> str:
        """As records store it: "honoured (why)", "not applicable (why)" or "refused: why"."""
        reason = self.reason
        if self.cublas:
            reason += (", cuBLAS with "
                       f"{CUBLAS_VARIABLE}={os.environ.get(CUBLAS_VARIABLE, CUBLAS_DETERMINISTIC)}")
        if self.kind is Determinism.REFUSED:
            return f"{self.kind}: {reason}"
        return f"{self.kind} ({reason})"


@dataclass(frozen=True, kw_only=True)
class Answers:
    """A backend's answers: `on` a device, else `backward` for a backward, else `forward`."""

    forward: Answer
    backward: Answer | None = None
    on: Mapping[str, Answer] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "on", MappingProxyType(dict(self.on)))

    def of(self, case: Case) -> Answer:
        if case.device in self.on:
            return self.on[case.device]
        if case.needs_grad and self.backward is not None:
            return self.backward
        return self.forward


def always(kind: Determinism, reason: str) -> Answers:
    return Answers(forward=Answer(kind, reason))


def forward_backward(forward: Answer, backward: Answer) -> Answers:
    return Answers(forward=forward, backward=backward)


def on_cpu(what: str) -> dict[str, Answer]:
    """PyTorch's operations on a CPU: no atomics."""
    return {"cpu": Answer(Determinism.NOT_APPLICABLE, f"{what} on a CPU: no atomics")}


def torch_ops(what: str) -> Answers:
    """PyTorch's own operations: no atomics on a CPU,
    the deterministic mode and cuBLAS's workspace on CUDA."""
    return Answers(forward=Answer(Determinism.HONOURED,
                                  f"{what} under torch.use_deterministic_algorithms(True)", cublas=True),
                   on=on_cpu(what))


UNSET = (None, False)


@dataclass(frozen=True, kw_only=True)
class Limit:
    """A case field's limit: `reason` ({dtype}, {head_dim} filled in) where the value is off `allowed`, in
    `refused`, above `at_most` or off `multiple_of`; only where field `when` is set, on device `on`."""

    field: str
    reason: str
    allowed: tuple[object, ...] | None = None
    refused: tuple[object, ...] = ()
    at_most: int | None = None
    multiple_of: int | None = None
    when: str | None = None
    on: str | None = None

    def refusal(self, case: Case) -> str | None:
        if self.on is not None and case.device != self.on:
            return None
        if self.when is not None and _is_unset(getattr(case, self.when)):
            return None
        value = getattr(case, self.field)
        off = ((self.allowed is not None and not _among(value, self.allowed)) or _among(value, self.refused)
               or (self.at_most is not None and value > self.at_most)
               or (self.multiple_of is not None and value % self.multiple_of != 0))
        if not off:
            return None
        return self.reason.format(dtype=case.dtype, head_dim=case.head_dim)


def _among(value: object, values: tuple[object, ...]) -> bool:
    """0 is not False."""
    return any(value is v if v is None or isinstance(v, bool) else value == v for v in values)


def _is_unset(value: object) -> bool:
    return _among(value, UNSET)


def unset(name: str, reason: str, when: str | None = None) -> Limit:
    """`name` must be None or False (softcap, window, alibi, head_dim_v, page_size, a backward)."""
    return Limit(field=name, reason=reason, allowed=UNSET, when=when)


def forward_only(reason: str, when: str | None = None) -> Limit:
    return Limit(field="needs_grad", reason=reason, allowed=(False,), when=when)
