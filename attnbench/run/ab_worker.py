"""The worker one side of an A/B runs in (attnbench.run.ab): a child process started with that side's Python, so it
measures with that environment's torch, libraries and attnbench.

It answers ("env",) with its environment's facts, ("measure", case fields, backend) with a measurement's first round
as `run` makes it, and ("resample", case fields, backend, timing) with one later round's samples, or none and why.
"""

from __future__ import annotations

from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from attnbench.run.child import child_main, requests

if TYPE_CHECKING:
    from attnbench.run.isolation import WorkerConfig

# The worker's start in the other environment's Python (attnbench.run.child.ChildProcess.start).
AB_WORKER_COMMAND = "import sys; from attnbench.run.ab_worker import worker_entry; worker_entry(int(sys.argv[1]))"


def worker_entry(fd: int) -> None:
    """The worker process's start: its socket is `fd`; its first message is the WorkerConfig."""
    child_main(fd, worker_main)


def worker_main(conn: Connection, config: WorkerConfig) -> None:
    """Measure and re-time what the parent sends, until it says stop or goes away."""
    from attnbench.backends.registry import default_registry
    from attnbench.core.case import Case
    from attnbench.run.env import collect_env
    from attnbench.run.heap import release_memory
    from attnbench.run.measure import InProcess, Settings
    from attnbench.run.rounds import resample
    from attnbench.timing.timers import timer_for

    registry = default_registry(list(config.plugins))
    measurer = InProcess(timer_for(config.device, config.timer), Settings(config.info, config.settings))
    conn.send(("ready",))
    for message in requests(conn):
        if message[0] == "env":
            conn.send(("env", collect_env(config.device)))
        elif message[0] == "measure":
            _, fields, name = message
            conn.send(("record", measurer.measure(Case(**fields), registry.get(name)).to_dict()))
        elif message[0] == "resample":
            _, fields, name, timing = message
            case = Case(**fields)
            try:
                samples, reason = resample(measurer.data_for(case), registry.get(name), measurer.timer, timing), None
            except Exception as exc:  # noqa: BLE001 - a round that fails is one pair fewer, and says why
                samples, reason = [], f"{type(exc).__name__}: {exc}"
            finally:
                release_memory(case.device)
            conn.send(("samples", samples, reason))
