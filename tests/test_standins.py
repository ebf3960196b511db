"""Every stand-in contract (tests/helpers.py `Standin`), run: each case gives the reference answer through the
library's stand-in, and the stand-in catches each sabotage of the adapter's mapping."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from attnbench.backends.base import Backend
from attnbench.core.case import Case
from tests.helpers import Measured, Standin, assert_sabotage_caught, measure_one
from tests.test_cudnn_fp8_standin import STANDIN as CUDNN_FP8
from tests.test_cudnn_standin import STANDIN as CUDNN
from tests.test_flash_fp8_standin import STANDIN as FLASH_FP8
from tests.test_flash_standin import QV_STANDIN as FLASH_QV
from tests.test_flash_standin import STANDIN as FLASH
from tests.test_flashinfer_standin import FP8_STANDIN as FLASHINFER_FP8
from tests.test_flashinfer_standin import MLA_STANDIN as FLASHINFER_MLA
from tests.test_flashinfer_standin import STANDIN as FLASHINFER
from tests.test_sage_standin import STANDIN as SAGE
from tests.test_sdpa_varlen_standin import STANDIN as SDPA_VARLEN

STANDINS: tuple[Standin, ...] = (CUDNN, CUDNN_FP8, FLASH, FLASH_QV, FLASH_FP8, FLASHINFER, FLASHINFER_MLA,
                                 FLASHINFER_FP8, SAGE, SDPA_VARLEN)


def case_runs() -> list[Any]:
    """(contract, case name, backend, case) for every case on every backend a contract drives."""
    return [pytest.param(standin, name, backend, c, marks=standin.case_marks,
                         id=f"{standin.name}-{name}" + (f"-on-{backend.name}" if len(standin.backends) > 1 else ""))
            for standin in STANDINS for name, backend, c in standin.runs()]


def sabotage_runs() -> list[Any]:
    """(contract, sabotage name) for every sabotage a contract declares."""
    return [pytest.param(standin, name, marks=standin.sabotage_marks, id=f"{standin.name}-{name}")
            for standin in STANDINS for name in standin.sabotages]


@pytest.mark.parametrize("standin, name, backend, c", case_runs())
def test_the_adapter_gives_the_reference_answer_through_the_standin(
        monkeypatch: pytest.MonkeyPatch, standin: Standin, name: str, backend: type[Backend], c: Case) -> None:
    recorded = standin.install(monkeypatch)
    record = measure_one(c, backend())
    assert record.status == "ok", record.reason
    standin.check(Measured(name, c, backend, record, recorded))


@pytest.mark.parametrize("standin, name", sabotage_runs())
def test_the_standin_catches_a_wrong_mapping(monkeypatch: pytest.MonkeyPatch, standin: Standin, name: str) -> None:
    standin.install(monkeypatch)
    sabotage, c = standin.sabotages[name]
    assert_sabotage_caught(c, standin.backends[0], sabotage, monkeypatch)


@pytest.mark.parametrize("standin", STANDINS, ids=lambda standin: standin.name)
def test_every_standin_has_a_case_to_pass_and_a_sabotage_to_catch(standin: Standin) -> None:
    """A stand-in with no case checks no mapping, and one with no sabotage has never shown it can fail one."""
    assert standin.backends, f"{standin.name} drives no backend"
    assert standin.cases, f"{standin.name} has no case"
    assert standin.sabotages, f"{standin.name} has no sabotage"


def test_every_contract_a_standin_file_declares_is_run_here() -> None:
    """A contract declared in a tests/test_*_standin.py but missing from STANDINS would run nowhere."""
    declared = {value.name for path in Path(__file__).parent.glob("test_*_standin.py")
                for value in vars(importlib.import_module(f"tests.{path.stem}")).values() if isinstance(value, Standin)}
    names = [standin.name for standin in STANDINS]
    assert len(names) == len(set(names)), names  # a name begins each of its tests' ids
    assert declared - set(names) == set(), "declared in a stand-in file, never run"
    assert set(names) - declared == set(), "run, but declared in no stand-in file"
