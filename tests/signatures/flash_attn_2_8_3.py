"""flash-attn 2.8.3: `flash_attn.flash_attn_func`.

From Dao-AILab/flash-attention tag v2.8.3 (060c9188beec3a8b62b33a3bfa6d5d2d44975fab),
flash_attn/flash_attn_interface.py line 1135, re-exported by flash_attn/__init__.py (__version__ "2.8.3").
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
