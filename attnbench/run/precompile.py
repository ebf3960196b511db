"""The compile phase: each graph or JIT module the run will compile, compiled by the measurement's `prepare` in
worker processes within a budget, all ended before the first measurement (docs/run-time.md, "Compiling ahead")."""

from __future__ import annotations

import gc
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from attnbench.records.parts import SetupParts, part_of
from attnbench.run.child import ChildDied, ChildProcess, child_main, join_threads, requests

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from attnbench.backends.base import Backend
    from attnbench.core.case import Case

# Each process holds a CUDA context and a case's tensors.
MAX_DEFAULT_WORKERS = 16
ESTIMATE_GPU_WORKERS = 16
JOB_TIMEOUT_S = 900.0  # unless --compile-timeout
NOTE_EVERY_S = 0.5
WORKER_COMMAND = "import sys; from attnbench.run.precompile import worker_entry; worker_entry(int(sys.argv[1]))"
MAX_LISTED_FAILURES = 20  # in env.json; all are counted


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_workers(cores: int | None = None) -> int:
    """--compile-workers when not given; 0 (no pool) where under 2."""
    count = min((usable_cores() if cores is None else cores) - 1, MAX_DEFAULT_WORKERS)
    return count if count >= 2 else 0


@dataclass(frozen=True)
class Job:
    """One graph to compile, and the cases whose `prepare` compiles it."""

    key: str
    backend: str
    cases: tuple[Case, ...]


def jobs_of(tasks: list[tuple[Case, Backend]], cached: set[str]) -> list[Job]:
    """The compile keys `cached` lacks, of cases the backend would run, backward graphs first."""
    from attnbench.backends.base import refusal

    cases: dict[str, list[Case]] = {}
    backends: dict[str, str] = {}
    limits: dict[str, int] = {}
    for case, backend in tasks:
        if not backend.cost.compiles:
            continue
        key = backend.compile_key(case)
        if key is None or (key in cached and backend.cost.jit is None) or refusal(backend, case):
            continue
        group = cases.setdefault(key, [])
        backends[key] = backend.name
        limits[key] = backend.compiles_before_sharing(case) or 1
        lengths = {(c.seq_len, c.kv_seq_len) for c in group}
        if len(group) < limits[key] and (case.seq_len, case.kv_seq_len) not in lengths:
            group.append(case)
    jobs = [Job(key, backends[key], tuple(group)) for key, group in cases.items()]
    return (interleaved([job for job in jobs if job.cases[0].needs_grad])
            + interleaved([job for job in jobs if not job.cases[0].needs_grad]))


def interleaved(jobs: list[Job]) -> list[Job]:
    """One job per length in turn, longest first, so the processes do not all hold the longest cases at once."""
    buckets: dict[tuple[int, int], deque[Job]] = {}
    for job in jobs:
        buckets.setdefault((job.cases[0].seq_len, job.cases[0].kv_seq_len), deque()).append(job)
    queues = [buckets[length] for length in sorted(buckets, reverse=True)]
    order: list[Job] = []
    while queues:
        order += [queue.popleft() for queue in queues]
        queues = [queue for queue in queues if queue]
    return order


@dataclass
class JobResult:
    """`compiled`, `skipped` (the measurement skips it too), `failed` (the measurement compiles it itself) or
    `timed_out` (its measurements are skipped)."""

    job: Job
    status: str
    seconds: float
    kernels_compiled: int = 0
    cache_hits: int = 0
    reason: str | None = None
    modules: tuple[str, ...] = ()


