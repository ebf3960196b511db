"""The verdict of every backend × input distribution × dtype in a run of `suites/stress.yaml`, as the Markdown table
docs/results.md "Numerics stress" holds (tests/test_stress_table.py keeps the two equal).

A cell is the worst status over the run's masks and its largest error over bound (`ok 0.41`: the worst of its
records used 41% of its bound); `†` marks a case where naive attention in that dtype is itself off by more than
attnbench.verify.check.DTYPE_LIMITED of the reference's scale (the dtype cannot hold these inputs, so the bound is
wide); `—` is a skip (every record of the cell skipped). The lines after the table name each record that is not
`ok` or skipped, with its case id and reason.

    python scripts/stress_table.py reports/cpu-AMD-EPYC-2core-stress

The argument is a run directory or its results file (results.jsonl, or a committed run's results.jsonl.gz).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnbench.core.axes import DTYPE_SHORT, INPUTS  # noqa: E402
from attnbench.records.results import stored_lines  # noqa: E402
from attnbench.verify.check import DTYPE_LIMITED  # noqa: E402

# Worse first: the status a cell shows when its records differ.
ORDER = ("error", "mismatch", "wrong_kernel", "timeout", "oom", "ok", "skipped")


def cell(records: list[dict[str, Any]]) -> str:
    """One backend, distribution and dtype, over the run's masks."""
    ran = [r for r in records if r["status"] != "skipped"]
    if not ran:
        return "—"
    status = min((r["status"] for r in ran), key=ORDER.index)
    ratios = [r["max_abs_error"] / r["error_bound"] for r in ran
              if r.get("max_abs_error") is not None and r.get("error_bound")]
    limited = any((r.get("extra") or {}).get("naive_relative_error", 0) > DTYPE_LIMITED for r in ran)
    worst = f" {max(ratios):.2f}" if ratios and status in ("ok", "mismatch") else ""
    nonfinite = " NaN" if any((r.get("extra") or {}).get("nonfinite") for r in ran) else ""
    return f"{status}{worst}{nonfinite}{' †' if limited else ''}"


def table(records: list[dict[str, Any]]) -> str:
    """The Markdown table and the lines naming every failing record."""
    dtypes = [d for d in DTYPE_SHORT if any(r["dtype"] == d for r in records)]
    backends = list(dict.fromkeys(r["backend"] for r in records))
    lines = ["| backend | dtype | " + " | ".join(INPUTS) + " |", "|---|---|" + "---|" * len(INPUTS)]
    for backend in backends:
        for dtype in dtypes:
            cells = [cell([r for r in records if r["backend"] == backend and r["dtype"] == dtype
                           and (r.get("inputs") or "randn") == kind]) for kind in INPUTS]
            if any(c != "—" for c in cells):
                lines.append(f"| {backend} | {DTYPE_SHORT[dtype]} | " + " | ".join(cells) + " |")
    failing = [r for r in records if r["status"] not in ("ok", "skipped")]
    if failing:
        lines.append("")
    lines += [f"- `{r['backend']}` on `{r['case_id']}`: {r['status']}, {r.get('reason')}" for r in failing]
    return "\n".join(lines) + "\n"


def main() -> None:
    sys.stdout.write(table(stored_lines(Path(sys.argv[1]))))


if __name__ == "__main__":
    main()
