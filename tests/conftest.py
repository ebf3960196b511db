"""Shared test helpers: a fast runner, a case factory, and the `gpu` marker's skip."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from attnbench.backends.base import Backend
from attnbench.core.case import Case
from attnbench.records.record import upgrade
from attnbench.records.results import Record
from attnbench.run.measure import InProcess, Settings, measure
from attnbench.run.recording import RunInfo
from attnbench.run.schedule import Schedule
from attnbench.timing.timers import ClockTimer, TimingSettings, timer_for
from attnbench.verify.inputs import CaseData
from attnbench.verify.quant_data import case_data

ONE_SAMPLE = TimingSettings(warmup_ms=0, budget_ms=0, min_samples=1, max_samples=1)


# Where attnbench keeps state between runs, read from the environment by the code and by every subprocess a test
# starts: the compile cache and calibration ($XDG_CACHE_HOME/attnbench, attnbench.run.compile_cache), the history
# database ($XDG_DATA_HOME/attnbench, attnbench.history.store) and FlashInfer's JIT workspace. Inductor's cache goes
# where a run without --cache-dir puts it ($XDG_CACHE_HOME/attnbench/inductor), never torch's default
# (/tmp/torchinductor_<user>, the user's own, which would make a test's compile depend on what ran there before).
STATE_HOMES = ("XDG_CACHE_HOME", "XDG_DATA_HOME", "FLASHINFER_WORKSPACE_BASE")
_saved_homes: dict[str, str | None] = {}
STATE_ROOT = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """Point every state home at a temporary folder of this test process (each xdist worker its own) before any
    test is collected: the tests never read or write the user's real cache, so a calibration measured while the
    tests load the machine never becomes the figure a later `attnbench run` divides by, and no worker sees another's.
    A run made in a test measures no CPU roof (about a second per dtype, in every run): the tests of the roofs ask
    for one (attnbench.run.calibration.ROOF_BUDGET_VAR)."""
    import os
    import tempfile

    from attnbench.run.calibration import ROOF_BUDGET_VAR

    _saved_homes[ROOF_BUDGET_VAR] = os.environ.get(ROOF_BUDGET_VAR)
    os.environ[ROOF_BUDGET_VAR] = "0"

    root = tempfile.mkdtemp(prefix="attnbench-test-state-")
    config.stash[STATE_ROOT] = root
    for name in STATE_HOMES:
        _saved_homes[name] = os.environ.get(name)
        os.environ[name] = os.path.join(root, name.lower())
    from attnbench.run.compile_cache import INDUCTOR_ENV, default_dir

    _saved_homes[INDUCTOR_ENV] = os.environ.get(INDUCTOR_ENV)
    os.environ[INDUCTOR_ENV] = str(default_dir() / "inductor")
    one_thread_per_worker()


def one_thread_per_worker() -> None:
    """Under pytest-xdist with more than one worker, each worker (and every process it starts) computes on one
    thread. Each worker's OpenMP would otherwise start a thread per core, and threads that spin at OpenMP's barriers
    while another worker's hold the cores make every op many times slower: two copies of two standin test modules
    took 61 s side by side where one thread each took 9 s, on two cores. The `serial` pass is not a worker pass and
    keeps torch's own count."""
    import os

    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) <= 1:
        return
    import torch

    _saved_homes.setdefault("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS"))
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _compile_cache_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run made in a test points this process's compile caches at its --cache-dir (attnbench.run.compile_cache.use
    sets the environment): put them back after it (monkeypatch restores the value it was given here), so a later
    test's compile does not land in that test's folder, and a later test's subprocess does not repeat the one-time
    work a fresh folder costs (Inductor's probe of the CPU's vector ISAs, about 10 s on two cores, is kept in the
    folder). pytest_configure sets both."""
    import os

    from attnbench.run.compile_cache import FLASHINFER_ENV, INDUCTOR_ENV

    for name in (INDUCTOR_ENV, FLASHINFER_ENV):
        monkeypatch.setenv(name, os.environ[name])


def pytest_unconfigure(config: pytest.Config) -> None:
    import os
    import shutil

    for name, value in _saved_homes.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    root = config.stash.get(STATE_ROOT, None)
    if root:
        shutil.rmtree(root, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The `slow` tests first (otherwise in collection order), so that on make test's workers the longest start
    early and short ones even out the end: collected last, the workloads suite's 53 s run began at 417 s of a 477 s
    pass, and the other worker idled for its last 35 s. Then, without CUDA, the `gpu` tests skip."""
    import torch

    items.sort(key=lambda item: "slow" not in item.keywords)  # stable: the rest keep their order
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run scripts/gpu-check.sh on one)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def make_case(**overrides: object) -> Case:
    """A small CPU case; any field can be overridden."""
    fields: dict[str, object] = dict(device="cpu", dtype="float32", batch=1, seq_len=64, kv_seq_len=None, heads=4,
                                     kv_heads=4, head_dim=32, causal=False, window=None, mode="fwd")
    fields.update(overrides)
    if fields["kv_seq_len"] is None:
        fields["kv_seq_len"] = fields["seq_len"]
    return Case(**fields)  # type: ignore[arg-type]


def measure_one(case: Case, backend: Backend, data: CaseData | None = None) -> Record:
    """One measurement with a single timed sample, on the case's device's own timer (CUDA events on a GPU)."""
    return measure(data or case_data(case), backend, timer_for(case.device), Settings(RunInfo("test", "test"), ONE_SAMPLE))