@dataclass
class PoolResult:
    """env.json's `precompile`."""

    workers: int
    jobs: int
    limit_s: float = JOB_TIMEOUT_S
    results: list[JobResult] = field(default_factory=list)
    wall_s: float = 0.0
    stopped: bool = False

    def compiled_keys(self) -> dict[str, float]:
        return {r.job.key: r.seconds for r in self.results if r.status == "compiled"}

    def over_budget(self) -> dict[str, str]:
        """Each key stopped at its budget, with its reason."""
        return {r.job.key: r.reason or "" for r in self.results if r.status == "timed_out"}

    def to_dict(self) -> dict[str, Any]:
        failed = [r for r in self.results if r.status in ("failed", "timed_out")]
        return {
            "workers": self.workers, "jobs": self.jobs, "limit_s": self.limit_s, "wall_s": round(self.wall_s, 2),
            "compiled": sum(r.status == "compiled" for r in self.results),
            "skipped": sum(r.status == "skipped" for r in self.results),
            "failed": sum(r.status == "failed" for r in self.results),
            "timed_out": sum(r.status == "timed_out" for r in self.results),
            "not_done": self.jobs - len(self.results), "stopped": self.stopped,
            "kernels_compiled": sum(r.kernels_compiled for r in self.results),
            "cache_hits": sum(r.cache_hits for r in self.results),
            "compile_s_sum": round(sum(r.seconds for r in self.results), 2),
            "failures": [{"backend": r.job.backend, "case_id": r.job.cases[0].case_id, "reason": r.reason}
                         for r in failed[:MAX_LISTED_FAILURES]],
            "modules": [{"backend": r.job.backend, "case_id": r.job.cases[0].case_id, "built": list(r.modules),
                         "s": round(r.seconds, 2)} for r in self.results if r.modules],
        }


@dataclass(frozen=True)
class PoolConfig:
    """Plain data, so it pickles."""

    device: str
    plugins: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


def precompile(jobs: list[Job], workers: int, device: str, plugins: tuple[str, ...] = (),
               envs: list[dict[str, str]] | None = None, limit_s: float | None = None,
               should_stop: Callable[[], bool] = lambda: False,
               on_done: Callable[[JobResult], None] | None = None) -> PoolResult:
    """`envs`: each process's extra environment, in turn; `limit_s`: each job's budget. A failed process is
    replaced: a compile error can leave Dynamo skipping the backend's frame."""
    result = PoolResult(workers=min(workers, len(jobs)), jobs=len(jobs),
                        limit_s=JOB_TIMEOUT_S if limit_s is None else limit_s)
    start = time.perf_counter()
    pool = _Pool(jobs, result, result.limit_s, should_stop, on_done)
    pool.run([PoolConfig(device, plugins, (envs[slot % len(envs)] if envs else {})) for slot in range(result.workers)])
    result.wall_s = time.perf_counter() - start
    return result


class _Pool:
    def __init__(self, jobs: list[Job], result: PoolResult, limit: float, should_stop: Callable[[], bool],
                 on_done: Callable[[JobResult], None] | None) -> None:
        self.queue = deque(jobs)
        self.result = result
        self.limit = limit
        self.should_stop = should_stop
        self.on_done = on_done
        self.lock = threading.Lock()
        self.live: list[ChildProcess] = []

    def run(self, configs: list[PoolConfig]) -> None:
        join_threads(self.work, configs, "attnbench-compile", self.stop)

    def stop(self) -> None:
        """No compile process outlives the run."""
        self.queue.clear()
        for worker in list(self.live):
            worker.kill()

    def work(self, config: PoolConfig) -> None:
        worker: ChildProcess | None = None
        while (job := self.next_job()) is not None:
            began = time.perf_counter()
            worker, (_, status, kernels, hits, reason, modules) = self.compile(worker, job, config)
            self.note(JobResult(job, status, time.perf_counter() - began, kernels, hits, reason, tuple(modules)))
            if status in ("failed", "timed_out") and worker is not None:
                worker.kill()
                worker = None
        if worker is not None:
            worker.stop()

    def next_job(self) -> Job | None:
        with self.lock:
            if self.should_stop():
                self.result.stopped = True
                self.queue.clear()
            return self.queue.popleft() if self.queue else None

    def compile(self, worker: ChildProcess | None, job: Job, config: PoolConfig) -> tuple[ChildProcess | None, tuple]:
        try:
            if worker is None:
                worker = ChildProcess.start(WORKER_COMMAND, config)
                with self.lock:
                    self.live.append(worker)
            worker.send(("compile", job.backend, [case.fields() for case in job.cases]))
            message, compiling = self.answer(worker)
        except (ChildDied, OSError) as died:
            if worker is not None:
                worker.kill()
            return None, ("done", "failed", 0, 0, f"compile process {died}", ())
        if message is None:
            what = compiling or f"the compile ahead of {job.backend} {job.cases[0].case_id}"
            message = ("done", "timed_out", 0, 0, f"{what} did not finish within {self.limit:g} s, the compile "
                                                  "phase's limit (--compile-timeout)", ())
        return worker, message

    def answer(self, worker: ChildProcess) -> tuple[tuple | None, str | None]:
        """The job's result (None past the budget), and what the process last said it compiled."""
        deadline = time.monotonic() + self.limit
        compiling = None
        while (message := worker.receive(max(0.0, deadline - time.monotonic()))) is not None:
            if message[0] != "compiling":
                return message, compiling
            compiling = message[1]
        return None, compiling

    def note(self, done: JobResult) -> None:
        with self.lock:
            self.result.results.append(done)
        if self.on_done is not None:
            self.on_done(done)


