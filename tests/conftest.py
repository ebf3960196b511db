"""The test session's hooks and fixtures: per-worker state homes, one thread per xdist worker, the `slow` tests
first and the `gpu` marker's skip. Shared helpers live in tests/helpers.py."""

from __future__ import annotations

from pathlib import Path

import pytest

# Where attnbench keeps state between runs, read from the environment by the code and by every subprocess a test
# starts: the compile cache and calibration ($XDG_CACHE_HOME/attnbench, attnbench.run.compile_cache), the history
# database ($XDG_DATA_HOME/attnbench, attnbench.history.store) and FlashInfer's JIT workspace. Inductor's cache goes
# where a run without --cache-dir puts it ($XDG_CACHE_HOME/attnbench/inductor), never torch's default
# (/tmp/torchinductor_<user>, the user's own, which would make a test's compile depend on what ran there before).
STATE_HOMES = ("XDG_CACHE_HOME", "XDG_DATA_HOME", "FLASHINFER_WORKSPACE_BASE")
_saved_homes: dict[str, str | None] = {}
STATE_ROOT = pytest.StashKey[str]()
SHARED_INDUCTOR = "ATTNBENCH_TEST_INDUCTOR_CACHE"  # set by the controlling process, inherited by its xdist workers
# Inductor's vector ISAs come from the CPU's flags, without its check that the C++ compiler builds and loads each
# (12 s of g++ builds in a process with an empty Inductor cache, 2 s with the flag, whose AVX-512 bf16 and VNNI
# checks still build; a dlopen subprocess per ISA in every other): the same ISAs with Debian's g++.
VEC_ISA_OK = "TORCHINDUCTOR_VEC_ISA_OK"
SERIAL_WORDS = "pytest.mark.serial"  # how a serial test is marked, so that the serial pass finds its file


def pytest_configure(config: pytest.Config) -> None:
    """Point every state home at a temporary folder of this test process (each xdist worker its own) before any
    test is collected: the tests never read or write the user's real cache, so a calibration measured while the
    tests load the machine never becomes the figure a later `attnbench run` divides by, and no worker sees another's.
    A run made in a test measures no CPU roof (about a second per dtype, in every run): the tests of the roofs ask
    for one (attnbench.run.calibration.ROOF_BUDGET_VAR). Inductor skips its vector ISA check (VEC_ISA_OK)."""
    import os
    import tempfile

    from attnbench.run.calibration import ROOF_BUDGET_VAR

    _saved_homes[ROOF_BUDGET_VAR] = os.environ.get(ROOF_BUDGET_VAR)
    os.environ[ROOF_BUDGET_VAR] = "0"
    _saved_homes[VEC_ISA_OK] = os.environ.get(VEC_ISA_OK)
    os.environ[VEC_ISA_OK] = "1"

    root = tempfile.mkdtemp(prefix="attnbench-test-state-")
    config.stash[STATE_ROOT] = root
    for name in STATE_HOMES:
        _saved_homes[name] = os.environ.get(name)
        os.environ[name] = os.path.join(root, name.lower())
    from attnbench.run.compile_cache import INDUCTOR_ENV, default_dir

    _saved_homes[INDUCTOR_ENV] = os.environ.get(INDUCTOR_ENV)
    os.environ[INDUCTOR_ENV] = str(shared_inductor_cache(root, default_dir() / "inductor"))
    one_thread_per_worker()


def shared_inductor_cache(root: str, inductor: Path) -> Path:
    """`inductor` (where this process's runs keep Inductor's cache) as a link to one folder that every xdist worker
    shares, made by the controlling process before it starts them: a graph one worker compiled loads in the other.
    Inductor writes each cache entry whole and then renames it, so two writers never leave a torn one. The tests
    that need a cold cache give --cache-dir a folder of their own."""
    import os

    _saved_homes.setdefault(SHARED_INDUCTOR, os.environ.get(SHARED_INDUCTOR))
    shared = Path(os.environ.setdefault(SHARED_INDUCTOR, os.path.join(root, "inductor-shared")))
    shared.mkdir(parents=True, exist_ok=True)
    inductor.parent.mkdir(parents=True, exist_ok=True)
    inductor.symlink_to(shared, target_is_directory=True)
    return inductor


def one_thread_per_worker() -> None:
    """Under pytest-xdist with more than one worker, each worker (and every process it starts) computes on one
    thread. Each worker's OpenMP would otherwise start a thread per core, and threads that spin at OpenMP's barriers
    while another worker's hold the cores make every op many times slower. The `serial` pass is not a worker pass
    and keeps torch's own count."""
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
    work a fresh folder costs (Inductor's probe of the CPU's vector ISAs, seconds, is kept in the folder).
    pytest_configure sets both."""
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
    early and short ones even out the end, instead of one worker's long test ending the pass while the other idles.
    Every `serial` test's file must say SERIAL_WORDS (serial_files_found_by_name). Then, without CUDA, the `gpu`
    tests skip."""
    import torch

    items.sort(key=lambda item: "slow" not in item.keywords)  # stable: the rest keep their order
    serial_files_found_by_name(items)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run scripts/gpu-check.sh on one)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def serial_files_found_by_name(items: list[pytest.Item]) -> None:
    """The serial pass collects only the files that say SERIAL_WORDS (pytest_ignore_collect): a serial test marked
    any other way would run in neither pass, so it stops the session."""
    for path in sorted({item.path for item in items if item.get_closest_marker("serial")}):
        if SERIAL_WORDS not in path.read_text(encoding="utf-8"):
            raise pytest.UsageError(f"{path.name} marks a test serial without the words {SERIAL_WORDS}, so the "
                                    f"serial pass would not collect it: write @{SERIAL_WORDS}")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under `-m serial` (make test's serial pass), a test file without SERIAL_WORDS is not collected: collecting
    every file to find three tests took 11 s, their files 3.5 s."""
    if config.getoption("markexpr", "") != "serial" or collection_path.suffix != ".py":
        return None
    if not collection_path.name.startswith("test_"):
        return None
    return SERIAL_WORDS not in collection_path.read_text(encoding="utf-8") or None
