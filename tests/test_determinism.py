"""`deterministic: true`: PyTorch's deterministic mode around each measurement, each backend's answer by name (honoured,
not applicable, refused), a refusal skipped before anything runs, and the option carried from suite and flag."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from rich.console import Console

from attnbench.backends.base import Backend, Prepared
from attnbench.backends.registry import default_registry
from attnbench.backends.testing import FaultyBackend
from attnbench.core.errors import SuiteError
from attnbench.run import session
from attnbench.run.measure import Settings, measure
from attnbench.run.options import RunOptions, resume_command
from attnbench.run.recording import RunInfo
from attnbench.run.skip import Facts, why_skipped
from attnbench.sweep.suite import load_suite
from attnbench.timing.timers import ClockTimer
from attnbench.verify.determinism import HONOURED, NOT_APPLICABLE, REFUSED
from attnbench.verify.inputs import CaseData
from tests.helpers import ONE_SAMPLE, make_case, on_cpu_too

ASKED = Settings(RunInfo("r", "t"), ONE_SAMPLE, deterministic=True)


def measured(case, backend, settings: Settings = ASKED):  # type: ignore[no-untyped-def]
    return measure(CaseData(case), backend, ClockTimer(), settings)


class Probe(FaultyBackend):
    """Naive attention that notes PyTorch's deterministic state when prepared and when called."""

    name = "probe"

    def __init__(self) -> None:
        self.seen: list[tuple[str, bool, bool]] = []

    def deterministic(self, case):  # type: ignore[no-untyped-def]
        return "honoured (a test's probe)"

    def prepare(self, case, q, k, v) -> Prepared:  # type: ignore[no-untyped-def]
        self.note("prepare")
        prepared = super().prepare(case, q, k, v)
        inner = prepared.call

        def call(*args):  # type: ignore[no-untyped-def]
            self.note("call")
            return inner(*args)

        prepared.call = call
        return prepared

    def note(self, where: str) -> None:
        self.seen.append((where, torch.are_deterministic_algorithms_enabled(),
                          torch.utils.deterministic.fill_uninitialized_memory))


def test_the_mode_holds_for_the_whole_measurement_and_is_restored_after() -> None:
    """Prepare (where a compile happens), the checked call and every timed call run in the mode, without NaN-filling
    new tensors (a write the timed call would pay for); afterwards the process is as it was."""
    probe = Probe()
    record = measured(make_case(mode="fwd_bwd"), probe)
    assert record.status == "ok" and record.extra["deterministic"] == "honoured (a test's probe)"
    assert {where for where, _, _ in probe.seen} == {"prepare", "call"}
    assert all(on and not fill for _, on, fill in probe.seen)
    assert not torch.are_deterministic_algorithms_enabled() and torch.utils.deterministic.fill_uninitialized_memory
    unasked = Probe()
    record = measured(make_case(), unasked, Settings(RunInfo("r", "t"), ONE_SAMPLE))
    assert not any(on for _, on, _ in unasked.seen) and "deterministic" not in record.extra


CPU_BACKENDS = ("naive", "sdpa", "sdpa-math", "sdpa-flash", "sliding-window")


@pytest.mark.parametrize("name", CPU_BACKENDS)
def test_cpu_backends_need_nothing_and_run_repeatably(name: str) -> None:
    case = make_case(mode="fwd_bwd", seq_len=32, causal=True, window=8)
    record = measured(case, default_registry().get(name))
    assert record.status == "ok", record.reason
    assert record.extra["deterministic"].startswith(f"{NOT_APPLICABLE} (") and "CPU" in record.extra["deterministic"]
    assert record.repeatable is True


def test_every_backend_that_runs_on_a_cpu_needs_nothing_there() -> None:
    registry = default_registry()
    for name in built_in(registry):
        backend = registry.get(name)
        if "cpu" in backend.capabilities.devices:
            for mode in ("fwd", "fwd_bwd"):
                assert backend.deterministic(make_case(mode=mode)).startswith(f"{NOT_APPLICABLE} ("), name