def worker_entry(fd: int) -> None:
    child_main(fd, worker_main)


def worker_main(conn: Connection, config: PoolConfig) -> None:
    from attnbench.backends.registry import default_registry
    from attnbench.core.case import Case

    registry = default_registry(list(config.plugins))
    conn.send(("ready",))
    for message in requests(conn):
        _, name, cases = message
        backend = registry.get(name)
        with saying_what_compiles(conn, backend):
            done = compile_job(backend, [Case(**fields) for fields in cases])
        conn.send(("done", *done))


@contextmanager
def saying_what_compiles(conn: Connection, backend: Backend) -> Iterator[None]:
    """A thread sends ("compiling", words) as `backend.compiling()` changes, until the job ends."""
    finished = threading.Event()

    def watch() -> None:
        said = None
        while not finished.wait(NOTE_EVERY_S):
            now = backend.compiling()
            if now and now != said:
                conn.send(("compiling", now))
                said = now

    thread = threading.Thread(target=watch, name="attnbench-compiling", daemon=True)
    thread.start()
    try:
        yield
    finally:
        finished.set()
        thread.join()


def compile_job(backend: Backend, cases: list[Case]) -> tuple[str, int, int, str | None, tuple[str, ...]]:
    """The measurement's own `prepare` on its own inputs (FP8 ones with their scales): (status, kernels compiled,
    cache hits, reason, JIT modules built)."""
    from attnbench.backends.base import Unsupported, first_line, refusal
    from attnbench.backends.conformance import conformance_problem
    from attnbench.run.stages import prepare
    from attnbench.verify.quant_data import case_data

    kernels = hits = 0
    modules: list[str] = []
    for case in cases:
        why = conformance_problem(backend) or backend.availability(case.device) or refusal(backend, case)
        if why:
            return "skipped", kernels, hits, why, tuple(modules)
        try:
            setup = part_of(SetupParts, prepare(case_data(case), backend).prepared.extra)
            kernels += int(setup.kernels_compiled or 0)
            hits += int(setup.cache_hits or 0)
            modules += setup.jit_built or []
        except Unsupported as exc:
            return "skipped", kernels, hits, str(exc), tuple(modules)
        except Exception as exc:  # noqa: BLE001 - the measurement meets and records any failure
            reason = backend.skip_reason(exc, [])
            return ("skipped", kernels, hits, reason, tuple(modules)) if reason else (
                "failed", kernels, hits, f"{type(exc).__name__}: {first_line(exc)}", tuple(modules))
        finally:
            gc.collect()  # the case's tensors
            if case.device == "cuda":
                import torch

                torch.cuda.empty_cache()
    return "compiled", kernels, hits, None, tuple(modules)

