"""Measurements in a worker process, so a segfault, an exit or a hang costs one record, not the run.

The parent starts `python -c ...` with one end of a socket pair, and sends (case, backend name)
pairs over it as pickled messages (multiprocessing's Connection). The worker rebuilds the
registry (built-ins, entry points and the run's plugin specs), keeps the inputs and reference of the
current case between backends, and answers with the record. A worker that dies is described by its
signal or exit code and the last lines it wrote to stderr; one that passes the time limit is killed.
Either way the next measurement starts a fresh worker.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attnbench
from attnbench.gpu import harness
from attnbench.recording import unmeasured
from attnbench.results import Record

if TYPE_CHECKING:
    from attnbench.backends.base import Backend
    from attnbench.case import Case
    from attnbench.inputs import CaseData
    from attnbench.recording import RunInfo
    from attnbench.timing import TimingSettings

STDERR_TAIL_LINES = 5
STDERR_TAIL_CHARS = 400
# A subprocess rather than multiprocessing's spawn: spawn re-imports the parent's __main__, which
# breaks under any unguarded script that calls attnbench.
WORKER_COMMAND = "import sys; from attnbench.isolation import worker_entry; worker_entry(int(sys.argv[1]))"
# How long a worker may take to import torch and the backends before it counts as failed to start.
START_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class WorkerConfig:
    """What a worker needs to rebuild the parent's measuring setup; plain data, so it pickles."""

    info: RunInfo
    device: str
    settings: TimingSettings
    plugins: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    timer: str = "auto"  # run --timer: the worker builds the same timer
    deterministic: bool = False  # deterministic kernels only (attnbench.determinism)


class WorkerDied(Exception):
    """The worker process ended without answering; the message says how."""


class Isolated:
    """A Measurer that runs each measurement in a long-lived worker, replaced after a crash or timeout."""

    def __init__(self, config: WorkerConfig, timeout_s: float | None = None) -> None:
        self.config = config
        self.timeout_s = timeout_s
        self.worker: _Worker | None = None
        self.started = 0  # workers started, for tests and the curious

    def measure(self, case: Case, backend: Backend) -> Record:
        try:
            if self.worker is None:
                self.worker = _Worker.start(self.config)
                self.started += 1
            self.worker.send(("measure", case.fields(), backend.name))
            message = self.worker.receive(None)
            if message[0] == "started":
                message = self.worker.receive(self.timeout_s)
        except WorkerDied as died:
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


class _Worker:
    """One worker process: its pipe, and the file its stderr goes to."""

    def __init__(self, process: subprocess.Popen, conn: Connection, stderr_path: Path) -> None:
        self.process = process
        self.conn = conn
        self.stderr_path = stderr_path

    @classmethod
    def start(cls, config: WorkerConfig) -> _Worker:
        fd, name = tempfile.mkstemp(prefix="attnbench-worker-", suffix=".log")
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        package_root = str(Path(attnbench.__file__).resolve().parent.parent)  # a checkout not installed
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        env.update(config.env)
        if config.device == "cuda":  # the worker does not count this process as another user of its GPU
            env[harness.HARNESS_GPUS_VAR] = ",".join(harness.contexts_held_here())
        try:
            process = subprocess.Popen(
                [sys.executable, "-c", WORKER_COMMAND, str(theirs.fileno())], pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, env=env,
                start_new_session=True,  # Ctrl-C reaches the parent only; it stops after this measurement
            )
        finally:
            os.close(fd)
            theirs.close()
        worker = cls(process, Connection(ours.detach()), Path(name))
        worker.send(("config", config))
        message = worker.receive(START_TIMEOUT_S)
        if message is None:
            worker.kill()
            raise WorkerDied(f"did not start within {START_TIMEOUT_S:g} s")
        return worker

    def send(self, message: tuple) -> None:
        try:
            self.conn.send(message)
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            raise WorkerDied(self.death()) from None

    def receive(self, timeout_s: float | None) -> Any:
        """The worker's next message; None when `timeout_s` passes first; WorkerDied when it ended."""
        try:
            if not self.conn.poll(timeout_s):
                return None
            return self.conn.recv()
        except (EOFError, ConnectionResetError, OSError):
            raise WorkerDied(self.death()) from None

    def death(self) -> str:
        """How the process ended, with the last lines of its stderr."""
        try:
            code = self.process.wait(10)
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            how = "stopped answering"
        elif code < 0:
            how = f"was killed by signal {signal_name(-code)}"
        else:
            how = f"exited with code {code}"
        tail = self.stderr_tail()
        self._remove_log()
        return how + (f"; last stderr: {tail}" if tail else "; it wrote nothing to stderr")

    def stderr_tail(self) -> str:
        try:
            text = self.stderr_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        fatal = [i for i, line in enumerate(lines) if line.startswith("Fatal Python error")]
        if fatal:  # faulthandler's report: the error, then the stack innermost first
            tail = " | ".join(lines[fatal[-1]:fatal[-1] + STDERR_TAIL_LINES])
            return tail[:STDERR_TAIL_CHARS]
        tail = " | ".join(lines[-STDERR_TAIL_LINES:])
        return tail if len(tail) <= STDERR_TAIL_CHARS else "…" + tail[-STDERR_TAIL_CHARS:]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.conn.close()
        self._remove_log()

    def stop(self) -> None:
        """Ask the worker to finish; kill it if it does not."""
        try:
            self.conn.send(("stop",))
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            pass
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    def _remove_log(self) -> None:
        self.stderr_path.unlink(missing_ok=True)


def signal_name(number: int) -> str:
    try:
        return f"{signal.Signals(number).name} ({number})"
    except ValueError:
        return str(number)


def worker_entry(fd: int) -> None:
    """The worker process's start: its socket is `fd`; its first message is the WorkerConfig."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it stops after this measurement
    faulthandler.enable()  # a segfault leaves its Python stack in the stderr tail
    conn = Connection(fd)
    try:
        _, config = conn.recv()
    except (EOFError, OSError):
        return
    worker_main(conn, config)


def worker_main(conn: Connection, config: WorkerConfig) -> None:
    """The worker's loop: measure what the parent sends, with the same measurer an in-process run uses, until
    the parent says stop or goes away."""
    import gc

    from attnbench.case import Case
    from attnbench.measure import InProcess, Settings, cuda_is_broken
    from attnbench.registry import default_registry
    from attnbench.timing import timer_for

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
                         Settings(info, config.settings, deterministic=config.deterministic))
    conn.send(("ready",))

    def started(current: CaseData) -> None:
        try:  # the reference is ours, not the backend's: make it before the time limit starts
            current.reference
            current.naive
        except Exception:  # noqa: BLE001 - the measurement meets the same failure and records it
            pass
        conn.send(("started",))

    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] == "stop":
            return
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
