"""The prototype `flash_attn.cute` (its __version__ "0.1.0") that flash-attn 2.8.3 ships inside its own package.

From Dao-AILab/flash-attention tag v2.8.3 (060c9188beec3a8b62b33a3bfa6d5d2d44975fab),
flash_attn/cute/interface.py line 523.
"""

from __future__ import annotations


def flash_attn_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Tuple[Optional[int], Optional[int]] = (None, None),
    learnable_sink: Optional[torch.Tensor] = None,
    softcap: float = 0.0,
    pack_gqa: Optional[bool] = None,
):
    raise NotImplementedError("recorded signature only")
