"""torch 2.11 (seen on an H200 machine): `torch.nn.attention.flex_attention.flex_attention` and `create_block_mask`.

Recorded with inspect.signature on that machine; annotations omitted (they are not part of the check).
"""


def flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                   return_lse=False, kernel_options=None, *, return_aux=None):
    raise NotImplementedError("recorded signature only")


def create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device=None, BLOCK_SIZE=128, _compile=False):
    raise NotImplementedError("recorded signature only")
