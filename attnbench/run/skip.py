"""The one rule that skips a measurement before any tensor exists: a pure function that the run asks with live facts
and the forecast with the same facts or a datasheet's, so the forecast prices what the run skips."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnbench.backends.base import refusal
from attnbench.core import policy
from attnbench.core.units import fmt_size
from attnbench.verify.determinism import is_refusal

if TYPE_CHECKING:
    from attnbench.backends.base import Backend
    from attnbench.core.case import Case

MEMORY_SKIP_FACTOR = policy.MEMORY_SKIP_FACTOR


@dataclass(frozen=True)
class Facts:
    conformance: str | None = None  # None when the adapter's calls fit the installed library
    availability: str | None = None
    free_memory: int | None = None  # bytes; None where no limit is checked (a CPU)
    timer_modes: tuple[str, ...] | None = None  # None: every mode
    timer_name: str = ""
    deterministic: bool = False
    timer_runs_on: tuple[str, ...] | None = None  # where work it can time runs (Capabilities.runs_on); None: anywhere


def why_skipped(case: Case, backend: Backend, facts: Facts) -> str | None:
    """Why (case, backend) is not tried, in the order a user needs to hear it; None to try it."""
    reason = facts.conformance or facts.availability or refusal(backend, case)
    if reason:
        return reason
    if facts.deterministic and is_refusal(how := backend.deterministic(case)):
        return f"deterministic asked, {how}"
    if facts.timer_modes is not None and case.mode not in facts.timer_modes:
        return f"the {facts.timer_name} timer times {'/'.join(facts.timer_modes)} only, not {case.mode}"
    if facts.timer_runs_on is not None and backend.capabilities.runs_on not in facts.timer_runs_on:
        return (f"the {facts.timer_name} timer times work on torch's stream only; {backend.name}'s runs in "
                "its own runtime")
    estimate = backend.estimate_memory(case)
    if facts.free_memory is not None and estimate > MEMORY_SKIP_FACTOR * facts.free_memory:
        return (f"estimated memory {fmt_size(estimate)} exceeds {MEMORY_SKIP_FACTOR:g}x the free device "
                f"memory {fmt_size(facts.free_memory)}; not tried")
    return None
