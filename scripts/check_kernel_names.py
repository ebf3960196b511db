"""Which kernel ran, checked on a finished run: every backend's profiled kernels against the names it declares.

    python scripts/check_kernel_names.py DIR [--device cuda]

DIR is a run directory or a folder of them (scripts/gpu-check.sh's). For every record measured on the device
(`ok`, `mismatch`, `wrong_kernel`) of a backend that declares kernel names there (Backend.capabilities.kernel_names):
`wrong_kernel` fails, `kernels: null` fails (the profiler saw nothing of what it declares), and where the run wrote
traces (`run --trace`), the record's trace must be JSON holding the profiled call and the timed sample, and an
event named like a declared kernel. Backends that declare no names on the device are listed as unchecked. The last
line sums it up; the exit status is 1 when anything failed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from attnbench.backends.registry import default_registry  # noqa: E402
from attnbench.records.results import stored_lines, stored_results  # noqa: E402
from attnbench.report.rows import MEASURED  # noqa: E402
from attnbench.timing.profile import LABEL_PREFIX, PROFILED_CALL  # noqa: E402

SAMPLE = LABEL_PREFIX + "timed sample"


def declared(backend: str, device: str, mode: str) -> tuple[str, ...]:
    """The backend's declared kernel name patterns on `device` in `mode`; () for one this checkout does not know."""
    try:
        return default_registry().get(backend).capabilities.attention_kernels(device, mode)
    except Exception:  # noqa: BLE001 - a plugin's backend: nothing declared here
        return ()


def trace_problem(path: Path, patterns: tuple[str, ...]) -> str | None:
    """Why the trace at `path` does not show the declared kernels running in both of its calls; None when it does."""
    try:
        events = json.loads(path.read_text())["traceEvents"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"{path.name} is not a Chrome trace ({type(exc).__name__}: {exc})"
    names = {str(e.get("name", "")) for e in events if isinstance(e, dict)}
    ranges = [n for n in names if n == PROFILED_CALL or n.startswith(SAMPLE)]
    if len(ranges) != 2:
        return f"{path.name} holds {sorted(ranges) or 'none'} of the profiled call and the timed sample"
    if not any(re.search(p, name) for p in patterns for name in names):
        return f"{path.name} names none of the declared kernels {list(patterns)}"
    return None


def record_problems(r: dict[str, Any], folder: Path, patterns: list[str] | tuple[str, ...]) -> list[str]:
    """What is wrong with one measured record's kernels and its trace (none when they show the declared kernels)."""
    where = f"{r['backend']} {r.get('case_id')}"
    bad = [f"{where}: wrong_kernel: {r.get('reason')}"] if r["status"] == "wrong_kernel" else []
    if not r.get("kernels"):
        return [*bad, f"{where}: no kernels seen ({r.get('kernels_reason')})"]
    problem = trace_problem(folder / r["trace"], patterns) if r.get("trace") else None
    return [*bad, f"{where}: {problem}"] if problem else bad


def check(root: Path, device: str) -> tuple[list[str], int, int]:
    """The log's lines, how many problems they name and how many records were checked."""
    seen: dict[str, set[str]] = {}
    counts: dict[str, list[int]] = {}  # backend: [records, traces]
    unchecked: dict[str, int] = {}
    skipped: set[str] = set()
    bad: list[str] = []
    for results in sorted(filter(None, map(stored_results, [root, *root.glob("*")]))):
        records = stored_lines(results)
        for r in (r for r in records if r.get("device") == device):
            backend = r["backend"]
            if r["status"] not in MEASURED:
                skipped.add(backend)
                continue
            patterns = declared(backend, device, r["mode"])
            if not patterns:
                unchecked[backend] = unchecked.get(backend, 0) + 1
                continue
            tally = counts.setdefault(backend, [0, 0])
            tally[0] += 1
            tally[1] += bool(r.get("kernels") and r.get("trace"))
            bad += record_problems(r, results.parent, patterns)
            if r.get("kernels"):
                seen.setdefault(backend, set()).add(r["kernels"][0]["name"][:120])
    lines = [f"{b}: {n} records, {t} traces; top kernels {sorted(seen.get(b, ()))}"
             for b, (n, t) in sorted(counts.items())]
    lines += [f"{b}: {n} records unchecked: it declares no {device} kernel names" for b, n in sorted(unchecked.items())]
    never = sorted(skipped - set(counts) - set(unchecked))
    if never:
        lines.append(f"not measured here (every record skipped): {', '.join(never)}")
    lines += bad
    lines.append(f"kernel names: {len(counts)} backends checked ({sum(n for n, _ in counts.values())} records, "
                 f"{sum(t for _, t in counts.values())} traces), {len(unchecked)} unchecked, {len(bad)} problems")
    return lines, len(bad), sum(n for n, _ in counts.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    lines, problems, checked = check(args.dir, args.device)
    print("\n".join(lines))
    return 1 if problems or not checked else 0  # a run that checked nothing proves nothing


if __name__ == "__main__":
    sys.exit(main())
