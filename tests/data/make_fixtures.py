"""Write the synthetic results fixtures the report tests read (run: python tests/data/make_fixtures.py).

Every number here is made up but plausible; env.json says suite_name "synthetic-fixture" so nobody
mistakes these files for a measurement. The output is deterministic: rerunning rewrites the same bytes.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

from attnbench.core.interval import median_interval  # noqa: E402
from attnbench.records.results import Record  # noqa: E402

HERE = Path(__file__).resolve().parent
TIMESTAMP = "2025-01-15T12:00:00+00:00"
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# Fraction of the device's peak each synthetic backend reaches on a long sequence.
EFFICIENCY = {"sdpa-flash": 0.55, "sdpa": 0.53, "xformers": 0.48, "sdpa-math": 0.22, "naive": 0.14}
KERNELS = {
    "naive": "torch.matmul+softmax (synthetic)", "sdpa": "torch.nn.functional.scaled_dot_product_attention (synthetic)",
    "sdpa-flash": "SDPBackend.FLASH_ATTENTION (synthetic)", "sdpa-math": "SDPBackend.MATH (synthetic)",
    "xformers": "xformers.ops.fmha.flash.FwOp (synthetic)",
}


def visible_pairs(sq: int, sk: int, causal: bool) -> int:
    """Query/key pairs the mask lets through (bottom-right causal)."""
    if not causal:
        return sq * sk
    off = sk - sq
    return sum(min(sk, i + off + 1) for i in range(sq))


def samples_for(median: float, spread: float, rng: random.Random, n: int = 10) -> list[float]:
    """n plausible timing samples around a median, with a relative spread."""
    return sorted(round(median * (1 + rng.uniform(-spread, spread)), 6) for _ in range(n))


def record(run_id: str, suite: str, device: str, device_name: str, backend: str, case: dict[str, Any],
           status: str = "ok", reason: str | None = None, time_ms: float | None = None, spread: float = 0.02,
           rng: random.Random | None = None, memory: int | None = None, error: float | None = None,
           bound: float | None = None, times: list[float] | None = None) -> dict[str, Any]:
    """One record as the runner would write it."""
    rng = rng or random.Random(0)
    visible = visible_pairs(case["seq_len"], case["kv_seq_len"], case["causal"])
    factor = {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}[case["mode"]]
    flops = int(4 * case["batch"] * case["heads"] * case["head_dim"] * visible * factor)
    fields: dict[str, Any] = {}
    if time_ms is not None:
        times = times or samples_for(time_ms, spread, rng)
        q = statistics.quantiles(times, n=4)
        median = statistics.median(times)
        interval = median_interval(times)
        fields = dict(time_ms=median, time_ms_iqr=q[2] - q[0], time_ms_min=times[0], samples=len(times),
                      times_ms=times, timer="cuda-events" if device == "cuda" else "perf_counter",
                      tflops=flops / (median * 1e-3) / 1e12, ci_low_ms=interval.low, ci_high_ms=interval.high,
                      ci_level=interval.level, stop="precision" if interval.half_width() <= 0.01 else "budget")
    estimate = case["batch"] * case["heads"] * case["seq_len"] * case["kv_seq_len"] * DTYPE_BYTES[case["dtype"]]
    if backend != "naive":
        estimate = 4 * case["batch"] * case["heads"] * case["seq_len"] * DTYPE_BYTES[case["dtype"]] * case["head_dim"]
    checked = status in ("ok", "mismatch") and error is not None
    return Record(
        run_id=run_id, suite=suite, timestamp=TIMESTAMP, backend=backend, kernel=KERNELS.get(backend, backend),
        device_name=device_name, status=status, reason=reason, flops=flops,
        peak_memory_bytes=memory, memory_method=("cuda.max_memory_allocated" if device == "cuda" else "tracemalloc")
        if memory is not None else None, memory_estimate_bytes=estimate, max_abs_error=error if checked else None,
        error_bound=bound if checked else None, rows_checked=case["seq_len"] if checked else None,
        grad_checked=checked and case["mode"] != "fwd", kv_expanded=backend in ("naive", "sdpa-math") and
        case["kv_heads"] != case["heads"],
        case_id="{dtype}-s{seq_len}-k{kv_seq_len}-h{heads}-kv{kv_heads}".format(**case),
        **case, **fields,
    ).to_dict()


def write_run(directory: Path, records: list[dict[str, Any]], env: dict[str, Any]) -> None:
    """Write results.jsonl and env.json of one run."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "results.jsonl", "w", encoding="utf-8") as out:
        for item in records:
            out.write(json.dumps(item, allow_nan=False) + "\n")
    (directory / "env.json").write_text(json.dumps(env, indent=2) + "\n", encoding="utf-8")


