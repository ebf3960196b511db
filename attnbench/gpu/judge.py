"""Pure judgements of a GPU's state: who else is on it, whether heat or power slowed it, whether its clocks are locked.

`throttled` means one thing everywhere: a clock event reason that is throttling (heat or power: sw_power_cap,
hw_slowdown, sw/hw_thermal_slowdown, hw_power_brake_slowdown) or a process on the GPU that is not this run's
own — never this process, never the harness that started it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from attnbench.gpu.state import THROTTLING_NAMES, GpuProcess, GpuState

# One step of the SM clock table (15 MHz on Hopper): a clock this close to its target counts as at it.
CLOCK_SLACK_MHZ = 15


def throttle_reasons(names: tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    """Of these clock event reasons, the ones that mean heat or power slowed the GPU."""
    return tuple(name for name in THROTTLING_NAMES if name in (names or ()))


@dataclass(frozen=True)
class Others:
    """The processes on a GPU that are not this run's, as far as their pids tell."""

    listed: tuple[GpuProcess, ...]  # every listed process not known to be ours
    count: int  # how many of them are someone else's
    pid_namespace_differs: bool  # pids are another namespace's: ours are among `listed`, counted off, not named


def others(processes: tuple[GpuProcess, ...] | list[GpuProcess], own_pid: int, holds_context: bool,
           harness: bool = False, parent_pid: int | None = None) -> Others:
    """Who, of the listed processes, is someone else: not this process, and not the harness when `harness`.

    A process holding a CUDA context that the list does not show by its pid sees the pids of another PID
    namespace (a container): one listed process is this one, which one is unknown, so one is counted off.
    `harness`: this run's own parent (a measuring worker's harness) holds a context on this GPU too; it is
    dropped by its pid (`parent_pid`) where pids compare, else counted off as one more of ours.
    """
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
    """True on evidence of throttling or of another process; False only when both were read and are clean."""
    if throttle_reasons(clock_event_reasons) or other_count:
        return True
    return None if clock_event_reasons is None or other_count is None else False


def clock_lock(state: GpuState) -> tuple[bool | None, str]:
    """Whether the SM clock is locked, and the evidence; None where a snapshot cannot tell.

    NVML has no getter for clocks locked with `nvidia-smi -lgc` (only nvmlDeviceSet/ResetGpuLockedClocks),
    so this judges by behaviour: an idle GPU whose SM clock dropped below its target is not locked; one
    that holds its target while idle is; a busy GPU at its target could be either.
    """
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
        return True, f"the SM clock is held at {current} MHz, below its {target} MHz, by a lock or application clocks"
    return None, f"the GPU was busy at {current} MHz, where locked and boosting clocks look alike"


def judged(state: GpuState, own_pid: int, holds_context: bool, harness: bool = False,
           parent_pid: int | None = None) -> GpuState:
    """The state with its judged fields filled: other processes (see `others`), throttling, clock lock."""
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
