"""Shared test helpers: a fast runner, a case factory, timers that script or tell their samples, and the checks
several test modules share. Fixtures and pytest hooks stay in tests/conftest.py."""

from __future__ import annotations

import fnmatch
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Any

import pytest
import torch

from attnbench.backends.base import Backend
from attnbench.core.case import Case
from attnbench.records.record import upgrade
from attnbench.records.results import COMPRESSED_RESULTS_FILE, RESULTS_FILE, Record
from attnbench.run.measure import InProcess, Settings, measure
from attnbench.run.recording import RunInfo
from attnbench.run.schedule import Schedule
from attnbench.timing.timers import ClockTimer, Samples, Timer, TimingSettings, timer_for
from attnbench.verify.inputs import CaseData
from attnbench.verify.quant_data import case_data

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "reports"
ONE_SAMPLE = TimingSettings(warmup_ms=0, budget_ms=0, min_samples=1, max_samples=1)


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
    return measure(data or case_data(case), backend, timer_for(case.device),
                   Settings(RunInfo("test", "test"), ONE_SAMPLE))


def run_cases(cases: list[Case], backends: list[Backend], sink: Callable[[Record], None], timer: Any = None,
              timing: TimingSettings = ONE_SAMPLE, **schedule: Any) -> int:
    """Every backend on every case, in this process, through the run's one loop (attnbench.run.schedule)."""
    info = RunInfo("r1", "unit")
    return Schedule(info, **schedule).run([(case, backend) for case in cases for backend in backends],
                                          lambda case, record: sink(record),
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


def on_cpu_too(monkeypatch: pytest.MonkeyPatch, *classes: type[Backend]) -> None:
    """Backends given "cpu" too, to run against a stand-in module."""
    for cls in classes:
        monkeypatch.setattr(cls, "capabilities", replace(cls.capabilities, devices=("cpu", "cuda")))


def assert_sabotage_caught(c: Case, make_backend: Callable[[], Backend], sabotage: Callable[[Any], None],
                           monkeypatch: Any) -> None:
    """A backend's mapping runs `ok` on `c` until `sabotage(monkeypatch)` breaks it; then the check calls it a
    `mismatch` (a stand-in's adapter tests: each wrong mapping is caught)."""
    assert measure_one(c, make_backend()).status == "ok"
    sabotage(monkeypatch)
    record = measure_one(c, make_backend())
    assert record.status == "mismatch", (record.status, record.reason)


@dataclass(frozen=True)
class Measured:
    """One case measured through a stand-in, as a contract's `check` reads it."""

    name: str
    case: Case
    backend: type[Backend]
    record: Record
    recorded: Any  # what the contract's install returned: the stand-in's log of calls, where it keeps one


Sabotage = Callable[[pytest.MonkeyPatch], None]


@dataclass(frozen=True)
class Standin:
    """A library's stand-in as a contract: once installed, each case runs `ok` through each backend and meets
    `check`, and each sabotage turns its `ok` case into a `mismatch`. tests/test_standins.py runs every contract."""

    name: str
    install: Callable[[pytest.MonkeyPatch], Any]  # puts the stand-in in place; returns what `check` reads
    backends: tuple[type[Backend], ...]  # each case runs on each; every sabotage breaks the first
    cases: Mapping[str, Case | Mapping[type[Backend], Case]]  # name → the case, or the case each backend runs
    sabotages: Mapping[str, tuple[Sabotage, Case]]  # name → (what breaks the mapping, the case that shows it)
    check: Callable[[Measured], None]  # the library's own assertions on an `ok` record
    case_marks: tuple[pytest.MarkDecorator, ...] = ()
    sabotage_marks: tuple[pytest.MarkDecorator, ...] = ()

    def __post_init__(self) -> None:
        per_backend = [name for name, c in self.cases.items() if not isinstance(c, Case)
                       and set(c) != set(self.backends)]
        if per_backend:
            raise ValueError(f"{self.name}: cases {per_backend} name other backends than {self.backends}")
        object.__setattr__(self, "cases", MappingProxyType(dict(self.cases)))
        object.__setattr__(self, "sabotages", MappingProxyType(dict(self.sabotages)))

    def runs(self) -> list[tuple[str, type[Backend], Case]]:
        """Every (case name, backend, case) the contract measures."""
        return [(name, backend, c if isinstance(c, Case) else c[backend])
                for name, c in self.cases.items() for backend in self.backends]


class ScriptedTimer(Timer):
    """A timer that calls the timed function once per sample and reports the samples it was given (ms)."""

    name = "scripted"

    def __init__(self, samples: list[float]) -> None:
        self.samples = list(samples)
        self.calls = 0

    def measure(self, fn: Callable[[], object], settings: TimingSettings) -> Samples:
        for _ in self.samples:
            fn()
            self.calls += 1
        return Samples(tuple(self.samples))


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

    def measure(self, fn: Callable[[], object], settings: TimingSettings) -> Samples:
        self.phases.phase = "timed"
        try:
            return super().measure(fn, settings)
        finally:
            self.phases.phase = "after"


# ---- the profiled call of every ok record (issue 31's CPU "done when": tests/test_kernel_verdict.py, test_cli.py)
CPU_FLASH = "aten::_scaled_dot_product_flash_attention_for_cpu"  # its backward is ..._for_cpu_backward
FLEX_GENERATED = "## Call CompiledFxGraph"  # Inductor's range around the C++ kernel it generated (backends/flex.py)


def assert_kernels_named(records: list[Record]) -> None:
    """Every ok record carries a non-empty `kernels` list and an `attention_share`; sdpa-flash's top kernel is the
    CPU flash kernel and sdpa-math's is not; flex's is its generated kernel. In fwd_bwd, sdpa-flash's flash forward
    and backward both ran, and nothing of the math path: its top kernel there may be the gradients' `aten::fill_`
    (first touch of fresh buffers: 40-60% of one call at 256 tokens on a busy 2-core CPU, docs/results.md)."""
    ok = [r for r in records if r.status == "ok"]
    assert ok
    for r in ok:
        where = f"{r.backend} on {r.case_id}"
        assert r.kernels and all(k["name"] and k["calls"] >= 1 for k in r.kernels), where
        assert isinstance(r.attention_share, float) and 0 < r.attention_share <= 1, where
        top = r.kernels[0]["name"]
        names = {k["name"] for k in r.kernels}
        if r.backend == "sdpa-flash" and r.mode == "fwd":
            assert top.startswith(CPU_FLASH), where
        if r.backend == "sdpa-flash" and r.mode == "fwd_bwd":
            assert {CPU_FLASH, CPU_FLASH + "_backward"} <= names, where
            assert not names & {"aten::bmm", "aten::_softmax"}, where
        if r.backend == "sdpa-math":
            assert "flash" not in top and not any(k["name"].startswith(CPU_FLASH) for k in r.kernels), where
        if r.backend == "flex":
            assert top.startswith(FLEX_GENERATED), where


def loaded(lines: list[dict[str, Any]]) -> list[Record]:
    """Records as the loader reads these stored lines (attnbench.records.record.upgrade): how a test that writes a
    record's JSON by hand hands it to a reader."""
    return upgrade([dict(line) for line in lines])


# ---- the stand-ins' shared arithmetic (each library's own semantics stay in its stand-in)
def band_keep(sq: int, sk: int, left: int | None, right: int | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The keys query row i keeps, bottom-right aligned (row i sits at key i + sk - sq): i - left <= j <= i + right,
    a None bound unbounded. Returns the (sq, sk) mask and the row and key indices it was built from."""
    i = torch.arange(sq)[:, None] + (sk - sq)
    j = torch.arange(sk)[None, :]
    keep = torch.ones(sq, sk, dtype=torch.bool)
    if left is not None:
        keep &= j >= i - left
    if right is not None:
        keep &= j <= i + right
    return keep, i, j


def committed_runs(*patterns: str) -> list[Path]:
    """The run directories committed under reports/ (git's list of files; a copy without .git: what reports/ holds)
    whose path below reports/ matches one of `patterns` (glob words a level each, `**` any levels; every run when
    none), whether their results are compressed or not."""
    names = (RESULTS_FILE, COMPRESSED_RESULTS_FILE)
    if (ROOT / ".git").exists():
        listed = subprocess.run(["git", "ls-files", "-z", "reports"], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout.split("\0")
        files = [PurePosixPath(f) for f in listed if PurePosixPath(f).name in names]
    else:
        files = [PurePosixPath(p.relative_to(ROOT).as_posix()) for name in names for p in REPORTS.rglob(name)]
    runs = {f.parent.relative_to("reports") for f in files}
    return sorted(REPORTS / run for run in runs if any(_matches(run.parts, p.split("/")) for p in patterns or ["**"]))


def _matches(parts: tuple[str, ...], words: list[str]) -> bool:
    if not words:
        return not parts
    if words[0] == "**":
        return any(_matches(parts[i:], words[1:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], words[0]) and _matches(parts[1:], words[1:])
