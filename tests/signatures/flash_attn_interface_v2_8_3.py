"""An older FlashAttention 3 build: `flash_attn_interface.flash_attn_func` as of flash-attention v2.8.3.

From Dao-AILab/flash-attention tag v2.8.3 (060c9188beec3a8b62b33a3bfa6d5d2d44975fab),
hopper/flash_attn_interface.py line 502 (no `return_attn_probs` yet).
"""


def flash_attn_func(
    q,
    k,
    v,
    softmax_scale=None,
    causal=False,
    qv=None,
    q_descale=None, k_descale=None, v_descale=None,
    window_size=(-1, -1),
    attention_chunk=0,
    softcap=0.0,
    num_splits=1,
    pack_gqa=None,
    deterministic=False,
    sm_margin=0,
):
    raise NotImplementedError("recorded signature only")