CUDA_FWD, CUDA_BWD = (make_case(device="cuda", dtype="bfloat16", head_dim=64, mode=m) for m in ("fwd", "bwd"))
# What each backend answers on CUDA (forward, backward): the first word of docs/suites.md's table.
CUDA_ANSWERS = {
    "naive": (HONOURED, HONOURED), "sdpa": (HONOURED, HONOURED), "sdpa-math": (HONOURED, HONOURED),
    "sdpa-flash": (NOT_APPLICABLE, HONOURED), "sdpa-flash-fa3": (HONOURED, HONOURED),
    "sdpa-flash-fa4": (NOT_APPLICABLE, HONOURED), "sdpa-efficient": (NOT_APPLICABLE, HONOURED),
    "sdpa-cudnn": (REFUSED, REFUSED), "sdpa-varlen": (NOT_APPLICABLE, HONOURED),
    "flash-attn": (NOT_APPLICABLE, HONOURED), "flash-attn-3": (NOT_APPLICABLE, HONOURED),
    "flash-attn-4": (NOT_APPLICABLE, HONOURED), "xformers": (NOT_APPLICABLE, HONOURED),
    "flex": (NOT_APPLICABLE, NOT_APPLICABLE), "flex-dynamic": (NOT_APPLICABLE, NOT_APPLICABLE),
    "flashinfer": (NOT_APPLICABLE, NOT_APPLICABLE), "sliding-window": (HONOURED, HONOURED),
    "cudnn": (NOT_APPLICABLE, HONOURED), "naive-fp8": (HONOURED, HONOURED), "sdpa-fp8": (HONOURED, NOT_APPLICABLE),
    "cudnn-fp8": (NOT_APPLICABLE, NOT_APPLICABLE), "sage": (NOT_APPLICABLE, NOT_APPLICABLE),
    "jax": (NOT_APPLICABLE, NOT_APPLICABLE), "jax-cudnn": (REFUSED, REFUSED),
    "onnxruntime": (NOT_APPLICABLE, NOT_APPLICABLE),
    "onnxruntime-mha": (NOT_APPLICABLE, NOT_APPLICABLE), "onnxruntime-gqa": (NOT_APPLICABLE, NOT_APPLICABLE),
    "openvino": (NOT_APPLICABLE, NOT_APPLICABLE),
}


def test_every_built_in_backend_answers_by_name_on_cuda() -> None:
    """No built-in backend falls back to the default refusal: each says what the mode does to it."""
    registry = default_registry()
    assert set(CUDA_ANSWERS) == set(built_in(registry))
    for name, (forward, backward) in CUDA_ANSWERS.items():
        backend = registry.get(name)
        for case, word in ((CUDA_FWD, forward), (CUDA_BWD, backward)):
            answer = backend.deterministic(case)
            assert answer.startswith(word) and "(" in answer and "does not say" not in answer, (name, answer)


def test_flash_attention_3_refuses_a_deterministic_backward_at_head_dim_256() -> None:
    fa3 = default_registry().get("flash-attn-3")
    assert fa3.deterministic(make_case(device="cuda", dtype="bfloat16", head_dim=256, mode="bwd")).startswith(REFUSED)
    assert fa3.deterministic(make_case(device="cuda", dtype="bfloat16", head_dim=192, mode="bwd")).startswith(HONOURED)


def test_a_refusal_is_a_skip_named_before_any_tensor_and_the_forecast_prices_it() -> None:
    class Undeclared(Backend):  # a plugin that says nothing about determinism
        name = "undeclared"

        def prepare(self, case, q, k, v):  # type: ignore[no-untyped-def]
            raise AssertionError("a refused backend must not be prepared")

    data = CaseData(make_case())
    record = measure(data, Undeclared(), ClockTimer(), ASKED)
    assert record.status == "skipped" and "inputs" not in vars(data)
    assert record.reason == ("deterministic asked, refused: undeclared does not say whether its kernel is "
                             "deterministic (Backend.deterministic)")
    cudnn = why_skipped(CUDA_BWD, default_registry().get("sdpa-cudnn"), Facts(deterministic=True))
    assert cudnn is not None and cudnn.startswith("deterministic asked, refused: PyTorch does not run cuDNN SDPA")
    assert why_skipped(CUDA_BWD, default_registry().get("sdpa-cudnn"), Facts()) is None  # not asked: runs

    from attnbench.run import calibration, forecast

    tasks = [(CUDA_BWD, default_registry().get("sdpa-cudnn"))]
    machine = calibration.datasheet("H100")
    assert forecast.forecast(tasks, ONE_SAMPLE, machine).tasks[0].runs
    assert not forecast.forecast(tasks, ONE_SAMPLE, machine, deterministic=True).tasks[0].runs


