"""flash-attn-4 4.0.0b36 (PyPI, pure-Python wheel flash_attn_4-4.0.0b36-py3-none-any.whl, sha256
b6f0e2a264334cb1b59289ddd309c7c76d3a8d184268316b43403e51ba8795d2): `flash_attn.cute.flash_attn_func` (re-exported by
flash_attn/cute/__init__.py), and `_flash_attn_fwd` / `_flash_attn_bwd`, which torch's FA4 route calls.

Written by `python -m tests.signatures.record flash_attn/cute/interface.py flash_attn_func _flash_attn_fwd
_flash_attn_bwd` from the wheel's flash_attn/cute/interface.py (lines 4145, 678, 2241): parameters and return
annotations as written (kept as text, never evaluated), and after each raising body the function's own return
statements with their lines, which conformance reads for how many values it returns (`_flash_attn_fwd`: 5).
"""

from __future__ import annotations


def flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qv: Optional[torch.Tensor]=None, gather_kv_indices: Optional[torch.Tensor]=None, softmax_scale: Optional[float]=None, causal: bool=False, window_size: Tuple[Optional[int], Optional[int]]=(None, None), learnable_sink: Optional[torch.Tensor]=None, softcap: float=0.0, num_splits: int=1, pack_gqa: Optional[bool]=None, deterministic: bool=False, score_mod: Optional[Callable]=None, score_mod_bwd: Optional[Callable]=None, mask_mod: Optional[Callable]=None, aux_tensors: Optional[list]=None, aux_scalars: Optional[tuple]=None, block_sparse_tensors: Optional[BlockSparseTensorsTorch]=None, block_sparse_tensors_bwd: Optional[BlockSparseTensorsTorch]=None, return_lse: bool=False, gather_bwd_recompute_p: bool=False, gather_bwd_token_chunk: Optional[int]=None):
    raise NotImplementedError('recorded signature only')
    return FlashAttnFunc.apply(q, k, v, qv, gather_kv_indices, softmax_scale, causal, window_size, learnable_sink, softcap, num_splits, pack_gqa, deterministic, score_mod, score_mod_bwd, mask_mod, aux_tensors, aux_scalars, block_sparse_tensors, block_sparse_tensors_bwd, return_lse, gather_bwd_recompute_p, gather_bwd_token_chunk)  # line 4187


def _flash_attn_fwd(q: Optional[torch.Tensor], k: Optional[torch.Tensor], v: torch.Tensor, qv: Optional[torch.Tensor]=None, cu_seqlens_q: Optional[torch.Tensor]=None, cu_seqlens_k: Optional[torch.Tensor]=None, seqused_q: Optional[torch.Tensor]=None, seqused_k: Optional[torch.Tensor]=None, max_seqlen_q: Optional[int]=None, max_seqlen_k: Optional[int]=None, min_seqlen_k: Optional[int]=None, page_table: Optional[torch.Tensor]=None, softmax_scale: Optional[float]=None, causal: bool=False, softcap: Optional[float]=None, window_size_left: Optional[int]=None, window_size_right: Optional[int]=None, learnable_sink: Optional[torch.Tensor]=None, tile_mn: Optional[Tuple[int, int]]=None, mma_pv_is_rs: Optional[bool]=None, intra_wg_overlap: Optional[bool]=None, num_threads: int=384, num_splits: int=1, pack_gqa: Optional[bool]=None, _arch: Optional[int]=None, score_mod: Optional[Callable]=None, mask_mod: Optional[Callable]=None, block_sparse_tensors: Optional[BlockSparseTensorsTorch]=None, return_lse: bool=False, out: Optional[torch.Tensor]=None, lse: Optional[torch.Tensor]=None, aux_tensors: Optional[list[torch.Tensor]]=None, aux_scalars: Optional[tuple]=None, q_descale: Optional[torch.Tensor]=None, k_descale: Optional[torch.Tensor]=None, v_descale: Optional[torch.Tensor]=None, gather_kv_indices: Optional[torch.Tensor]=None, scheduler_metadata: Optional[SchedulerMetadataTensorsTorch]=None, seqlen_k_per_split: Optional[int]=None, disable_scheduler_metadata: bool=False, gather_bwd_recompute_p: bool=False) -> Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor], Optional[torch.Tensor], Optional[torch.Tensor]]:
    raise NotImplementedError('recorded signature only')
    return (out, lse, None, None, None)  # line 906
    return (out, lse, p, row_max, o_lo)  # line 1966


def _flash_attn_bwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, dout: torch.Tensor, lse: torch.Tensor, softmax_scale: Optional[float]=None, causal: bool=False, softcap: float=0.0, window_size_left: Optional[int]=None, window_size_right: Optional[int]=None, m_block_size: int=64, n_block_size: int=128, num_threads: int=256, pack_gqa: bool=False, num_stages_Q: int=2, num_stages_dO: int=2, SdP_swapAB: bool=False, dKV_swapAB: bool=False, dQ_swapAB: bool=False, AtomLayoutMSdP: int=2, AtomLayoutNdKV: int=2, AtomLayoutMdQ: int=2, V_in_regs: bool=False, cu_seqlens_q: Optional[torch.Tensor]=None, cu_seqlens_k: Optional[torch.Tensor]=None, seqused_q: Optional[torch.Tensor]=None, seqused_k: Optional[torch.Tensor]=None, max_seqlen_q: Optional[int]=None, max_seqlen_k: Optional[int]=None, deterministic: bool=False, dq: Optional[torch.Tensor]=None, dk: Optional[torch.Tensor]=None, dv: Optional[torch.Tensor]=None, score_mod: Optional[Callable]=None, score_mod_bwd: Optional[Callable]=None, mask_mod: Optional[Callable]=None, aux_tensors: Optional[list[torch.Tensor]]=None, aux_scalars: Optional[tuple]=None, block_sparse_tensors: Optional[BlockSparseTensorsTorch]=None, dlse: Optional[torch.Tensor]=None, learnable_sink: Optional[torch.Tensor]=None) -> Tuple[torch.Tensor, ...]:
    raise NotImplementedError('recorded signature only')
    return (dq, dk, dv)  # line 2304
    return (dq, dk, dv, dsink)  # line 2310
    return (dq, dk, dv) if learnable_sink is None else (dq, dk, dv, dsink)  # line 3160
