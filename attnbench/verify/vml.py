"""Resolve MKL VML's kernel dispatch once per process, on one thread, before any case is computed.

On a CPU, ATen computes a contiguous float32 or float64 `tanh`, `exp`, `sqrt`, `log`, ... (ATen/cpu/vml.h) by
calling MKL VML's function (`vmsTanh`, `vmdExp`, ...) from each intra-op thread on its share of the tensor, asking
for the high-accuracy kernel (VML_HA). oneMKL 2024.2 (the one torch 2.13.0's CPU wheel carries) picks a function's
kernel lazily, on its first call; when that first call runs on two threads at once, one thread can run its whole
share with the low-accuracy kernel (VML_EP, about half the mantissa bits): pytorch/pytorch#188792, whose proposed
fix (pytorch/pytorch#188791) is this same one-element warm-up inside ATen. The next call is right again, so the
fault hits only the first call in the process and looks like a flaky kernel.

In attnbench that first call was a measured one: on a 2-core Xeon, the first soft-capped float32 case of a run
made naive's checked call the process's first float32 `tanh`, and in about one run of five the calling thread's
half of it (heads 0-1 of 4) came back off by 7e-5: `mismatch` against a bound of 1.1e-5. The reference (the first
float64 `tanh`) and naive's own float32 yardstick (which sets the bound) were exposed the same way. Calling every
such function once on one element, which ATen runs on the calling thread alone, settles the dispatch before any
concurrent call. Where VML has one kernel for every accuracy (an AMD EPYC) nothing can flip; the warm-up costs a
few milliseconds, once per process.
"""

from __future__ import annotations

import threading

# The float unary ops ATen routes to MKL VML: on torch 2.13.0+cpu (traced) acos, asin, atan, cos, erf, erfc, erfinv,
# exp, log, log10, log2, sin, sqrt, tan, tanh and trunc each call vms*/vmd*; cosh, expm1, lgamma, log1p, rsqrt and sinh
# are of the same family, in case another release routes them (calling one that is not routed costs nothing).
OPS = ("acos", "asin", "atan", "cos", "cosh", "erf", "erfc", "erfinv", "exp", "expm1", "lgamma", "log", "log10",
       "log1p", "log2", "rsqrt", "sin", "sinh", "sqrt", "tan", "tanh", "trunc")
DTYPES = ("float32", "float64")  # VML's s and d functions; ATen computes the half types without VML

_lock = threading.Lock()
_warmed = False


def warm() -> None:
    """Call every op of OPS once, in every dtype of DTYPES, on a one-element tensor (so on this thread alone).

    Idempotent and thread-safe: the first caller warms, the others wait for it, later calls return at once.
    """
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
