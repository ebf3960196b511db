# The jax-cudnn call on this GPU timed three ways, beside sdpa-cudnn's events: printed as JSON to argv[1].
import json, statistics, sys, time
import torch
from attnbench.backends.registry import default_registry
from attnbench.timing.timers import CudaEventTimer, TimingSettings
from attnbench.verify.inputs import CaseData
from tests.helpers import make_case

out = {}
s = TimingSettings(warmup_ms=25, budget_ms=200, min_samples=20)
for kv in (16, 4):
    case = make_case(device="cuda", dtype="bfloat16", seq_len=4096, heads=16, kv_heads=kv, head_dim=128, causal=True)
    inp = CaseData(case).inputs
    row = {}
    for name in ("sdpa-cudnn", "jax-cudnn"):
        p = default_registry().get(name).prepare(case, inp.q, inp.k, inp.v)
        call = (lambda p=p: p.call(*p.inputs))
        call(); torch.cuda.synchronize()
        ev = CudaEventTimer()
        e = ev.measure(call, s)
        row[name + " events"] = (statistics.median(e), ev.extra)
        h = ev.host.measure(call, s)
        row[name + " host"] = (statistics.median(h), ev.host.extra)
        torch.cuda.synchronize(); t = time.perf_counter_ns(); n = 50
        for _ in range(n): call()
        torch.cuda.synchronize(); row[name + " loop ms"] = (time.perf_counter_ns() - t) / n / 1e6
    out[f"kv{kv}"] = row
    print(json.dumps(row, indent=1), flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
