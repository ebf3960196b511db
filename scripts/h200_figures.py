"""The figures docs/verified.md quotes from the H200 runs of 2026-12-04, computed from their committed records and logs
(tests/test_verified.py holds every block this prints to the page, word for word).

    python scripts/h200_figures.py

The runs: reports/NVIDIA-H200-20261204-c671d98 (the check at c671d98, FA4, the 16K assert, the first FlashInfer
measurement, Triton's do_bench), reports/NVIDIA-H200-20261204-timer (the timer per runtime) and
reports/NVIDIA-H200-20261204-fijit (FlashInfer's JIT compiled ahead). Statuses are as attnbench reads the records now
(a stored timing past the datasheet reads `implausible`); memory estimates "now" are this checkout's.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnbench.backends.registry import default_registry  # noqa: E402
from attnbench.records.record import Record, case_of  # noqa: E402
from attnbench.records.results import ENV_FILE, load_records  # noqa: E402

REPORTS = ROOT / "reports"
CHECK = REPORTS / "NVIDIA-H200-20261204-c671d98"
TIMER = REPORTS / "NVIDIA-H200-20261204-timer"
FIJIT = REPORTS / "NVIDIA-H200-20261204-fijit"
# Each run folder as the page names it, and its path.
RUNS = {"check": CHECK / "check", "fa4": CHECK / "fa4", "naive16k": CHECK / "naive16k",
        "flashinfer": CHECK / "flashinfer", "timer-check": TIMER / "timer-check", "fijit/cold": FIJIT / "cold",
        "fijit/warm": FIJIT / "warm", "fijit/budget": FIJIT / "budget"}
# Triton's do_bench, each file taken in the same device call as one attnbench run (dev3.sh, dev4.sh).
DO_BENCH = {"xcheck-run1.json": "check", "xcheck-run2.json": "fa4"}
SHORT = 4096
LONG = 16384
MIB = 1 << 20
# The 4K columns: (KV heads, window, mode) and their heading.
COLUMNS = [((16, None, "fwd"), "MHA fwd"), ((16, None, "fwd_bwd"), "MHA fwd+bwd"), ((4, None, "fwd"), "GQA fwd"),
           ((4, None, "fwd_bwd"), "GQA fwd+bwd"), ((16, 1024, "fwd"), "MHA w1024 fwd"),
           ((16, 1024, "fwd_bwd"), "MHA w1024 fwd+bwd"), ((4, 1024, "fwd"), "GQA w1024 fwd"),
           ((4, 1024, "fwd_bwd"), "GQA w1024 fwd+bwd")]
STATUS_ORDER = ("ok", "implausible", "mismatch", "wrong_kernel", "skipped", "error", "timeout", "oom")
ASSERT = "device-side assert triggered"
# The estimates recounted from the H200's peaks, and FlashInfer's single prefill, whose estimate misses its peak.
MEMORY_ROWS = [("check", "sage", "cuda-bf16-b1-s4096-h16-kv16-d128-causal-fwd"),
             ("check", "sage", "cuda-bf16-b1-s4096-h16-kv4-d128-causal-fwd"),
             ("check", "sdpa-varlen", "cuda-bf16-b1-s4096-h16-kv16-d128-causal-fwd_bwd"),
             ("check", "sdpa-varlen", "cuda-bf16-b1-s4096-h16-kv4-d128-causal-fwd_bwd"),
             ("fa4", "flash-attn-4", "cuda-bf16-b1-s4096-h16-kv4-d128-causal-fwd_bwd"),
             ("fijit/cold", "flashinfer", "cuda-bf16-b1-s4096-h16-kv16-d128-causal-fwd"),
             ("fijit/cold", "flashinfer", "cuda-bf16-b1-s16384-h16-kv16-d128-causal-fwd")]


def records(run: str) -> list[Record]:
    return load_records(RUNS[run])


def env(run: str) -> dict[str, Any]:
    path = RUNS[run] / ENV_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def table(head: Iterable[str], rows: Iterable[Iterable[object]]) -> str:
    head = list(head)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join([*lines, *("| " + " | ".join(str(c) for c in row) + " |" for row in rows)])


def span(values: Iterable[float], fmt: str = "{:.2f}", unit: str = "") -> str:
    """`a–b` (or `a` where both ends read the same) of the values, formatted."""
    low, high = (fmt.format(v) for v in (min(values), max(values)))
    return f"{low}{unit}" if low == high else f"{low}–{high}{unit}"


def counts(rs: list[Record]) -> str:
    tally = Counter(str(r.status) for r in rs)
    return ", ".join(f"{tally[s]} {s}" for s in STATUS_ORDER if tally[s])


def runs_block() -> str:
    """Every run folder: its records as read now and its wall."""
    rows = []
    for name in RUNS:
        rs, meta = records(name), env(name)
        planned = (meta.get("prediction") or {}).get("measurements")
        of = f" of {planned}" if planned and planned != len(rs) else ""
        forecast = (meta.get("prediction") or {}).get("total_s")
        wall = (meta.get("actual") or {}).get("wall_s")
        seconds = (f"{s:.1f} s" if s else "—" for s in (forecast, wall))
        rows.append((f"`{name}/`", f"{len(rs)}{of}", counts(rs), *seconds))
    return table(("run", "records", "as read now", "forecast then", "wall"), rows)


def pytest_block() -> str:
    """What `pytest -m gpu` said in each session that ran it."""
    progress = (CHECK / "pytest-gpu.log").read_text().split()[-1]  # -q's line of one mark per test
    summary = re.findall(r"^=+ (.+) in [\d.]+s =+$", (TIMER / "pytest-gpu.log").read_text(), re.MULTILINE)[-1]
    return (f"- `{(CHECK / 'pytest-gpu.log').relative_to(ROOT)}`: {len(progress)} tests reported before its limit, "
            f"{progress.count('F')} failed, {progress.count('s')} skipped, none named (`-q`).\n"
            f"- `{(TIMER / 'pytest-gpu.log').relative_to(ROOT)}`: {summary}.")


def cell(r: Record | None) -> str:
    if r is None:
        return "·"
    if r.status == "ok":
        return f"{'~' if r.noisy else ''}{r.tflops:.0f}"
    return "—" if r.status == "skipped" else str(r.status)


def four_k() -> dict[str, dict[tuple, tuple[str, Record]]]:
    """backend: (KV heads, window, mode): the run and 4K record (16 heads, causal) of each case, taken from the runs
    where the backend ran a case (check's first, then fa4's and the FlashInfer run's); backends that ran none left
    out."""
    found: dict[str, dict[tuple, tuple[str, Record]]] = {}
    for run in ("check", "fa4", "fijit/cold"):
        mine: dict[str, list[Record]] = {}
        for r in records(run):
            if r.seq_len == SHORT and r.heads == 16 and r.causal:
                mine.setdefault(r.backend, []).append(r)
        for backend, rs in mine.items():
            if any(r.status != "skipped" for r in rs):
                for r in rs:
                    found.setdefault(backend, {}).setdefault((r.kv_heads, r.window, r.mode), (run, r))
    return found


def tflops_block() -> str:
    """TFLOP/s of every backend that ran at 4K (16 heads, d 128, bf16, causal), and the runs each row comes from."""
    rows = []
    for backend, cases in four_k().items():
        ran = sorted({run for run, _ in cases.values()}, key=list(RUNS).index)
        rows.append((f"`{backend}`", *(cell(cases[key][1] if key in cases else None) for key, _ in COLUMNS),
                     ", ".join(f"`{run}/`" for run in ran)))
    return table(("backend", *(head for _, head in COLUMNS), "run"), rows)


def same_case(first: str, second: str) -> list[tuple[Record, Record]]:
    later = {(r.backend, r.case_id): r for r in records(second) if r.status == "ok"}
    return [(r, later[(r.backend, r.case_id)]) for r in records(first)
            if r.status == "ok" and (r.backend, r.case_id) in later]


def repeat_block() -> str:
    """One case measured in two runs of the day."""
    rows = [(f"`{a.backend}`", f"{a.kv_heads} KV {a.mode}", f"`{first}/`", f"{a.time_ms:.4f}", f"`{second}/`",
             f"{b.time_ms:.4f}", f"{b.time_ms / a.time_ms:.3f}")
            for first, second in (("check", "fa4"), ("check", "timer-check")) for a, b in same_case(first, second)]
    lines = table(("backend", "4K case", "run", "ms", "run", "ms", "ratio"), rows)
    pairs = same_case("fijit/cold", "fijit/warm")
    ratios = [b.time_ms / a.time_ms for a, b in pairs]
    return f"{lines}\n\nFlashInfer, `fijit/warm/` against `fijit/cold/`: {len(pairs)} cases, {span(ratios, '{:.3f}')}."


def do_bench_pairs() -> list[tuple[Record, dict[str, Any], str, bool]]:
    """(attnbench's 4K forward, do_bench's entry, its file, taken in the same device call)."""
    pairs = []
    for file, own in DO_BENCH.items():
        for x in json.loads((CHECK / file).read_text()):
            for run in ("check", "fa4"):
                pairs += [(r, x, file, run == own) for r in records(run)
                          if "ms" in x and r.status == "ok" and r.window is None and r.mode == "fwd"
                          and (r.backend, r.seq_len, r.kv_heads) == (x["name"], x["seq"], x["kv_heads"])]
    return pairs


def do_bench_block() -> str:
    """attnbench's median against triton.testing.do_bench's on the same 4K forward."""
    pairs = do_bench_pairs()
    rows = [(f"`{r.backend}`", r.kv_heads, f"{r.time_ms:.4f}", f"{x['ms']:.4f}", f"`{file}`",
             f"{r.time_ms / x['ms']:.3f}") for r, x, file, same in pairs if same]
    gaps: dict[str, list[float]] = {}
    across: dict[str, list[float]] = {}
    for r, x, _, same in pairs:
        (gaps if same else across).setdefault(r.backend, []).append(abs(r.time_ms / x["ms"] - 1))
    said = ", ".join(f"`{b}` {max(g):.1%}" for b, g in gaps.items())
    other = ", ".join(f"`{b}` {max(g):.1%}" for b, g in across.items())
    return (table(("backend", "KV heads", "attnbench ms", "do_bench ms", "do_bench's file", "ratio"), rows)
            + f"\n\nThe largest gap in the same device call: {said}. Against the other call's do_bench: {other}.")


def declares(r: Record) -> bool:
    patterns = default_registry().get(r.backend).capabilities.attention_kernels(r.device, r.mode)
    return any(re.search(p, k["name"]) for p in patterns for k in r.kernels or ())


def kernel_rows(rs: list[Record]) -> list[tuple[object, ...]]:
    by: dict[str, list[Record]] = {}
    for r in rs:
        by.setdefault(r.backend, []).append(r)
    rows = []
    for backend, mine in by.items():
        shares = [r.attention_share for r in mine if r.attention_share is not None]
        top = next((r.kernels[0]["name"] for r in mine if r.kernels and r.mode == "fwd"), None)
        named = f"`{top[:44]}…`" if top and len(top) > 45 else f"`{top}`" if top else mine[0].kernels_reason
        rows.append((f"`{backend}`", len(mine), sum(map(declares, mine)), span(shares) if shares else "—", named))
    return rows


def kernels_block() -> str:
    """Every measured CUDA record's kernels against what its backend declares now, and the logs' last lines."""
    measured = [r for run in ("check", "fa4", "fijit/cold") for r in records(run)
                if r.device == "cuda" and r.status in ("ok", "implausible", "mismatch", "wrong_kernel")]
    rows = kernel_rows(measured)
    named = sum(1 for row in rows if row[1] == row[2])
    logs = "\n".join(f"- `{log}`: {(CHECK / log).read_text().splitlines()[-1]}"
                     for log in ("kernels.log", "kernels-fa4.log"))
    return (table(("backend", "measured", "naming a declared kernel", "attention share", "top forward kernel"), rows)
            + f"\n\n{named} backends name a declared kernel in every measured record.\n\n{logs}")


def memory_block() -> str:
    """The recounted estimates against the peaks the H200 measured, and every other `ok` record's."""
    registry = default_registry()

    def now(r: Record) -> int:
        return registry.get(r.backend).estimate_memory(case_of(r))

    rows = []
    for run, backend, case_id in MEMORY_ROWS:
        r = next(r for r in records(run) if (r.backend, r.case_id) == (backend, case_id))
        rows.append((f"`{backend}`", f"{r.seq_len // 1024}K {r.kv_heads} KV {r.mode}", f"`{run}/`",
                     f"{r.peak_memory_bytes / MIB:.2f}", f"{r.memory_estimate_bytes / MIB:.2f}", f"{now(r) / MIB:.2f}",
                     f"{now(r) / r.peak_memory_bytes:.3f}"))
    ok = [r for run in ("check", "fa4", "fijit/cold") for r in records(run) if r.status == "ok" and r.peak_memory_bytes]
    ratios = [(r.backend, now(r) / r.peak_memory_bytes) for r in ok]
    off: dict[str, list[float]] = {}
    for backend, ratio in ratios:
        if not 1 / 1.5 <= ratio <= 1.5:
            off.setdefault(backend, []).append(ratio)
    outside = "; ".join(f"`{b}` {len(v)} records, {span(v)}×" for b, v in off.items()) or "none"
    inside = [ratio for _, ratio in ratios if 1 / 1.5 <= ratio <= 1.5]
    return (table(("backend", "case", "run", "peak MiB", "estimate then", "estimate now", "now ÷ peak"), rows)
            + f"\n\nThe {len(ok)} `ok` records with a peak (`check/`, `fa4/`, `fijit/cold/`), estimated now: "
              f"{len(inside)} within {span(inside)}× of their peak; outside 1.5×: {outside}.")


def jit_row(name: str) -> tuple[object, ...]:
    phase, rs = env(name).get("precompile") or {}, records(name)
    built = [r for r in rs if (r.extra or {}).get("kernels_compiled")]
    loads = [r.extra["setup_parts"]["compile"] for r in rs if (r.extra or {}).get("cache_hits")]
    by_measurement = ", ".join(f"{r.extra['setup_parts']['compile'] / 1000:.1f} s" for r in built) or "none"
    return (f"`{name}/`", f"{phase.get('wall_s', 0):.1f} s", phase.get("kernels_compiled", 0),
            phase.get("cache_hits", 0), phase.get("timed_out", 0), by_measurement,
            span(loads, "{:.1f}", " ms") if loads else "—", counts(rs), f"{env(name)['actual']['wall_s']:.1f} s")


def jit_block() -> str:
    """FlashInfer's compile phase cold, warm and past its budget."""
    head = ("run", "compile phase", "modules built", "loaded", "jobs past the limit", "built by a measurement",
            "a first load in a measurement", "records", "wall")
    modules = (env("fijit/cold").get("precompile") or {}).get("modules") or []
    built = ", ".join(f"`{m['built'][0].split('_with_')[0]}`{' (the FP8 K/V case)' if 'kvfp8' in m['case_id'] else ''}"
                      f" {m['s']:.1f} s" for m in sorted(modules, key=lambda m: m["s"]))
    reason = next(r.reason for r in records("fijit/budget"))
    return (table(head, [jit_row(name) for name in ("fijit/cold", "fijit/warm", "fijit/budget")])
            + f"\n\nThe cold phase's jobs, each in seconds, its process's start included: {built}.\n\n"
              f"`fijit/budget/`'s case: \"{reason}\".")


def timer_block() -> str:
    """The timer per runtime: jax-cudnn by the host and by events, beside sdpa-cudnn and sdpa-flash."""
    rows = [(f"`{r.backend}`", r.kv_heads, f"`{r.timer}`", f"{r.time_ms:.4f}", f"{r.extra['host_ms']:.4f}",
             f"{r.extra['events_ms'] * 1000:.2f}", f"{r.extra['events_empty_ms'] * 1000:.2f}", f"{r.tflops:.0f}")
            for r in records("timer-check")]
    jax = [r for r in records("check") if r.backend == "jax-cudnn" and r.time_ms]
    multiples = [r.tflops / r.extra["peak"] for r in jax]
    compare = json.loads((TIMER / "compare.json").read_text())
    early = [(v["sdpa-cudnn host"][0], v["sdpa-cudnn events"][0]) for v in compare.values()]
    host = [v["jax-cudnn host"][0] for v in compare.values()]
    loop = [v["jax-cudnn loop ms"] for v in compare.values()]
    return (table(("backend", "KV heads", "timer", "ms", "host ms", "events µs", "empty pair µs", "TFLOP/s"), rows)
            + f"\n\n- `check/`'s {len(jax)} jax-cudnn forwards, timed by events then: "
              f"{span([r.time_ms * 1000 for r in jax])} µs, {span(multiples, '{:.0f}')}× the datasheet's "
              f"{jax[0].extra['peak']:.0f} TFLOP/s; read now: {counts(jax)}."
              f"\n- `compare.json`: jax-cudnn's call {span(host, '{:.3f}')} ms by the host timer, "
              f"{span(loop, '{:.3f}')} ms a call back to back; sdpa-cudnn's asynchronous call under the host timer "
              f"{span([h for h, _ in early], '{:.3f}')} ms for its {span([e for _, e in early], '{:.3f}')} ms of "
              f"events.")


def long_block() -> str:
    """Every 16K record of the day: the float32 sample index's assert, and FlashInfer's after the int64 one."""
    rows = []
    for name in ("check", "fa4", "naive16k", "fijit/cold"):
        rs = [r for r in records(name) if r.seq_len == LONG]
        numel = {r.batch * r.heads * r.seq_len * r.head_dim for r in rs}
        asserts = sum(1 for r in rs if r.status == "error" and ASSERT in (r.reason or ""))
        other = sorted({r.reason for r in rs if r.status == "error" and ASSERT not in (r.reason or "")})
        rows.append((f"`{name}/`", len(rs), "2^" + "/".join(str(n.bit_length() - 1) for n in sorted(numel)),
                     counts(rs), asserts, "; ".join(f'"{o}"' for o in other) or "—"))
    return table(("run", "16K records", "output elements", "as read now", "device-side assert", "other errors"), rows)


BLOCKS: list[Callable[[], str]] = [runs_block, pytest_block, tflops_block, repeat_block, do_bench_block, kernels_block,
                                   memory_block, jit_block, timer_block, long_block]


def main() -> None:
    print("\n\n".join(block() for block in BLOCKS))


if __name__ == "__main__":
    main()
