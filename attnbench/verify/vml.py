"""Settle MKL VML's lazy kernel dispatch on one thread: a first call on two threads at once may run one share
with the low-accuracy kernel (pytorch/pytorch#188792)."""

from __future__ import annotations

import threading

# the float unary ops ATen routes to VML (ATen/cpu/vml.h, torch 2.13.0+cpu), and their family
OPS = ("acos", "asin", "atan", "cos", "cosh", "erf", "erfc", "erfinv", "exp", "expm1", "lgamma", "log",
       "log10", "log1p", "log2", "rsqrt", "sin", "sinh", "sqrt", "tan", "tanh", "trunc")
DTYPES = ("float32", "float64")

_lock = threading.Lock()
_warmed = False


def warm() -> None:
    """Every op once per dtype on one element; idempotent and thread-safe."""
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
