"""The `inputs:` axis' seeded transforms of the randn draws (docs/conventions.md "Input distributions")."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from attnbench.core import axes

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case

STREAM = 7  # seed stream of a transform's choices
OUTLIER_EVERY, OUTLIER_FACTOR = 16, 16.0
SINK_SHIFT, SINK_LOGIT = 2.0, 10.0
LARGE_QK = 32768.0  # half of float16's max
KEY_MEAN = 8.0
NEAR_SPREAD = 1e-3
DENORMAL_DIVISOR = 16.0

Tensors = tuple["torch.Tensor", "torch.Tensor", "torch.Tensor | None"]


def _choices(case: Case) -> torch.Generator:
    import torch

    return torch.Generator().manual_seed(case.seed + STREAM)


def _unit(case: Case, gen: torch.Generator, device: Any) -> torch.Tensor:
    import torch

    u = torch.randn(case.head_dim, generator=gen)
    return (u / u.norm()).to(device)


def outliers(case: Case, q: torch.Tensor, k: torch.Tensor,
             v: torch.Tensor | None) -> tuple[Tensors, dict[str, Any]]:
    import torch

    count = max(1, case.head_dim // OUTLIER_EVERY)
    channels = torch.randperm(case.head_dim, generator=_choices(case))[:count].sort().values
    k = k.clone()
    k[..., channels.to(k.device)] *= OUTLIER_FACTOR
    return (q, k, v), {"channels": [int(c) for c in channels], "factor": OUTLIER_FACTOR, "tensor": "k"}


def sink(case: Case, q: torch.Tensor, k: torch.Tensor,
         v: torch.Tensor | None) -> tuple[Tensors, dict[str, Any]]:
    u = _unit(case, _choices(case), q.device)
    q = q + SINK_SHIFT * u
    k = k.clone()
    k[..., 0, :] = SINK_LOGIT * math.sqrt(case.head_dim) / SINK_SHIFT * u
    return (q, k, v), {"key": 0, "query_shift": SINK_SHIFT, "sink_logit": SINK_LOGIT}


def max_qk(case: Case, q: torch.Tensor, k: torch.Tensor, rows: int = 1024) -> float:
    """Over a head's keys, masks aside."""
    b, g, kvh = case.batch, case.group_size, case.kv_heads
    grouped = q.reshape(b, kvh, g, case.seq_len, case.head_dim)
    kt = k.transpose(-2, -1).unsqueeze(2)
    return max(float((grouped[:, :, :, i:i + rows] @ kt).abs().amax()) for i in range(0, case.seq_len, rows))


def large_logits(case: Case, q: torch.Tensor, k: torch.Tensor,
                 v: torch.Tensor | None) -> tuple[Tensors, dict[str, Any]]:
    factor = math.sqrt(LARGE_QK / max_qk(case, q, k))
    return (q * factor, k * factor, v), {"max_qk": LARGE_QK, "factor": factor}


def shifted_keys(case: Case, q: torch.Tensor, k: torch.Tensor,
                 v: torch.Tensor | None) -> tuple[Tensors, dict[str, Any]]:
    import torch

    signs = torch.randint(0, 2, (case.head_dim,), generator=_choices(case)).float() * 2 - 1
    return (q, k + KEY_MEAN * signs.to(k.device), v), {"key_mean": KEY_MEAN}


def near_constant(case: Case, q: torch.Tensor, k: torch.Tensor,
                  v: torch.Tensor | None) -> tuple[Tensors, dict[str, Any]]:
    def flat(t: torch.Tensor) -> torch.Tensor:
        return t[..., :1, :] + NEAR_SPREAD * t

    return (q, flat(k), None if v is None else flat(v)), {"spread": NEAR_SPREAD, "tensors": "k, v"}


def denormal(case: Case, q: torch.Tensor, k: torch.Tensor,
             v: torch.Tensor | None) -> tuple[Tensors, dict[str, Any]]:
    import torch

    scale = torch.finfo(getattr(torch, case.dtype)).tiny / DENORMAL_DIVISOR
    return (q * scale, k * scale, v), {"scale": scale, "tensors": "q, k"}


Transform = Callable[["Case", "torch.Tensor", "torch.Tensor", "torch.Tensor | None"],
                     tuple[Tensors, dict[str, Any]]]
TRANSFORMS: dict[str, Transform] = {"outliers": outliers, "sink": sink, "large_logits": large_logits,
                                    "shifted_keys": shifted_keys, "near_constant": near_constant,
                                    "denormal": denormal}
assert set(TRANSFORMS) == set(axes.INPUTS) - {"randn"}, "every distribution the axis names has its transform"


def transform(case: Case, q: torch.Tensor, k: torch.Tensor,
              v: torch.Tensor | None) -> tuple[Tensors, dict[str, Any]]:
    """`v` None: derived from K after the transform (kv_shared)."""
    if case.inputs is None:
        return (q, k, v), {}
    return TRANSFORMS[case.inputs](case, q, k, v)
