"""A paired A/B of two Python environments (docs/ab.md): a worker in each, their rounds interleaved so the machine's
drift falls on both sides alike; each side's records go to its own run folder, a/ and b/."""

from __future__ import annotations

import json
import os
import random
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnbench.core.errors import AttnbenchError
from attnbench.records.folder import RunFolder
from attnbench.records.results import Record
from attnbench.run.ab_worker import AB_WORKER_COMMAND
from attnbench.run.child import ChildDied, ChildProcess
from attnbench.run.isolation import WorkerConfig
from attnbench.run.recording import RunInfo, now, pooled, unmeasured
from attnbench.run.rounds import shuffled_by_case

if TYPE_CHECKING:
    from attnbench.backends.base import Backend
    from attnbench.core.case import Case
    from attnbench.run.session import Plan
    from attnbench.timing.timers import TimingSettings

SIDES = ("A", "B")
# How long a side's Python may take to import torch and attnbench.
PROBE_TIMEOUT_S = 120.0
PROBE = ("import json, sys, torch, attnbench, attnbench.run.ab_worker; "
         "print(json.dumps({'executable': sys.executable, 'torch': torch.__version__, "
         "'attnbench': attnbench.__version__, 'attnbench_path': attnbench.__file__}))")
# A side's Python imports its own attnbench, not the one in its working directory (Python 3.11+).
SAFE_PATH = {"PYTHONSAFEPATH": "1"}


@dataclass
class Side:
    label: str
    python: str
    env: dict[str, str] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    worker: ChildProcess | None = None
    config: WorkerConfig | None = None
    records: dict[tuple, Record] = field(default_factory=dict)
    rounds: dict[tuple, list[dict[str, Any]]] = field(default_factory=dict)
    samples: dict[tuple, list[float]] = field(default_factory=dict)

    @property
    def folder(self) -> str:
        return self.label.lower()


def order(rounds: int) -> list[tuple[str, str]]:
    """A B, then B A, and so on."""
    return [SIDES if r % 2 == 0 else SIDES[::-1] for r in range(rounds)]


