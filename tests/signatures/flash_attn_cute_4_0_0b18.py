"""flash-attn-4 4.0.0b18 (PyPI, pure-Python wheel flash_attn_4-4.0.0b18-py3-none-any.whl, sha256
613897eea059d3ebbc3fb714a8520973462fb25c4e0ef85cd41d6e26e3170e25): the last release whose `_flash_attn_fwd` returns
two values, as torch 2.11's FA4 route unpacks it; 4.0.0b19 returns four (still annotated as two), 4.0.0b36 five.

Written by `python -m tests.signatures.record flash_attn/cute/interface.py _flash_attn_fwd _flash_attn_bwd` from the
wheel's flash_attn/cute/interface.py (lines 294, 1250).
"""

from __future__ import annotations


def _flash_attn_fwd(q: Optional[torch.Tensor], k: Optional[torch.Tensor], v: torch.Tensor, qv: Optional[torch.Tensor]=None, cu_seqlens_q: Optional[torch.Tensor]=None, cu_seqlens_k: Optional[torch.Tensor]=None, seqused_q: Optional[torch.Tensor]=None, seqused_k: Optional[torch.Tensor]=None, max_seqlen_q: Optional[int]=None, max_seqlen_k: Optional[int]=None, min_seqlen_k: Optional[int]=None, page_table: Optional[torch.Tensor]=None, softmax_scale: Optional[float]=None, causal: bool=False, softcap: Optional[float]=None, window_size_left: Optional[int]=None, window_size_right: Optional[int]=None, learnable_sink: Optional[torch.Tensor]=None, tile_mn: Optional[Tuple[int, int]]=None, mma_pv_is_rs: Optional[bool]=None, intra_wg_overlap: Optional[bool]=None, num_threads: int=384, num_splits: int=1, pack_gqa: Optional[bool]=None, _arch: Optional[int]=None, score_mod: Optional[Callable]=None, mask_mod: Optional[Callable]=None, block_sparse_tensors: Optional[BlockSparseTensorsTorch]=None, return_lse: bool=False, out: Optional[torch.Tensor]=None, lse: Optional[torch.Tensor]=None, aux_tensors: Optional[list[torch.Tensor]]=None, aux_scalars: Optional[tuple]=None, q_descale: Optional[torch.Tensor]=None, k_descale: Optional[torch.Tensor]=None, v_descale: Optional[torch.Tensor]=None, gather_kv_indices: Optional[torch.Tensor]=None) -> Tuple[torch.Tensor, torch.Tensor]:
    raise NotImplementedError('recorded signature only')
    return (out, lse)  # line 494
    return (out, lse)  # line 1104


def _flash_attn_bwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, dout: torch.Tensor, lse: torch.Tensor, softmax_scale: Optional[float]=None, causal: bool=False, softcap: float=0.0, window_size_left: Optional[int]=None, window_size_right: Optional[int]=None, m_block_size: int=64, n_block_size: int=128, num_threads: int=256, pack_gqa: bool=False, num_stages_Q: int=2, num_stages_dO: int=2, SdP_swapAB: bool=False, dKV_swapAB: bool=False, dQ_swapAB: bool=False, AtomLayoutMSdP: int=2, AtomLayoutNdKV: int=2, AtomLayoutMdQ: int=2, V_in_regs: bool=False, cu_seqlens_q: Optional[torch.Tensor]=None, cu_seqlens_k: Optional[torch.Tensor]=None, seqused_q: Optional[torch.Tensor]=None, seqused_k: Optional[torch.Tensor]=None, max_seqlen_q: Optional[int]=None, max_seqlen_k: Optional[int]=None, deterministic: bool=False, dq: Optional[torch.Tensor]=None, dk: Optional[torch.Tensor]=None, dv: Optional[torch.Tensor]=None, score_mod: Optional[Callable]=None, score_mod_bwd: Optional[Callable]=None, mask_mod: Optional[Callable]=None, aux_tensors: Optional[list[torch.Tensor]]=None, aux_scalars: Optional[tuple]=None, block_sparse_tensors: Optional[BlockSparseTensorsTorch]=None, dlse: Optional[torch.Tensor]=None) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    raise NotImplementedError('recorded signature only')
    return (dq, dk, dv)  # line 1956