class PutBackend(FaultyBackend):
    """Naive attention that also calls an operation without a deterministic implementation (put_ without
    accumulation: repeated indices race)."""

    name = "put"

    def deterministic(self, case):  # type: ignore[no-untyped-def]
        return "honoured (a test's stand-in)"

    def prepare(self, case, q, k, v) -> Prepared:  # type: ignore[no-untyped-def]
        prepared = super().prepare(case, q, k, v)
        inner = prepared.call

        def call(*args):  # type: ignore[no-untyped-def]
            torch.zeros(2).put_(torch.tensor([0, 0]), torch.tensor([1.0, 2.0]))
            return inner(*args)

        prepared.call = call
        return prepared


def test_an_operation_pytorch_refuses_in_the_mode_is_a_skip_naming_it() -> None:
    record = measured(make_case(), PutBackend())
    assert record.status == "skipped"
    assert record.reason.startswith("deterministic asked, refused by PyTorch: put_ does not have a deterministic "
                                    "implementation")
    assert measured(make_case(), PutBackend(), Settings(RunInfo("r", "t"), ONE_SAMPLE)).status == "ok"  # not asked


def test_flash_attention_gets_deterministic_true_in_the_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """The adapter passes the library's own switch, and the record's kernel says it did."""
    from attnbench.backends import flash
    from tests.test_conformance import fake_module
    from tests.test_flash_standin import standin_flash_attn_func

    seen: list[object] = []
    inner = standin_flash_attn_func(False, False)

    def flash_attn_func(*args, deterministic=None, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(deterministic)
        return inner(*args, deterministic=deterministic, **kwargs)

    monkeypatch.setitem(sys.modules, "flash_attn", fake_module("flash_attn", flash_attn_func=flash_attn_func))
    on_cpu_too(monkeypatch, flash.FlashAttn2, flash.FlashAttn3, flash.FlashAttn4)
    case = make_case(dtype="bfloat16", mode="fwd_bwd", causal=True)
    record = measured(case, flash.FlashAttn2())
    assert record.status == "ok", record.reason
    assert set(seen) == {True} and "deterministic=True" in record.kernel
    assert record.extra["deterministic"] == "honoured (deterministic=True to flash-attn's backward)"
    seen.clear()
    record = measured(case, flash.FlashAttn2(), Settings(RunInfo("r", "t"), ONE_SAMPLE))
    assert set(seen) == {False} and "deterministic" not in record.kernel


SUITE = """name: det
device: cpu
backends: [naive, sdpa-math]
timing: {warmup_ms: 0, budget_ms: 1, min_samples: 1, max_samples: 1}
sweep: {seq_len: [32], heads: [2], head_dim: [16], causal: [true]}
"""


@pytest.mark.slow
def test_the_suite_option_and_the_run_flag_ask_for_it(tmp_path: Path) -> None:
    plain = tmp_path / "det.yaml"
    plain.write_text(SUITE)
    asking = tmp_path / "asking.yaml"
    asking.write_text(SUITE.replace("device: cpu", "device: cpu\ndeterministic: true"))
    bad = tmp_path / "bad.yaml"
    bad.write_text(SUITE.replace("device: cpu", "device: cpu\ndeterministic: sometimes"))
    assert load_suite(plain).model.deterministic is False and load_suite(asking).model.deterministic is True
    with pytest.raises(SuiteError, match="deterministic"):
        load_suite(bad)
    assert "--deterministic" in RunOptions(deterministic=True).to_argv()
    assert "--deterministic" in resume_command(plain, tmp_path / "run", RunOptions(deterministic=True))
    assert "--deterministic" not in RunOptions().to_argv()
    quiet = Console(file=open("/dev/null", "w"))
    for suite, options, asked in ((plain, RunOptions(), False), (plain, RunOptions(deterministic=True), True),
                                  (asking, RunOptions(), True)):
        out = tmp_path / f"run-{suite.stem}-{options.deterministic}"
        outcome = session.execute(session.plan(suite, options), out, quiet, lambda: False, options)
        assert json.loads((out / "env.json").read_text())["deterministic"] is asked
        assert all(("deterministic" in r.extra) is asked and r.repeatable for r in outcome.records)


def built_in(registry) -> list[str]:  # type: ignore[no-untyped-def]
    """The registry's built-in backends (other tests register plugins into the same process's registry)."""
    from attnbench.backends.registry import builtin_modules

    return [name for name in registry.names() if type(registry.get(name)).__module__ in builtin_modules()]