def env_for(run_id: str, device: str, device_name: str, gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """A synthetic env.json: the keys the runner writes."""
    return {
        "attnbench": "0.1.0", "python": "3.11.9", "platform": "Linux-6.8-x86_64 (synthetic)",
        "cpu": "Intel(R) Xeon(R) Platinum 8480+ (synthetic)",
        "torch": "2.5.1+cu124" if device == "cuda" else "2.5.1+cpu",
        "cuda": "12.4" if device == "cuda" else None, "cudnn": 90100 if device == "cuda" else None,
        "gpu_count": len(gpus), "gpus": gpus, "driver": "550.90.07" if device == "cuda" else None,
        "libraries": {"flash_attn": None, "xformers": "0.0.28.post3" if device == "cuda" else None, "triton": "3.1.0"},
        "git_commit": "0123456789abcdef0123456789abcdef01234567", "suite_name": "synthetic-fixture",
        "suite_file": "suites/synthetic-fixture.yaml", "suite_text": "# synthetic fixture, not a measurement\n",
        "device": device, "device_name": device_name, "timestamp": TIMESTAMP, "run_id": run_id,
    }


def case_of(dtype: str, seq: int, kv_seq: int, heads: int, kv_heads: int, head_dim: int = 128, causal: bool = True,
            mode: str = "fwd", batch: int = 1, window: int | None = None, device: str = "cuda") -> dict[str, Any]:
    return dict(device=device, dtype=dtype, batch=batch, seq_len=seq, kv_seq_len=kv_seq, heads=heads,
                kv_heads=kv_heads, head_dim=head_dim, causal=causal, window=window, mode=mode)


def planted_gpu_fault(backend: str, dtype: str, kv_heads: int, seq: int, kw: dict[str, Any]) -> dict[str, Any]:
    """gpu_like's planted statuses: each a record's keywords in place of (or on top of) its `ok` ones."""
    if backend == "naive" and seq == 8192:
        return dict(status="oom", reason="CUDA out of memory: tried to allocate 8.00 GiB (synthetic)")
    if backend == "sdpa-flash" and dtype == "bfloat16" and kv_heads == 8 and seq == 4096:
        return dict(status="error", reason="RuntimeError: CUDA error: an illegal memory access was "
                                           "encountered (synthetic)")
    if backend == "xformers" and dtype == "float16" and kv_heads == 8 and seq == 2048:
        return {**kw, "status": "mismatch", "error": 0.031,
                "reason": "max_abs_error 0.031 > bound 0.0078 on output (synthetic)"}
    if backend == "sdpa-math" and dtype == "float16" and kv_heads == 32 and seq == 8192:
        return dict(status="timeout", reason="exceeded the 60 s per-case budget (synthetic)")
    return kw


def gpu_like() -> None:
    """Five backends, two dtypes, MHA and GQA, a decode group, and every status."""
    rng = random.Random(1234)
    name = "NVIDIA H100 80GB HBM3 (synthetic)"
    run_id, suite, peak = "synthetic-gpu-0001", "synthetic-fixture", 989.0
    records = []
    backends = ("naive", "sdpa", "sdpa-flash", "sdpa-math", "xformers")
    for dtype in ("bfloat16", "float16"):
        for kv_heads in (32, 8):
            for seq in (1024, 2048, 4096, 8192):
                case = case_of(dtype, seq, seq, 32, kv_heads)
                visible = visible_pairs(seq, seq, True)
                flops = 4 * 32 * 128 * visible
                for backend in backends:
                    eff = EFFICIENCY[backend] * (0.6 + 0.4 * seq / 8192)
                    t = flops / (peak * 1e12 * eff) * 1e3
                    quad = 32 * seq * seq * 2 * (3 if backend == "naive" else 1)
                    mem = quad if backend in ("naive", "sdpa-math") else 32 * seq * 128 * 2 * 2 + 4 * 32 * seq
                    err, bound = rng.uniform(1e-3, 3e-3), 7.8e-3
                    kw: dict[str, Any] = dict(time_ms=t, rng=rng, memory=mem, error=err, bound=bound)
                    kw = planted_gpu_fault(backend, dtype, kv_heads, seq, kw)
                    records.append(record(run_id, suite, "cuda", name, backend, case, **kw))
    for kv_seq in (1024, 2048, 4096, 8192):  # decode: one query against a growing KV cache
        case = case_of("bfloat16", 1, kv_seq, 32, 8, mode="fwd", causal=True)
        for backend in backends:
            nbytes = 2 * 8 * kv_seq * 128 * 2
            t = nbytes / (3.35e12 * EFFICIENCY[backend] * 1.5) * 1e3 + 0.01
            kw = dict(time_ms=t, rng=rng, memory=32 * kv_seq * 4, error=rng.uniform(1e-3, 3e-3), bound=7.8e-3)
            if backend == "xformers":
                kw = dict(status="skipped", reason="xformers: this op does not support a query length of 1 (synthetic)")
            records.append(record(run_id, suite, "cuda", name, backend, case, **kw))
    gpus = [{"name": name, "capability": "9.0", "memory_bytes": 85520809984}]
    write_run(HERE / "gpu-like", records, env_for(run_id, "cuda", name, gpus))


def cpu_like() -> None:
    """A small CPU float32 run: three backends, full and causal masks, no kv_heads variation."""
    rng = random.Random(99)
    name = "Intel(R) Xeon(R) Platinum 8480+ (synthetic)"
    run_id, suite = "synthetic-cpu-0001", "synthetic-fixture"
    records = []
    for causal in (False, True):
        for seq in (256, 512, 1024, 2048):
            case = case_of("float32", seq, seq, 8, 8, head_dim=64, causal=causal, device="cpu")
            flops = 4 * 8 * 64 * visible_pairs(seq, seq, causal)
            for backend, gflops in (("naive", 40.0), ("sdpa", 90.0), ("sdpa-math", 45.0)):
                t = flops / (gflops * 1e9) * 1e3
                mem = 8 * seq * seq * 4 * (2 if backend != "sdpa" else 0) + 8 * seq * 64 * 4
                records.append(record(run_id, suite, "cpu", name, backend, case, time_ms=t, spread=0.05, rng=rng,
                                      memory=mem, error=rng.uniform(1e-7, 4e-7), bound=1e-6))
    write_run(HERE / "cpu-like", records, env_for(run_id, "cpu", name, []))


def compare_pair() -> None:
    """compare-base and compare-new: NEW has one planted 20% regression and one planted new OOM; else noise."""
    name = "NVIDIA A100-SXM4-80GB (synthetic)"
    base_rng, new_rng = random.Random(7), random.Random(8)
    base, new = [], []
    for seq in (1024, 2048, 4096):
        case = case_of("bfloat16", seq, seq, 16, 16)
        for backend, ms_per_unit in (("naive", 0.9), ("sdpa", 0.25), ("sdpa-flash", 0.22)):
            t = ms_per_unit * (seq / 1024) ** 2
            base.append(record("synthetic-base", "synthetic-fixture", "cuda", name, backend, case, time_ms=t,
                               spread=0.004, rng=base_rng, memory=1 << 20, error=1e-3, bound=7.8e-3))
            kw: dict[str, Any] = dict(time_ms=t * (1 + new_rng.uniform(-0.01, 0.01)), spread=0.004, rng=new_rng,
                                      memory=1 << 20, error=1e-3, bound=7.8e-3)
            if backend == "sdpa-flash" and seq == 2048:
                kw["time_ms"] = t * 1.20  # the planted regression: 20% slower, small IQRs
            if backend == "naive" and seq == 4096:
                kw = dict(status="oom", reason="CUDA out of memory: tried to allocate 2.00 GiB (synthetic)")
            if backend == "sdpa" and seq == 1024:
                # 8% slower, but the samples spread wider than that: noise, not a regression.
                kw["times"] = [round(t * f, 6) for f in (0.85, 0.9, 0.95, 1.0, 1.06, 1.1, 1.15, 1.2, 1.25, 1.3)]
            new.append(record("synthetic-new", "synthetic-fixture", "cuda", name, backend, case, **kw))
    gpus = [{"name": name, "capability": "8.0", "memory_bytes": 85899345920}]
    write_run(HERE / "compare-base", base, env_for("synthetic-base", "cuda", name, gpus))
    write_run(HERE / "compare-new", new, env_for("synthetic-new", "cuda", name, gpus))


if __name__ == "__main__":
    gpu_like()
    cpu_like()
    compare_pair()
