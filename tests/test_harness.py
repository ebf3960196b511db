"""The test session itself: it keeps its hands off the user's state and runs on every core."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from attnbench.history.store import default_path
from attnbench.run.compile_cache import default_dir

ROOT = Path(__file__).resolve().parents[1]


def test_caches_and_history_point_at_a_temporary_folder_in_tests_and_their_subprocesses() -> None:
    """A calibration measured while the tests load the machine must never land in ~/.cache/attnbench, where the
    next `attnbench run` would divide by it (conftest.py's pytest_configure moves every state home)."""
    real = [Path.home() / ".cache", Path.home() / ".local" / "share"]
    temp = Path(tempfile.gettempdir()).resolve()
    code = ("from attnbench.run.compile_cache import default_dir; from attnbench.history.store import default_path; "
            "print(default_dir()); print(default_path())")
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout.split()
    for where in [default_dir(), default_path(), *map(Path, child)]:
        assert temp in where.resolve().parents, where
        assert not any(home in where.parents for home in real), where


@pytest.mark.xdist_group("harness-group")
def test_a_test_that_names_an_xdist_group_is_scheduled_as_one(request: pytest.FixtureRequest) -> None:
    """--dist loadgroup keeps a group on one worker by suffixing its tests' node ids with the group's name. Under
    pytest 9.2 the suffix is lost (the node id is derived), and the slurm module's tests, or the two that share
    flex's cold compile, spread over both workers: each starts its own cluster or compiles again."""
    if not request.config.getoption("loadgroup", default=False):
        pytest.skip("not run under --dist loadgroup")
    assert request.node.nodeid.endswith("@harness-group"), request.node.nodeid


def test_a_test_compiles_into_its_workers_cache_and_a_run_in_a_test_leaves_it_there(tmp_path: Path) -> None:
    """Inductor's cache in a test is the worker's $XDG_CACHE_HOME/attnbench/inductor (a link to the folder the
    workers share), not torch's default in /tmp that the user's own compiles share; a run with --cache-dir points it
    elsewhere only until the test ends (conftest.py's _compile_cache_restored), which the next test checks by
    finding it back."""
    from attnbench.run import compile_cache

    assert Path(os.environ[compile_cache.INDUCTOR_ENV]).resolve() == (default_dir() / "inductor").resolve()
    assert str(default_dir().resolve()) not in str((default_dir() / "inductor").resolve())  # the shared folder
    compile_cache.use(tmp_path / "elsewhere")
    assert os.environ[compile_cache.INDUCTOR_ENV] == str((tmp_path / "elsewhere" / "inductor").resolve())


def test_the_compile_cache_is_the_workers_again_after_a_test_moved_it() -> None:
    from attnbench.run import compile_cache

    assert Path(os.environ[compile_cache.INDUCTOR_ENV]).resolve() == (default_dir() / "inductor").resolve()


def test_a_worker_of_a_parallel_pass_computes_on_one_thread() -> None:
    """conftest.py's one_thread_per_worker: two workers' OpenMP threads on two cores spin against each other."""
    import torch

    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) <= 1:
        pytest.skip("not a worker of a parallel pass")
    assert torch.get_num_threads() == 1 and os.environ["OMP_NUM_THREADS"] == "1"
