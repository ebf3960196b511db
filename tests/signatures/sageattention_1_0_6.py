"""sageattention 1.0.6: the function attnbench's sage adapter calls, as that release states it.

From the PyPI wheel sageattention-1.0.6-py3-none-any.whl (sageattention/core.py, re-exported by its __init__.py):
the parameter list copied with its annotations dropped.
"""


def sageattn(q, k, v, tensor_layout="HND", is_causal=False, sm_scale=None, smooth_k=True, **kwargs):
    raise NotImplementedError("recorded signature only")
