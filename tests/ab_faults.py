"""A plugin backend for tests/test_ab.py: naive attention that ends its process (exit code 3) where AB_FAULT_EXIT is
set, as a B whose library crashes where A's does not. A module of its own, so both sides' workers import it."""

from __future__ import annotations

import os

from attnbench.backends.testing import FaultyBackend

EXIT_VAR = "AB_FAULT_EXIT"


class ExitsWhereTold(FaultyBackend):
    name = "exits-where-told"
    summary = "naive attention; its process exits where AB_FAULT_EXIT is set (tests/test_ab.py)"

    @property
    def fault(self) -> str:  # type: ignore[override] - read in the measuring process, per side
        return "exit" if os.environ.get(EXIT_VAR) else "none"
