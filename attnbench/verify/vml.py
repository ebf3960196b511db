"""Resolve MKL VML's kernel dispatch once per process, on one thread, before any case is computed.

oneMKL picks a VML kernel lazily on its first call; when that call runs on two intra-op threads at once, one thread
may use the low-accuracy kernel (VML_EP) for its share: pytorch/pytorch#188792 (fix proposed in #188791, the same
one-element warm-up). A one-element call runs on the calling thread alone and settles the dispatch.
"""

from __future__ import annotations

import threading

# The float unary ops ATen routes to VML (ATen/cpu/vml.h, traced on torch 2.13.0+cpu), and their family.
OPS = ("acos", "asin", "atan", "cos", "cosh", "erf", "erfc", "erfinv", "exp", "expm1", "lgamma", "log", "log10",
       "log1p", "log2", "rsqrt", "sin", "sinh", "sqrt", "tan", "tanh", "trunc")
DTYPES = ("float32", "float64")  # VML's s and d functions; half types skip VML

_lock = threading.Lock()
_warmed = False


def warm() -> None:
    """Every op of OPS once per dtype on a one-element tensor; idempotent and thread-safe."""
    global _warmed
    if _warmed:
        return
    with _lock:
        if _warmed:
            return
        import torch

        for dtype in DTYPES:
            one = torch.full((1,), 0.5, dtype=getattr(torch, dtype))
            for op in OPS:
                getattr(torch, op)(one)
        _warmed = True
