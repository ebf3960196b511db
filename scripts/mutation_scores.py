"""Per-module mutation scores from `mutmut results --all true` (run by `make mutation` after mutmut).

Prints a Markdown table: mutants, killed (a test failed, the mutant hung past mutmut's timeout, or it died
by a signal, as a runaway loop does at the address-space limit), survived, no tests (no test in the selection
reaches the mutated function), other (not checked, suspicious), and killed / mutants.
Then the surviving mutants, by name, for `mutmut show NAME`.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

KILLED = {"killed", "timeout", "segfault", "caught by type check"}


def results(mutmut: str) -> dict[str, str]:
    """Mutant name -> status, as mutmut reports them."""
    out = subprocess.run([mutmut, "results", "--all", "true"], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and name.startswith("attnbench."):
            found[name] = status
    return found


def module_of(mutant: str) -> str:
    """attnbench.core.case.xǁCaseǁkey_range__mutmut_3 -> attnbench/core/case.py"""
    return mutant.rsplit(".", 1)[0].replace(".", "/") + ".py"


def table(found: dict[str, str]) -> tuple[str, list[str]]:
    by_module: dict[str, Counter] = defaultdict(Counter)
    survivors = []
    for name, status in found.items():
        by_module[module_of(name)][status] += 1
        if status == "survived":
            survivors.append(name)
    rows = ["| module | mutants | killed | survived | no tests | other | killed / mutants |",
            "|---|---|---|---|---|---|---|"]
    for module in sorted(by_module):
        c = by_module[module]
        total = sum(c.values())
        if c["not checked"] == total:  # left out of this run (make mutation MUTANTS=...)
            continue
        killed = sum(c[s] for s in KILLED)
        other = total - killed - c["survived"] - c["no tests"]
        rows.append(f"| `{module}` | {total} | {killed} | {c['survived']} | {c['no tests']} | {other} | "
                    f"{100 * killed / total:.0f}% |")
    return "\n".join(rows), sorted(survivors)


def main() -> int:
    mutmut = str(Path(sys.executable).with_name("mutmut"))
    found = results(mutmut)
    if not found:
        print("no mutmut results: run `make mutation` first", file=sys.stderr)
        return 1
    text, survivors = table(found)
    print(text)
    print(f"\nsurviving mutants ({len(survivors)}; `mutmut show NAME` prints each):")
    for name in survivors:
        print(f"  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
