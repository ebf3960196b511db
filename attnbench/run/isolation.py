"""Measurements in a worker process, so a segfault, an exit or a hang costs one record, not the run.

The worker (attnbench.run.child) rebuilds the registry with the run's plugins, keeps the current case's inputs and
reference between backends, and answers each (case, backend name) with the record. One that dies or passes the time
limit costs its measurement; the next one starts a fresh worker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING

from attnbench.records.results import Record
from attnbench.run.child import ChildDied, ChildProcess, child_main, requests
from attnbench.run.recording import unmeasured

if TYPE_CHECKING:
    from attnbench.backends.base import Backend
    from attnbench.core.case import Case
    from attnbench.run.recording import RunInfo
    from attnbench.timing.timers import TimingSettings
    from attnbench.verify.inputs import CaseData

# The worker's start (attnbench.run.child: a subprocess with one end of a socket pair).
WORKER_COMMAND = "import sys; from attnbench.run.isolation import worker_entry; worker_entry(int(sys.argv[1]))"


@dataclass(frozen=True)
class WorkerConfig:
    """What a worker needs to rebuild the parent's measuring setup; plain data, so it pickles."""

    info: RunInfo
    device: str
    settings: TimingSettings
    plugins: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    timer: str = "auto"  # run --timer: the worker builds the same timer
    deterministic: bool = False  # deterministic kernels only (attnbench.verify.determinism)
    trace_dir: str | None = None  # --trace: the run directory (attnbench.run.profiled)


class Isolated:
    """A Measurer that runs each measurement in a long-lived worker, replaced after a crash or timeout."""

    def __init__(self, config: WorkerConfig, timeout_s: float | None = None) -> None:
        self.config = config
        self.timeout_s = timeout_s
        self.worker: ChildProcess | None = None
        self.started = 0  # workers started, for tests and the curious

    def measure(self, case: Case, backend: Backend) -> Record:
        try:
            if self.worker is None:
                self.worker = ChildProcess.start(WORKER_COMMAND, self.config)
                self.started += 1
            self.worker.send(("measure", case.fields(), backend.name))
            message = self.worker.receive(None)
            if message[0] == "started":
                message = self.worker.receive(self.timeout_s)
        except ChildDied as died:
            self._retire()
            return unmeasured(self.config.info, case, backend, "error", f"worker process {died}")
        if message is None:
            self._retire()
            return unmeasured(self.config.info, case, backend, "timeout",
                              f"no result within --timeout {self.timeout_s:g} s; the worker was killed")
        _, fields, retire = message
        if retire:
            self._retire()
        return Record(**fields)

    def abort(self) -> None:
        """Kill the worker now, mid-measurement if need be (a second Ctrl-C)."""
        self._retire()

    def _retire(self) -> None:
        if self.worker is not None:
            self.worker.kill()
            self.worker = None

    def close(self) -> None:
        if self.worker is not None:
            self.worker.stop()
            self.worker = None


def worker_entry(fd: int) -> None:
    """The worker process's start: its socket is `fd`; its first message is the WorkerConfig."""
    child_main(fd, worker_main)


def worker_main(conn: Connection, config: WorkerConfig) -> None:
    """The worker's loop: measure what the parent sends, with the same measurer an in-process run uses, until
    the parent says stop or goes away."""
    import gc

    from attnbench.backends.registry import default_registry
    from attnbench.core.case import Case
    from attnbench.run.measure import InProcess, Settings, cuda_is_broken
    from attnbench.timing.profile import warm_profiler
    from attnbench.timing.timers import timer_for

    registry = default_registry(list(config.plugins))
    gc.collect()
    gc.freeze()  # this process lives for measuring: collections between cases skip torch's own objects
    info = config.info
    if config.device == "cuda" and "CUDA_VISIBLE_DEVICES" in config.env:
        import dataclasses

        import torch

        # The GPU this worker was given, not the parent's first: its name picks the peak for percent_of_peak.
        info = dataclasses.replace(info, device_name=torch.cuda.get_device_name(0))
    measurer = InProcess(timer_for(config.device, config.timer),
                         Settings(info, config.settings, deterministic=config.deterministic,
                                  trace_dir=Path(config.trace_dir) if config.trace_dir else None))
    warm_profiler()  # its one-time imports are the worker's start, never inside a measurement's time limit
    conn.send(("ready",))

    def started(current: CaseData) -> None:
        try:  # the reference is ours, not the backend's: make it before the time limit starts
            _ = current.reference, current.naive
        except Exception:  # noqa: BLE001 - the measurement meets the same failure and records it
            pass
        conn.send(("started",))

    for message in requests(conn):
        _, fields, name = message
        case = Case(**fields)
        record = measurer.measure(case, registry.get(name), on_start=started)
        if "CUDA_VISIBLE_DEVICES" in config.env:  # one worker per GPU: say which GPU measured this
            record.extra["gpu"] = config.env["CUDA_VISIBLE_DEVICES"]  # its physical id (or UUID)
            record.extra["gpu_name"] = info.device_name
        retire = record.status == "error" and cuda_is_broken(case.device)
        conn.send(("record", record.to_dict(), retire))
        if retire:
            return
