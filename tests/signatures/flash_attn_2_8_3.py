"""flash-attn 2.8.3: `flash_attn.flash_attn_func`.

From Dao-AILab/flash-attention tag v2.8.3 (060c9188beec3a8b62b33a3bfa6d5d2d44975fab),
flash_attn/flash_attn_interface.py line 1135, re-exported by flash_attn/__init__.py (__version__ "2.8.3"); and
flash_attn_varlen_func and flash_attn_with_kvcache from the same file at the same tag (defaults as written there).
"""


def flash_attn_func(
    q,
    k,
    v,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),  # -1 means infinite context window
    softcap=0.0, # 0.0 means deactivated
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    raise NotImplementedError("recorded signature only")


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    block_table=None,
):
    raise NotImplementedError("recorded signature only")


def flash_attn_with_kvcache(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    rotary_cos=None,
    rotary_sin=None,
    cache_seqlens=None,
    cache_batch_idx=None,
    cache_leftpad=None,
    block_table=None,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    rotary_interleaved=True,
    alibi_slopes=None,
    num_splits=0,
    return_softmax_lse=False,
):
    raise NotImplementedError("recorded signature only")
