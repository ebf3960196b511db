"""Measurements in a worker process, so a segfault, an exit or a hang costs one record, not the run; the next
measurement starts a fresh worker."""

from __future__ import annotations

import dataclasses
import time
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

WORKER_COMMAND = "import sys; from attnbench.run.isolation import worker_entry; worker_entry(int(sys.argv[1]))"


@dataclass(frozen=True)
class WorkerConfig:
    """Plain data, so it pickles."""

    info: RunInfo
    device: str
    settings: TimingSettings
    plugins: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    timer: str = "auto"
    deterministic: bool = False
    trace_dir: str | None = None


class Isolated:
    """A long-lived worker, replaced after a crash or timeout."""

    def __init__(self, config: WorkerConfig, timeout_s: float | None = None) -> None:
        self.config = config
        self.timeout_s = timeout_s
        self.worker: ChildProcess | None = None
        self.started = 0
        self.start_s = 0.0  # the workers' starts, until each said it was ready
        self.stop_s = 0.0  # waiting for the last one to exit

    def measure(self, case: Case, backend: Backend) -> Record:
        try:
            if self.worker is None:
                began = time.perf_counter()
                try:
                    self.worker = ChildProcess.start(WORKER_COMMAND, self.config)
                finally:
                    self.start_s += time.perf_counter() - began
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
        """A second Ctrl-C: kill the worker mid-measurement."""
        self._retire()

    def _retire(self) -> None:
        if self.worker is not None:
            self.worker.kill()
            self.worker = None

    def close(self) -> None:
        if self.worker is not None:
            began = time.perf_counter()
            self.worker.stop()
            self.stop_s += time.perf_counter() - began
            self.worker = None


def worker_entry(fd: int) -> None:
    child_main(fd, worker_main)


def worker_main(conn: Connection, config: WorkerConfig) -> None:
    import gc

    from attnbench.backends.registry import default_registry
    from attnbench.core.case import Case
    from attnbench.run.measure import InProcess, Settings, cuda_is_broken
    from attnbench.timing.profile import warm_profiler
    from attnbench.timing.timers import timer_for

    registry = default_registry(list(config.plugins))
    gc.collect()
    gc.freeze()  # collections between cases skip torch's own objects
    info = config.info
    if config.device == "cuda" and "CUDA_VISIBLE_DEVICES" in config.env:
        import torch

        # The GPU given, not the parent's first: its name picks the peak for percent_of_peak.
        info = dataclasses.replace(info, device_name=torch.cuda.get_device_name(0))
    measurer = InProcess(timer_for(config.device, config.timer),
                         Settings(info, config.settings, deterministic=config.deterministic,
                                  trace_dir=Path(config.trace_dir) if config.trace_dir else None))
    warm_profiler()  # its one-time imports stay outside every time limit
    conn.send(("ready",))

    def started(current: CaseData) -> None:
        try:  # the reference is ours, not the backend's: made before the time limit starts
            _ = current.reference, current.naive
        except Exception:  # noqa: BLE001 - the measurement meets and records the same failure
            pass
        conn.send(("started",))

    for message in requests(conn):
        _, fields, name = message
        case = Case(**fields)
        record = measurer.measure(case, registry.get(name), on_start=started)
        if "CUDA_VISIBLE_DEVICES" in config.env:
            gpu = config.env["CUDA_VISIBLE_DEVICES"]  # physical id or UUID
            named = {"gpu": gpu, "gpu_name": info.device_name}
            record = dataclasses.replace(record, extra={**record.extra, **named})
        retire = record.status == "error" and cuda_is_broken(case.device)
        conn.send(("record", record.to_dict(), retire))
        if retire:
            return
