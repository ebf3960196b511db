"""Pure judgements of a GPU's state. `throttled` means a throttling clock event reason (heat or power) or a
process on the GPU that is not this run's own (docs/gpu.md)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from attnbench.gpu.state import THROTTLING_NAMES, GpuProcess, GpuState

# One SM clock table step (Hopper): this close to its target counts as at it.
CLOCK_SLACK_MHZ = 15


def throttle_reasons(names: tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    """The reasons that mean heat or power slowed the GPU."""
    return tuple(name for name in THROTTLING_NAMES if name in (names or ()))


@dataclass(frozen=True)
class Others:
    """The processes on a GPU that are not this run's, as their pids tell."""

    listed: tuple[GpuProcess, ...]  # not known to be ours
    count: int  # someone else's
    pid_namespace_differs: bool  # ours are among `listed`, counted off, not named


def others(processes: tuple[GpuProcess, ...] | list[GpuProcess], own_pid: int, holds_context: bool,
           harness: bool = False, parent_pid: int | None = None) -> Others:
    """Listed processes but this one and, with `harness`, the parent. When the list does not show our pid
    (another PID namespace) ours are counted off unnamed."""
    processes = tuple(processes)
    comparable = not (holds_context and processes and all(p.pid != own_pid for p in processes))
    listed = tuple(p for p in processes if p.pid != own_pid) if comparable else processes
    ours_unnamed = 0 if comparable else 1
    if harness and comparable:
        listed = tuple(p for p in listed if p.pid != parent_pid)
    elif harness:
        ours_unnamed += 1
    return Others(listed, max(0, len(listed) - ours_unnamed), not comparable)


def throttled(clock_event_reasons: tuple[str, ...] | None, other_count: int | None) -> bool | None:
    """True on evidence; False only when both were read and are clean."""
    if throttle_reasons(clock_event_reasons) or other_count:
        return True
    return None if clock_event_reasons is None or other_count is None else False


def clock_lock(state: GpuState) -> tuple[bool | None, str]:
    """Whether the SM clock is locked, and the evidence; None where a snapshot cannot tell. NVML has no getter
    for `nvidia-smi -lgc` locks, so this judges by behaviour: idle below its target is not locked, idle at it
    is."""
    current, target = state.sm_clock_mhz, state.sm_clock_app_mhz or state.sm_clock_max_mhz
    reasons = state.clock_event_reasons or ()
    if current is None or target is None:
        return None, "the SM clock could not be read"
    below = current < target - CLOCK_SLACK_MHZ
    if "gpu_idle" in reasons:
        if below:
            return False, f"the SM clock drops to {current} MHz when idle, {target} MHz under load"
        return True, f"the SM clock holds {current} MHz while idle"
    throttles = throttle_reasons(reasons)
    if throttles:
        return None, f"throttled ({', '.join(throttles)}) at {current} MHz"
    if below and "applications_clocks_setting" in reasons:
        return True, (f"the SM clock is held at {current} MHz, below its {target} MHz, by a "
                      "lock or application clocks")
    return None, f"the GPU was busy at {current} MHz, where locked and boosting clocks look alike"


def judged(state: GpuState, own_pid: int, holds_context: bool, harness: bool = False,
           parent_pid: int | None = None) -> GpuState:
    """The state with other processes, throttling and clock lock filled in."""
    if state.error is not None:
        return state
    if state.processes is None:
        listed, count, differs = None, None, False
    else:
        found = others(state.processes, own_pid, holds_context, harness, parent_pid)
        listed, count, differs = found.listed, found.count, found.pid_namespace_differs
    locked, evidence = clock_lock(state)
    return replace(state, other_processes=listed, other_process_count=count, pid_namespace_differs=differs,
                   throttle_reasons=throttle_reasons(state.clock_event_reasons),
                   throttled=throttled(state.clock_event_reasons, count), clocks_locked=locked,
                   clocks_lock_evidence=evidence)
