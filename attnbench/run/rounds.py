"""A measurement's samples taken in rounds spread over the run, in an order shuffled by case and seeded by the run
id, so a call whose time wanders with the machine is sampled in several windows; then `refine` re-times those still
wider than ±precision, cheapest first, within the suite-level budget."""

from __future__ import annotations

import dataclasses
import random
import statistics
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from attnbench.core.interval import windows_needed
from attnbench.run.heap import release_memory
from attnbench.run.measure import InProcess
from attnbench.run.recording import pooled
from attnbench.run.stages import answer_of, timed_call
from attnbench.timing.timers import timer_for_work
from attnbench.verify.quant_data import prepare_kwargs

if TYPE_CHECKING:
    from attnbench.backends.base import Backend
    from attnbench.core.case import Case
    from attnbench.records.results import Record
    from attnbench.run.recording import RunInfo
    from attnbench.timing.timers import Timer, TimingSettings
    from attnbench.verify.inputs import CaseData

MAX_REFINE = 8  # refining passes
REFINE_ASK = 2  # a refining re-timing asks at most this many budget_ms


def resample(data: CaseData, backend: Backend, timer: Timer, timing: TimingSettings) -> list[float]:
    """The same inputs prepared again and the call timed, warm-up included; nothing else (a forward makes no
    untimed call of its own: the timer's warm-up is its first)."""
    import torch

    case = data.case
    inp = data.inputs
    canonical = tuple(t.detach().requires_grad_(case.needs_grad) for t in (inp.q, inp.k, inp.v))
    prepared = backend.prepare(case, *canonical, **prepare_kwargs(data))
    leaves = tuple(t.detach().requires_grad_(case.needs_grad) for t in prepared.inputs)
    timing = dataclasses.replace(timing, warmed_ms=0.0, prior_ms=None, energy_ms=0.0)
    with prepared.context(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the first round recorded the backend's warnings
        out_native = dout_native = None
        if case.mode != "fwd":
            with torch.set_grad_enabled(case.needs_grad):
                out_native = prepared.to_tensor(prepared.call(*leaves))
            _, dout_native, _ = answer_of(prepared, canonical, leaves, out_native, inp.dout, data.rows, False)
        samples = timer_for_work(timer, backend.capabilities.runs_on).measure(
            timed_call(case.mode, prepared, leaves, out_native, dout_native), timing)
    return list(samples.times)


class InProcessResampler:
    """`between` is called before each re-timing (the run's pace probe)."""

    def __init__(self, measurer: InProcess, between: Callable[[], None] | None = None) -> None:
        self.measurer = measurer
        self.between = between

    def resample(self, case: Case, backend: Backend, timing: TimingSettings) -> list[float]:
        if self.between is not None:
            self.between()
        try:
            return resample(self.measurer.data_for(case), backend, self.measurer.timer, timing)
        finally:
            release_memory(case.device)


class Resampler(Protocol):
    def resample(self, case: Case, backend: Backend, timing: TimingSettings) -> list[float]: ...


@dataclass
class RoundsResult:
    retimed: int = 0
    rounds_s: float = 0.0
    refined: int = 0
    refine_s: float = 0.0
    refine_budget_s: float = 0.0

    def to_dict(self) -> dict[str, float]:
        return {"retimed": self.retimed, "rounds_s": round(self.rounds_s, 3), "refined": self.refined,
                "refine_s": round(self.refine_s, 3), "refine_budget_s": round(self.refine_budget_s, 3)}


def due_again(samples: list[float], round_number: int, settings: TimingSettings) -> bool:
    """While its samples cost less than the shares of the rounds so far, and are fewer than max_samples."""
    return len(samples) < settings.max_samples and sum(samples) < settings.budget_ms * round_number / settings.rounds


def window_ms(record: Record, settings: TimingSettings) -> float:
    return window_of(statistics.median(record.times_ms), settings)


def window_of(call_ms: float, settings: TimingSettings) -> float:
    """A round's share of the budget (ms), at least one call."""
    return max(settings.budget_ms / max(1, settings.rounds), call_ms)


def lacking_ms(record: Record, settings: TimingSettings) -> float:
    """What the windows a too-wide record lacks cost (ms)."""
    samples = list(record.times_ms or [])
    windows = [w["median_ms"] for w in record.timing_parts.rounds or []] or [statistics.median(samples)]
    needed = windows_needed(windows, record.device, settings.precision, settings.confidence)
    return max(1, needed - len(windows)) * window_ms(record, settings)


def later_rounds(records: list[Record], cases: list[Case], backends: dict[str, Backend], measurer: Resampler,
                 settings: TimingSettings, info: RunInfo, seed: str, should_stop: Callable[[], bool],
                 after_round: Callable[[list[Record]], None], say: Callable[[str], None]) -> RoundsResult:
    """Rounds 2..settings.rounds, then the refining, pooling `records` (of `cases`, one each) in place."""
    chosen = [i for i, r in enumerate(records) if r.status == "ok" and r.times_ms and r.backend in backends]
    if not chosen:
        return RoundsResult()
    rounds = _Rounds(records, cases, chosen, backends, measurer, settings, info, random.Random(seed),
                     should_stop, say)
    for round_number in range(2, settings.rounds + 1):
        if should_stop():
            break
        if rounds.round(round_number):
            after_round(records)
    while rounds.refine_pass():
        after_round(records)
    rounds.result.refine_s = rounds.spent_ms / 1e3
    unmade = [i for i in chosen if records[i].timing_parts.rounds is None]  # too slow for a later round
    for i in unmade:
        records[i] = dataclasses.replace(records[i], extra={**records[i].extra, "rounds": rounds.history[i]})
    if unmade:
        after_round(records)
    return rounds.result


class _Rounds:
    def __init__(self, records: list[Record], cases: list[Case], chosen: list[int],
                 backends: dict[str, Backend], measurer: Resampler, settings: TimingSettings, info: RunInfo,
                 rng: random.Random, should_stop: Callable[[], bool], say: Callable[[str], None]) -> None:
        self.records, self.cases, self.chosen = records, cases, chosen
        self.backends, self.measurer = backends, measurer
        self.settings, self.info, self.rng, self.should_stop, self.say = settings, info, rng, should_stop, say
        self.history = {i: [_round_of(records[i].times_ms)] for i in chosen}
        self.result = RoundsResult()
        budget_ms = settings.refine * settings.budget_ms * len(chosen)
        self.result.refine_budget_s = budget_ms / 1e3
        self.budget_ms, self.spent_ms, self.passes = budget_ms, 0.0, 0

    def round(self, round_number: int) -> bool:
        settings = self.settings
        due = [i for i in self.chosen
               if self.records[i].noisy and due_again(self.records[i].times_ms, round_number, settings)]
        if not due or self.should_stop():
            return False  # a later round's larger share may find some due
        self.say(f"round {round_number} of {settings.rounds}: re-timing {len(due)} measurement(s) in shuffled order")
        share = settings.round_share()
        for i in shuffled_by_case(due, self.records, self.rng):
            if self.should_stop():
                break
            self.result.rounds_s += self.retime(i, share)
            self.result.retimed += 1
        return True

    def refine_pass(self) -> bool:
        """False when it re-timed none."""
        records, settings, budget_ms = self.records, self.settings, self.budget_ms
        wanting = [i for i in self.chosen if records[i].noisy]
        if self.passes >= MAX_REFINE or not wanting or self.spent_ms >= budget_ms or self.should_stop():
            return False
        self.passes += 1
        cost = {i: lacking_ms(records[i], settings) for i in wanting}
        wanting = affordable(sorted(shuffled_by_case(wanting, records, self.rng), key=cost.__getitem__), cost,
                             budget_ms - self.spent_ms)
        self.say(f"refining: {len(wanting)} measurement(s) still wider than ±{settings.precision:.0%} "
                 f"({(budget_ms - self.spent_ms) / 1e3:.1f} s of sampling left of {budget_ms / 1e3:.1f} s)")
        touched = False
        for i in wanting:
            left = budget_ms - self.spent_ms
            if self.should_stop() or left < statistics.median(records[i].times_ms):
                continue
            ask = min(REFINE_ASK * settings.budget_ms, left, window_ms(records[i], settings))
            self.spent_ms += self.retime(i, _refine_timing(settings, ask)) * 1e3
            self.result.refined += 1
            touched = True
        return touched

    def retime(self, i: int, timing: TimingSettings) -> float:
        record = self.records[i]
        backend = self.backends[record.backend]
        left = self.settings.max_samples - len(record.times_ms)
        if left <= 0:
            return 0.0
        new = self.measurer.resample(self.cases[i], backend, dataclasses.replace(
            timing, max_samples=left, min_samples=min(timing.min_samples, left)))
        if not new:
            return 0.0
        self.history[i].append(_round_of(new))
        self.records[i] = pooled(record, self.cases[i], backend, list(record.times_ms) + new, self.settings,
                                 self.info, self.history[i])
        return sum(new) / 1e3


def affordable(cheapest_first: list[int], cost: dict[int, float], left_ms: float) -> list[int]:
    """The records whose lacking windows the budget left pays for all together, cheapest first, so the budget
    settles as many as it can; all of them when it pays for none (each then gets a window, cheapest first)."""
    chosen, spent = [], 0.0
    for i in cheapest_first:
        if spent + cost[i] > left_ms:
            break
        chosen.append(i)
        spent += cost[i]
    return chosen or cheapest_first


def shuffled_by_case(chosen: list[int], records: list[Record], rng: random.Random) -> list[int]:
    """Cases shuffled, each case's backends shuffled: a case's inputs are made once per round."""
    cases: dict[str, list[int]] = {}
    for i in chosen:
        cases.setdefault(f"{records[i].device}/{records[i].case_id}", []).append(i)
    groups = list(cases.values())
    rng.shuffle(groups)
    for group in groups:
        rng.shuffle(group)
    return [i for group in groups for i in group]


def _refine_timing(settings: TimingSettings, budget_ms: float) -> TimingSettings:
    return dataclasses.replace(settings, budget_ms=budget_ms, min_samples=1, rounds=1)


def _round_of(samples: list[float]) -> dict[str, float]:
    return {"samples": len(samples), "median_ms": statistics.median(samples)}

