"""flash-attn-4 4.0.0b36 (PyPI, pure-Python wheel flash_attn_4-4.0.0b36-py3-none-any.whl): `flash_attn.cute.flash_attn_func`.

From the wheel's flash_attn/cute/interface.py line 4145, re-exported by flash_attn/cute/__init__.py.
Annotations are kept as text (never evaluated); `BlockSparseTensorsTorch` is the library's own type.
"""

from __future__ import annotations


def flash_attn_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    qv: Optional[torch.Tensor] = None,
    gather_kv_indices: Optional[torch.Tensor] = None,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Tuple[Optional[int], Optional[int]] = (None, None),
    learnable_sink: Optional[torch.Tensor] = None,
    softcap: float = 0.0,
    num_splits: int = 1,
    pack_gqa: Optional[bool] = None,
    deterministic: bool = False,
    score_mod: Optional[Callable] = None,
    score_mod_bwd: Optional[Callable] = None,
    mask_mod: Optional[Callable] = None,
    aux_tensors: Optional[list] = None,
    aux_scalars: Optional[tuple] = None,
    block_sparse_tensors: Optional[BlockSparseTensorsTorch] = None,
    block_sparse_tensors_bwd: Optional[BlockSparseTensorsTorch] = None,
    return_lse: bool = False,
    gather_bwd_recompute_p: bool = False,
    gather_bwd_token_chunk: Optional[int] = None,
):
    raise NotImplementedError("recorded signature only")