def run_cases(cases: list[Case], backends: list[Backend], sink: Callable[[Record], None], timer: Any = None,
              timing: TimingSettings = ONE_SAMPLE, **schedule: Any) -> int:
    """Every backend on every case, in this process, through the run's one loop (attnbench.run.schedule)."""
    info = RunInfo("r1", "unit")
    return Schedule(info, **schedule).run([(case, backend) for case in cases for backend in backends], sink,
                                          InProcess(timer or ClockTimer(), Settings(info, timing)))


def run_into(path: Any, cases: list[Case], backends: list[Backend], should_stop: Callable[[], bool] = lambda: False,
             timer: Any = None) -> list[Record]:
    """run_cases with every record appended to the results file at `path` as it comes, as a run writes them."""
    from attnbench.records.results import ResultsWriter

    records: list[Record] = []
    with ResultsWriter(path) as writer:
        def sink(record: Record) -> None:
            writer.append(record)
            records.append(record)

        run_cases(cases, backends, sink, timer, should_stop=should_stop)
    return records


def assert_sabotage_caught(c: Case, make_backend: Callable[[], Backend], sabotage: Callable[[Any], None],
                           monkeypatch: Any) -> None:
    """A backend's mapping runs `ok` on `c` until `sabotage(monkeypatch)` breaks it; then the check calls it a
    `mismatch` (a stand-in's adapter tests: each wrong mapping is caught)."""
    assert measure_one(c, make_backend()).status == "ok"
    sabotage(monkeypatch)
    record = measure_one(c, make_backend())
    assert record.status == "mismatch", (record.status, record.reason)


class ScriptedTimer:
    """A timer that calls the timed function once per sample and reports the samples it was given (ms)."""

    name = "scripted"

    def __init__(self, samples: list[float]) -> None:
        self.samples = list(samples)
        self.calls = 0

    def measure(self, fn: Callable[[], object], settings: TimingSettings) -> list[float]:
        for _ in self.samples:
            fn()
            self.calls += 1
        return list(self.samples)


class Phases:
    """Which part of a measurement is running: "prepare", "check", "timed" or "after" (memory, cleanup).

    `PhaseTimer` sets "timed" while the timer runs; a test wraps a backend's `prepare` with `during_prepare`.
    Stand-ins read `phase` to say where each of their calls happened.
    """

    def __init__(self) -> None:
        self.phase = "check"

    def during_prepare(self, prepare: Callable[..., object]) -> Callable[..., object]:
        def wrapped(*args: object, **kwargs: object) -> object:
            self.phase = "prepare"
            try:
                return prepare(*args, **kwargs)
            finally:
                self.phase = "check"
        return wrapped


class PhaseTimer(ClockTimer):
    """The CPU clock timer, telling `phases` while it is timing."""

    def __init__(self, phases: Phases) -> None:
        super().__init__()
        self.phases = phases

    def measure(self, fn: Callable[[], object], settings: TimingSettings) -> list[float]:
        self.phases.phase = "timed"
        try:
            return super().measure(fn, settings)
        finally:
            self.phases.phase = "after"


# ---- the profiled call of every ok record (issue 31's CPU "done when": tests/test_kernel_verdict.py, test_cli.py)
CPU_FLASH = "aten::_scaled_dot_product_flash_attention_for_cpu"  # its backward is ..._for_cpu_backward
FLEX_GENERATED = "## Call CompiledFxGraph"  # Inductor's range around the C++ kernel it generated (backends/flex.py)


def assert_kernels_named(records: list[dict[str, Any]]) -> None:
    """Every ok record carries a non-empty `kernels` list and an `attention_share`; sdpa-flash's top kernel is the
    CPU flash kernel and sdpa-math's is not; flex's is its generated kernel. In fwd_bwd, sdpa-flash's flash forward
    and backward both ran, and nothing of the math path: its top kernel there may be the gradients' `aten::fill_`
    (first touch of fresh buffers: 40-60% of one call at 256 tokens on a busy 2-core CPU, docs/results.md)."""
    ok = [r for r in records if r["status"] == "ok"]
    assert ok
    for r in ok:
        where = f"{r['backend']} on {r['case_id']}"
        assert r.get("kernels") and all(k["name"] and k["calls"] >= 1 for k in r["kernels"]), where
        assert isinstance(r.get("attention_share"), float) and 0 < r["attention_share"] <= 1, where
        top = r["kernels"][0]["name"]
        names = {k["name"] for k in r["kernels"]}
        if r["backend"] == "sdpa-flash" and r["mode"] == "fwd":
            assert top.startswith(CPU_FLASH), where
        if r["backend"] == "sdpa-flash" and r["mode"] == "fwd_bwd":
            assert {CPU_FLASH, CPU_FLASH + "_backward"} <= names, where
            assert not names & {"aten::bmm", "aten::_softmax"}, where
        if r["backend"] == "sdpa-math":
            assert "flash" not in top and not any(k["name"].startswith(CPU_FLASH) for k in r["kernels"]), where
        if r["backend"] == "flex":
            assert top.startswith(FLEX_GENERATED), where


def loaded(lines: list[dict[str, Any]]) -> list[Record]:
    """Records as the loader reads these stored lines (attnbench.records.record.upgrade): how a test that writes a
    record's JSON by hand hands it to a reader."""
    return upgrade([dict(line) for line in lines])
