"""A plugin backend for tests/test_precompile.py whose `prepare` "compiles" (cost.compiles, one key per length) and
fails by the case's length: 32 raises, 48 ends its process (exit code 3), 40 is refused, 56 hangs in a compiler of its
own (a child `sleep HUNG_S`, as nvcc under ninja); any other length is fine.
A module of its own, so the compile processes import it without pytest."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

from attnbench.backends.base import Backend, Cost, Prepared, Unsupported

if TYPE_CHECKING:
    import torch

    from attnbench.core.case import Case

HUNG_S = "27.1828"  # a `sleep` of this many seconds is the hung compiler


class PlantedCompile(Backend):
    name = "planted-compile"
    cost = Cost(compiles=True)

    def compile_key(self, case: Case) -> str:
        return f"planted|{case.seq_len}"

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
        if case.seq_len == 32:
            raise ValueError("planted compile failure")
        if case.seq_len == 40:
            raise Unsupported("planted refusal")
        if case.seq_len == 48:
            print("planted exit while compiling", file=sys.stderr, flush=True)
            os._exit(3)
        if case.seq_len == 56:
            subprocess.run(["sleep", HUNG_S], check=True, process_group=0)  # its own group, as ninja's commands
        return Prepared(inputs=(q, k, v), call=lambda q, k, v: q, kernel="planted",
                        extra={"kernels_compiled": 1, "cache_hits": 0, "compile_s": 0.0})


PLANTED = [PlantedCompile]
