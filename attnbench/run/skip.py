"""The one rule that decides, before any tensor exists, that a measurement is recorded `skipped`, and why.

A pure function of what is known about the backend, the case and the device: the measurement asks it with the
live facts (this process's conformance check, the library's availability, the free device memory), the forecast
with the same facts or a datasheet's, so that what the forecast prices as a skip is what the run skips.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnbench.backends.base import refusal
from attnbench.core.units import fmt_size
from attnbench.verify.determinism import is_refusal

if TYPE_CHECKING:
    from attnbench.backends.base import Backend
    from attnbench.core.case import Case

# A case whose analytic estimate exceeds free device memory by this factor is skipped without trying it.
MEMORY_SKIP_FACTOR = 2.0


@dataclass(frozen=True)
class Facts:
    """What a skip depends on beyond the case and the backend's declarations."""

    conformance: str | None = None  # the adapter's calls against the installed library: None when they fit
    availability: str | None = None  # why the backend cannot run on the case's device at all
    free_memory: int | None = None  # free bytes on the device; None where no limit is checked (a CPU)
    timer_modes: tuple[str, ...] | None = None  # the modes the timer can time; None for every mode
    timer_name: str = ""
    deterministic: bool = False  # the run asked for deterministic kernels (attnbench.verify.determinism)


def why_skipped(case: Case, backend: Backend, facts: Facts) -> str | None:
    """Why (case, backend) is not tried, in the order a user needs to hear it; None to try it. (Backend.skip_reason
    is another question: whether an exception the library raised is its refusal.)"""
    reason = facts.conformance or facts.availability or refusal(backend, case)
    if reason:
        return reason
    if facts.deterministic and is_refusal(how := backend.deterministic(case)):
        return f"deterministic asked, {how}"
    if facts.timer_modes is not None and case.mode not in facts.timer_modes:
        return f"the {facts.timer_name} timer times {'/'.join(facts.timer_modes)} only, not {case.mode}"
    estimate = backend.estimate_memory(case)
    if facts.free_memory is not None and estimate > MEMORY_SKIP_FACTOR * facts.free_memory:
        return (f"estimated memory {fmt_size(estimate)} exceeds {MEMORY_SKIP_FACTOR:g}x the free device "
                f"memory {fmt_size(facts.free_memory)}; not tried")
    return None
