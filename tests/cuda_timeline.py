"""A simulated GPU behind torch.cuda's timing calls, in integer nanoseconds: the host's clock, which only host work
advances, and streams whose work starts once the host has enqueued it and the stream is free. A spin delays what
follows it on its stream; an event's timestamp is when its stream reaches it; a blocking call in a runtime of its own
advances the host's clock alone. What the timers see of JAX on the H200 (reports/NVIDIA-H200-20261204-c671d98)."""

from __future__ import annotations

from dataclasses import dataclass, field

TORCH = "torch"  # torch's current stream
RUNTIME = "runtime"  # a runtime's own stream (XLA's)


@dataclass
class Timeline:
    """`pair_ns`: the GPU time an event takes on its stream (two back to back read this apart); `launch_ns`: the
    host's cost of one enqueue; `cycles_per_ns`: the spin's clock."""

    pair_ns: int
    launch_ns: int = 4_000
    sync_ns: int = 2_000
    cycles_per_ns: int = 2
    host_ns: int = 0
    free: dict[str, int] = field(default_factory=lambda: {TORCH: 0, RUNTIME: 0})
    pending: list[Event] = field(default_factory=list)
    log: list[str] = field(default_factory=list)

    def clock(self) -> int:
        return self.host_ns

    def enqueue(self, duration_ns: int, what: str, stream: str = TORCH) -> int:
        """The host launches `duration_ns` of work on `stream`; when it starts on the GPU."""
        self.host_ns += self.launch_ns
        start = max(self.host_ns, self.free[stream])
        self.free[stream] = start + duration_ns
        self.log.append(what)
        return start

    # torch.cuda's pieces the timers use
    def _sleep(self, cycles: int) -> None:
        self.enqueue(cycles // self.cycles_per_ns, "spin")

    def Event(self, enable_timing: bool = False) -> Event:  # noqa: N802 - torch.cuda.Event's name
        return Event(self, enable_timing)

    def synchronize(self) -> None:
        """The device: every stream of the context, a runtime's too."""
        self.host_ns = max(self.host_ns, *self.free.values()) + self.sync_ns
        for event in self.pending:
            event.done = True
        self.pending.clear()

    # the work timed
    def torch_kernel(self, duration_ns: int) -> None:
        """An asynchronous launch on torch's stream."""
        self.enqueue(duration_ns, "kernel")

    def blocking_call(self, duration_ns: int, dispatch_ns: int) -> None:
        """A runtime's call (JAX's compiled call with block_until_ready): its dispatch, its kernel on its own stream,
        and the host held until the kernel ends."""
        self.host_ns += dispatch_ns
        start = max(self.host_ns, self.free[RUNTIME])
        self.free[RUNTIME] = start + duration_ns
        self.host_ns = self.free[RUNTIME]
        self.log.append("runtime call")

    def host_work(self, duration_ns: int) -> None:
        """Python in the call before it launches (a wrapper slow to enqueue)."""
        self.host_ns += duration_ns


class Event:
    def __init__(self, timeline: Timeline, enable_timing: bool) -> None:
        self.timeline, self.timing, self.at, self.done = timeline, enable_timing, None, False

    def record(self) -> None:
        self.at = self.timeline.enqueue(self.timeline.pair_ns, "event")
        self.done = False
        self.timeline.pending.append(self)

    def elapsed_time(self, end: Event) -> float:
        if not (self.timing and end.timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if not (self.done and end.done) or self.at is None or end.at is None:
            raise RuntimeError("Both events must be completed before calculating elapsed time.")
        return (end.at - self.at) / 1e6


class Flush:
    """The L2 flush buffer's zero_(): a memset on torch's stream."""

    def __init__(self, timeline: Timeline, duration_ns: int) -> None:
        self.timeline, self.duration_ns = timeline, duration_ns

    def zero_(self) -> None:
        self.timeline.enqueue(self.duration_ns, "flush")