def probe(label: str, python: str, env: dict[str, str]) -> dict[str, Any]:
    flag = f"--{label.lower()} {python}"
    try:
        done = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              env={**os.environ, **SAFE_PATH, **env}, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise AttnbenchError(f"{flag}: no such Python executable") from None
    except PermissionError:
        raise AttnbenchError(f"{flag}: not executable") from None
    except OSError as exc:
        raise AttnbenchError(f"{flag}: cannot be started ({exc.strerror})") from None
    except subprocess.TimeoutExpired:
        raise AttnbenchError(f"{flag}: did not import torch and attnbench within {PROBE_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        why = lines[-1] if lines else f"exit code {done.returncode}"
        raise AttnbenchError(f"{flag}: cannot import torch and attnbench ({why})")
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        raise AttnbenchError(f"{flag}: printed no facts when asked ({done.stdout.strip()[:200]!r})") from None


def parse_env(values: list[str], flag: str) -> dict[str, str]:
    env = {}
    for value in values:
        name, sep, text = value.partition("=")
        if not sep or not name or not name.replace("_", "").isalnum():
            raise AttnbenchError(f"{flag} {value!r}: expected NAME=VALUE")
        env[name] = text
    return env


@dataclass
class Ab:
    plan: Plan
    sides: tuple[Side, Side]
    settings: TimingSettings
    directory: Path
    say: Callable[[str], None]
    stopped: bool = False  # Ctrl-C: the rounds made so far are written and judged
    sequence: list[str] = field(default_factory=list)  # 'round side backend case_id', in order
    cases: dict[tuple, Case] = field(default_factory=dict)  # by key

    def side(self, label: str) -> Side:
        return self.sides[SIDES.index(label)]

    def start(self, side: Side) -> None:
        assert side.config is not None
        try:
            side.worker = ChildProcess.start(AB_WORKER_COMMAND, side.config, python=side.python)
        except ChildDied as died:
            raise AttnbenchError(f"--{side.folder} {side.python}: its worker process {died}") from None

    def ask(self, side: Side, message: tuple) -> tuple | None:
        """The worker's answer; None (and a fresh worker next) when it died."""
        if side.worker is None:
            self.start(side)
        assert side.worker is not None
        try:
            side.worker.send(message)
            return side.worker.receive(None)
        except ChildDied as died:
            self.say(f"side {side.label}: worker process {died}; starting another")
            side.worker.kill()
            side.worker = None
            side.facts.setdefault("worker_deaths", []).append(str(died))
            return None

    def first_round(self, case: Case, backend: Backend, sides: tuple[str, str]) -> None:
        key = (case.device, case.case_id, backend.name)
        self.cases[key] = case
        for label in sides:
            side = self.side(label)
            self.sequence.append(f"1 {label} {backend.name} {case.case_id}")
            answer = self.ask(side, ("measure", case.fields(), backend.name))
            assert side.config is not None
            record = (Record(**answer[1]) if answer else unmeasured(
                side.config.info, case, backend, "error", f"worker process {side.facts['worker_deaths'][-1]}"))
            side.records[key] = record
            side.samples[key] = list(record.times_ms or [])
            side.rounds[key] = [round_entry(1, side.samples[key])] if record.times_ms else []

    def later_round(self, key: tuple, number: int, sides: tuple[str, str]) -> None:
        share = self.settings.round_share()
        for label in sides:
            side = self.side(label)
            record = side.records[key]
            self.sequence.append(f"{number} {label} {record.backend} {record.case_id}")
            answer = self.ask(side, ("resample", self.cases[key].fields(), record.backend, share))
            samples, reason = ((answer[1], answer[2]) if answer else
                               ([], f"worker process {side.facts['worker_deaths'][-1]}"))
            if samples:
                side.samples[key].extend(samples)
                side.rounds[key].append(round_entry(number, samples))
            else:
                side.facts.setdefault("failed_rounds", []).append({"round": number, "measurement": list(key),
                                                                   "reason": reason})


def round_entry(number: int, samples: list[float]) -> dict[str, Any]:
    """A round as extra.rounds holds it, numbered: attnbench.stats.ab matches the pairs on it."""
    import statistics

    return {"round": number, "samples": len(samples), "median_ms": statistics.median(samples)}


def run_ab(ab: Ab, should_stop: Callable[[], bool] = lambda: False) -> dict[str, list[Record]]:
    """Both sides' rounds, interleaved; `should_stop` (the first Ctrl-C) ends them between two measurements' rounds,
    a KeyboardInterrupt (the second) at once, dropping the round under way. Either way the rounds made are written."""
    try:
        for side in ab.sides:
            ab.start(side)
            answer = ab.ask(side, ("env",))
            side.facts["env"] = answer[1] if answer else None
        keys = first_rounds(ab, should_stop)
        later_rounds(ab, keys, should_stop)
    except KeyboardInterrupt:  # the workers are in sessions of their own: Ctrl-C reaches this process only
        ab.stopped = True
    finally:
        for side in ab.sides:
            if side.worker is not None:
                side.worker.stop()
                side.worker = None
    ab.stopped = ab.stopped or should_stop()
    if ab.stopped:
        ab.say("stopped: writing and judging the rounds made so far")
    return {side.label: write_side(ab, side) for side in ab.sides}


def first_rounds(ab: Ab, should_stop: Callable[[], bool]) -> list[tuple]:
    """Round 1 of every measurement; the keys of those both sides could time."""
    tasks, first = ab.plan.tasks(), order(ab.settings.rounds)[0]
    ab.say(f"round 1 of {ab.settings.rounds}: measuring {len(tasks)} measurement(s) on both sides, {'/'.join(first)}")
    for case, backend in tasks:
        if should_stop():
            break
        ab.first_round(case, backend, first)
    a, b = ab.sides
    return [k for k, record in a.records.items()
            if record.status == "ok" and record.times_ms and b.records[k].status == "ok"]


def later_rounds(ab: Ab, keys: list[tuple], should_stop: Callable[[], bool]) -> None:
    """Rounds 2 and on, each re-timing every key on both sides in an order shuffled by case."""
    rounds = ab.settings.rounds
    sequence = order(rounds)
    a, b = ab.sides
    rng = random.Random(a.run_id + b.run_id)
    for number in range(2, rounds + 1):
        if should_stop():
            return
        ab.say(f"round {number} of {rounds}: re-timing {len(keys)} measurement(s) on both sides, "
               f"{'/'.join(sequence[number - 1])}, in shuffled order")
        records = [a.records[k] for k in keys]
        for i in shuffled_by_case(list(range(len(keys))), records, rng):
            if should_stop():
                return
            ab.later_round(keys[i], number, sequence[number - 1])


def write_side(ab: Ab, side: Side) -> list[Record]:
    assert side.config is not None
    backends = {backend.name: backend for backend in ab.plan.backends}
    records = []
    for key, record in side.records.items():
        if record.status == "ok" and side.rounds[key]:
            record = pooled(record, ab.cases[key], backends[record.backend], side.samples[key], ab.settings,
                            side.config.info, side.rounds[key])
        records.append(replace(record, extra={**record.extra, "ab": side.label}))
    folder = RunFolder(ab.directory / side.folder)
    folder.make()
    folder.write_records(records)
    env = dict(side.facts.get("env") or {})
    env.update(run_id=side.run_id, suite_name=ab.plan.suite.name, suite_file=str(ab.plan.suite.path),
               suite_text=ab.plan.suite.text, timestamp=now(), plugins=list(ab.plan.plugins), isolated=True,
               timer="auto", ab={"side": side.label, "python": side.python, "env": side.env,
                                 "probe": side.facts.get("probe"), "failed_rounds": side.facts.get("failed_rounds", []),
                                 "worker_deaths": side.facts.get("worker_deaths", [])})
    folder.write_env(env)
    return records


def make_ab(plan: Plan, pythons: tuple[str, str], envs: tuple[dict[str, str], dict[str, str]], rounds: int,
            directory: Path, say: Callable[[str], None]) -> Ab:
    """Check both Pythons (one line, exit 2, for one that cannot measure) and the output folder; start nothing."""
    from attnbench.run.env import device_name
    from attnbench.run.session import settings_of

    sides = tuple(Side(label, python, {**SAFE_PATH, **env})
                  for label, python, env in zip(SIDES, pythons, envs, strict=False))
    for side in sides:
        side.facts["probe"] = probe(side.label, side.python, side.env)
    for side in sides:
        RunFolder(directory / side.folder).refuse_existing(hint=" (an A/B's side)")
    settings = replace(settings_of(plan.suite, plan.device), rounds=rounds, refine=0.0)
    name = device_name(plan.device)
    for side in sides:
        side.config = WorkerConfig(RunInfo(side.run_id, plan.suite.name, name), plan.device, settings, plan.plugins,
                                   env=side.env)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AttnbenchError(f"{directory}: cannot create the output directory ({exc.strerror})") from None
    return Ab(plan, (sides[0], sides[1]), settings, directory, say)



def describe(ab: Ab) -> dict[str, Any]:
    return {
        "suite": ab.plan.suite.name, "device": ab.plan.device,
        "device_name": (ab.sides[0].facts.get("env") or {}).get("device_name", ab.plan.device),
        "cpu_count": os.cpu_count(), "rounds": ab.settings.rounds,
        "order": " ".join(label for pair in order(ab.settings.rounds) for label in pair),
        "budget_ms_per_round": ab.settings.round_share().budget_ms,
        "sides": {side.label: {"python": side.python, "folder": side.folder, "run_id": side.run_id,
                               "vars": {k: v for k, v in side.env.items() if k not in SAFE_PATH},
                               "env": {k: (side.facts.get("env") or {}).get(k) for k in ENV_FACTS}}
                  for side in ab.sides},
        "timestamp": now(), "sequence": ab.sequence,
    }


# Repeated per side in ab.json (each env.json holds them all).
ENV_FACTS = ("torch", "attnbench", "git_commit", "python", "torch_threads", "libraries", "device_name")
