"""No measured computation may be a VML function's first call in its process (attnbench.verify.vml).

oneMKL 2024.2 picks a VML function's kernel on its first call, and two threads making that first call together can
get the low-accuracy kernel on one thread's share (pytorch/pytorch#188792): on a 2-core Xeon naive's first
soft-capped case came out `mismatch` in one run of five. Where the CPU cannot show it (VML runs one kernel for every
accuracy on an AMD EPYC) a shim stands in for the fault: put in front of torch with LD_PRELOAD, it passes each VML
call torch makes to MKL and spoils the output of each function's first call as the low-accuracy kernel would (half
the mantissa: 2^-12 relative in float32, 2^-26 in float64, the two erring apart), every time. A run whose measured
calls are clean under the shim made none of them a first call.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
# The VML functions torch 2.13.0+cpu calls (traced: float32 and float64 acos ... trunc), by their MKL names.
VML = ("Acos", "Asin", "Atan", "Cos", "Erf", "Erfc", "ErfInv", "Exp", "Ln", "Log10", "Log2", "Sin", "Sqrt", "Tan",
       "Tanh", "Trunc")

SHIM_HEAD = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
static long calls, spoiled_calls, spoiled_elements;
long shim_calls(void) { return __atomic_load_n(&calls, __ATOMIC_SEQ_CST); }
long shim_spoiled_calls(void) { return __atomic_load_n(&spoiled_calls, __ATOMIC_SEQ_CST); }
long shim_spoiled_elements(void) { return __atomic_load_n(&spoiled_elements, __ATOMIC_SEQ_CST); }
static void *real(const char *name) {
  void *torch = dlopen("libtorch_cpu.so", RTLD_NOLOAD | RTLD_LAZY);  /* MKL lives in it, statically linked */
  return torch ? dlsym(torch, name) : 0;
}
"""
SHIM_FN = r"""
static int first_{name};
void {name}(int n, const {t} *a, {t} *y, long long mode) {{
  static void (*fn)(int, const {t} *, {t} *, long long);
  if (!fn) fn = (void (*)(int, const {t} *, {t} *, long long))real("{name}");
  fn(n, a, y, mode);
  __atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);
  if (__atomic_exchange_n(&first_{name}, 1, __ATOMIC_SEQ_CST) == 0) {{
    for (int i = 0; i < n; i++) y[i] *= ({t})({factor});
    __atomic_add_fetch(&spoiled_calls, 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&spoiled_elements, n, __ATOMIC_SEQ_CST);
  }}
}}
"""

CHILD = r"""
import ctypes, json, sys
from attnbench.core.case import Case
from attnbench.backends.registry import default_registry
from attnbench.verify.inputs import CaseData
from attnbench.run.measure import Settings, measure
from attnbench.run.recording import RunInfo
from attnbench.timing.timers import ClockTimer, TimingSettings

shim = ctypes.CDLL(sys.argv[1])
for name in ("shim_calls", "shim_spoiled_calls", "shim_spoiled_elements"):
    getattr(shim, name).restype = ctypes.c_long
case = Case(device="cpu", dtype="float32", batch=1, seq_len=64, kv_seq_len=64, heads=2, kv_heads=2, head_dim=16,
            causal=True, window=None, mode="fwd", softcap=20.0)
settings = TimingSettings(warmup_ms=0, budget_ms=0, min_samples=1, max_samples=1)
record = measure(CaseData(case), default_registry().get("naive"), ClockTimer(), Settings(RunInfo("t", "t"), settings))
print(json.dumps({"status": record.status, "reason": record.reason, "calls": shim.shim_calls(),
                  "spoiled_calls": shim.shim_spoiled_calls(), "spoiled_elements": shim.shim_spoiled_elements()}))
"""


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shim, compiled for this machine: every VML function of VML in float32 (vms) and float64 (vmd)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None or not torch.backends.mkl.is_available() or not sys.platform.startswith("linux"):
        pytest.skip("needs Linux, a C compiler and a torch built with MKL")
    source = SHIM_HEAD + "".join(SHIM_FN.format(name=f"vm{p}{fn}", t=t, factor=factor)
                                 for p, t, factor in (("s", "float", "1.0 + 1.0 / 4096"),
                                                      ("d", "double", "1.0 - 1.0 / 67108864"))
                                 for fn in VML)
    directory = tmp_path_factory.mktemp("vml-shim")
    (directory / "shim.c").write_text(source)
    built = directory / "shim.so"
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", str(directory / "shim.c"), "-o", str(built), "-ldl"],
                   check=True, capture_output=True)
    return built


@pytest.mark.slow
def test_a_soft_capped_case_makes_no_first_vml_call(shim: Path) -> None:
    """naive on a soft-capped float32 case, alone in a fresh process: its checked call, the reference and naive's own
    yardstick all call tanh; each must come after the function's first call, which only attnbench.verify.vml's
    one-element warm-up may make. Before the warm-up, the checked call was the first float32 tanh: `mismatch`."""
    env = dict(os.environ, LD_PRELOAD=str(shim), PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", CHILD, str(shim)], capture_output=True, text=True, timeout=300,
                          env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["calls"] > 0, "the shim saw no VML call: torch does not reach MKL VML through it here"
    assert got["status"] == "ok", got["reason"]
    assert got["spoiled_elements"] == got["spoiled_calls"], "a first call of more than one element was measured"
