"""Where a call's work runs, and whether CUDA events saw it: the host's time per call beside the events'
(docs/conventions.md "Timing"). Events time torch's current stream only; a runtime with its own stream (JAX,
ONNX Runtime's CUDA provider) is timed on the host around its blocking call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnbench.core import policy

# Capabilities.runs_on: the call enqueues its work on torch's current stream, or runs it in its own runtime
# (its own stream) and returns when it is done.
TORCH_STREAM = "torch-stream"
OWN_RUNTIME = "own-runtime"
WORK_PLACES = (TORCH_STREAM, OWN_RUNTIME)


@dataclass(frozen=True)
class Bracket:
    """Medians per call (ms): the host's time, the events' on torch's stream behind the launch cover, and an
    empty pair's (two events back to back after the spin; None without a spin)."""

    host_ms: float
    events_ms: float
    empty_ms: float | None

    def extra(self) -> dict[str, Any]:
        made: dict[str, Any] = {"host_ms": self.host_ms, "events_ms": self.events_ms}
        if self.empty_ms is not None:
            made["events_empty_ms"] = self.empty_ms
        return made

    @property
    def share(self) -> float:
        """The events' share of the host's time."""
        return self.events_ms / self.host_ms if self.host_ms > 0 else 1.0

    def saw(self) -> str:
        return (f"the events on torch's stream saw {us(self.events_ms)} of the {us(self.host_ms)} each call "
                f"held the host ({self.share:.1%}, under {policy.percent(policy.EVENTS_SHARE)})")


def us(ms: float) -> str:
    return f"{ms * 1e3:.3g} us"


def judged(bracket: Bracket | None, runs_on: str) -> tuple[str | None, str | None]:
    """(problem, note): a call declared to run in its own runtime whose events saw little of it is noted, and
    one whose events saw far more than it held the host is a problem (it returned before its work was done);
    an undeclared one whose events bracketed nothing while it held the host is a problem (its time is of no
    work)."""
    if bracket is None:
        return None, None
    if runs_on == OWN_RUNTIME and bracket.share > policy.EARLY_RETURN_FACTOR:
        return ("the call, declared to block, returned before its work was done: the events on torch's "
                f"stream saw {us(bracket.events_ms)}, over {policy.EARLY_RETURN_FACTOR:g}x the "
                f"{us(bracket.host_ms)} it held the host (a call that enqueues on torch's stream declares "
                f"Capabilities(runs_on=\"{TORCH_STREAM}\"))"
                ), None
    if bracket.share >= policy.EVENTS_SHARE:
        return None, None
    if runs_on == OWN_RUNTIME:
        return None, f"{bracket.saw()}: its work runs in its own runtime, as declared; the time is the host's"
    empty = bracket.empty_ms
    if empty is None or bracket.events_ms > policy.EMPTY_PAIR_FACTOR * empty:
        return None, None
    return (f"{bracket.saw()}, within {policy.EMPTY_PAIR_FACTOR:g}x an empty pair's {us(empty)}: they "
            "bracketed nothing, the call's work ran off torch's stream (a runtime of its own declares "
            f"Capabilities(runs_on=\"{OWN_RUNTIME}\"), docs/backends.md#plugins)"), None
