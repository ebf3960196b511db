"""torch 2.11.0 (the H200 run's torch 2.11.0+cu130): how its FA4 route, torch/nn/attention/_fa4.py, calls flash-attn-4.

From the PyPI wheel torch-2.11.0-cp311-cp311-macosx_11_0_arm64.whl (sha256
7b6a60d48062809f58595509c524b88e6ddec3ebe25833d6462eeab81e5f2ce4; torch/version.py __version__ "2.11.0"; the file is
pure Python, the same in every platform's wheel). Written by `python -m tests.signatures.record
torch/nn/attention/_fa4.py _fa4_run_forward _fa4_run_backward --unpacking _flash_attn_fwd _flash_attn_bwd` (lines 177,
210): SDPA's flash forward reaches `_fa4_run_forward` through `_fa4_flash_attention_forward_impl` (line 273), which
unpacks two values from flash-attn-4's `_flash_attn_fwd` (line 206); the backward unpacks three from
`_flash_attn_bwd` (line 226).
"""

from __future__ import annotations


def _fa4_run_forward(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cu_seq_q: torch.Tensor | None, cu_seq_k: torch.Tensor | None, scale: float | None, is_causal: bool, window_size_left: int | None, window_size_right: int | None, seqused_k: torch.Tensor | None, out: torch.Tensor | None=None) -> tuple[torch.Tensor, torch.Tensor]:
    raise NotImplementedError('recorded signature only')
    out, lse = module._flash_attn_fwd(query, key, value, **kwargs)  # line 206
    return (out, lse.contiguous())  # line 207


def _fa4_run_backward(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, out: torch.Tensor, logsumexp: torch.Tensor, cu_seq_q: torch.Tensor | None, cu_seq_k: torch.Tensor | None, scale: float | None, is_causal: bool, deterministic: bool=False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    raise NotImplementedError('recorded signature only')
    dq, dk, dv = module._flash_attn_bwd(query, key, value, out, grad_out, logsumexp.contiguous(), softmax_scale=scale, causal=is_causal, cu_seqlens_q=cu_seq_q, cu_seqlens_k=cu_seq_k, deterministic=deterministic)  # line 226
    return (dq, dk, dv)  # line 239
