"""One A/B side's worker (attnbench.run.ab), started with that side's Python so it measures with its torch,
libraries and attnbench: answers "env", "measure" (a first round as `run` makes it) and "resample"."""

from __future__ import annotations

from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from attnbench.run.child import child_main, requests

if TYPE_CHECKING:
    from attnbench.run.isolation import WorkerConfig

AB_WORKER_COMMAND = "import sys; from attnbench.run.ab_worker import worker_entry; worker_entry(int(sys.argv[1]))"


def worker_entry(fd: int) -> None:
    child_main(fd, worker_main)


def worker_main(conn: Connection, config: WorkerConfig) -> None:
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
            except Exception as exc:  # noqa: BLE001 - a failed round is one pair fewer, and says why
                samples, reason = [], f"{type(exc).__name__}: {exc}"
            finally:
                release_memory(case.device)
            conn.send(("samples", samples, reason))
