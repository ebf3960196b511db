"""attnbench.cli.probes: `list` and `doctor` reuse this installation's answers, and ask again whenever what they
depend on changes."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnbench.backends.registry import default_registry
from attnbench.cli.probes import FILE, Probes

ROOT = Path(__file__).resolve().parents[1]
RUNTIMES = ("jax", "onnxruntime", "openvino", "xformers", "torch._dynamo")


def list_in_a_new_process(cache: Path, *extra: str, command: str = "list") -> tuple[str, list[str]]:
    """`attnbench list --device cpu` (or `command`) in a fresh interpreter: its output, and which heavy runtimes it
    imported."""
    code = (f"import sys; sys.argv = ['attnbench', {command!r}, '--device', 'cpu', *{list(extra)!r}]\n"
            "from attnbench.cli.main import main\ntry: main()\nexcept SystemExit: pass\n"
            f"print('IMPORTED', [m for m in {RUNTIMES + ('torch',)!r} if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(cache),
                               "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    text, _, imported = proc.stdout.rpartition("IMPORTED ")
    return text, eval(imported)  # noqa: S307 - our own print of a list of str


@pytest.mark.slow
def test_a_second_list_imports_no_kernel_runtime_and_prints_the_same_table(tmp_path: Path) -> None:
    first, imported_first = list_in_a_new_process(tmp_path)
    installed = [m for m in ("jax", "onnxruntime", "openvino") if importlib.util.find_spec(m) is not None]
    assert set(installed) <= set(imported_first)  # asking means importing: what the store saves the next call
    assert (tmp_path / "attnbench" / FILE).is_file()
    second, imported_second = list_in_a_new_process(tmp_path)
    assert imported_second == []  # not even torch: --device cpu needs no CUDA check, and every answer is kept
    table = second.splitlines()
    assert table[:-1] == first.splitlines()  # every row as asked, versions and reasons included
    assert table[-1].startswith("backend probes: reused from") and "--fresh asks again" in table[-1]


@pytest.mark.slow
def test_a_second_doctor_imports_neither_torch_nor_a_kernel_runtime_and_says_the_same(tmp_path: Path) -> None:
    """torch's version, threads and CUDA build are kept with the backends' answers for a CPU installation."""
    first, imported_first = list_in_a_new_process(tmp_path, command="doctor")
    assert "torch" in imported_first
    second, imported_second = list_in_a_new_process(tmp_path, command="doctor")
    assert imported_second == []
    assert [line for line in second.splitlines() if not line.startswith("backend probes: reused from")] == \
        first.splitlines()


def test_torch_facts_are_asked_again_when_the_thread_count_is_set(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import attnbench.run.env as env

    asked: list[int] = []
    monkeypatch.setattr(env, "torch_facts", lambda: asked.append(1) or {"torch_threads": len(asked)})
    for threads in (None, None, str(int(os.environ.get("OMP_NUM_THREADS", "1")) + 1)):
        if threads:
            monkeypatch.setenv("OMP_NUM_THREADS", threads)
        probes = Probes("cpu", tmp_path)
        facts = probes.torch_facts()
        probes.save()
    assert len(asked) == 2 and facts == {"torch_threads": 2}


@pytest.fixture()
def naive_asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Calls of the naive backend's availability, counted (its answer: a planted reason)."""
    calls: list[str] = []
    backend = default_registry().get("naive")

    def availability(device: str) -> str:
        calls.append(device)
        return "planted reason"

    monkeypatch.setattr(backend, "availability", availability)
    return calls


def test_answers_are_reused_until_the_installation_or_environment_changes(
        tmp_path: Path, naive_asked: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    naive = default_registry().get("naive")

    def ask(**kwargs: bool) -> Probes:
        probes = Probes("cpu", tmp_path, **kwargs)
        assert probes.availability(naive) == "planted reason"
        probes.save()
        return probes

    assert Probes("cpu", tmp_path).first_call() is not None  # nothing stored yet: the imports are about to happen
    assert ask().note() is None and len(naive_asked) == 1
    assert Probes("cpu", tmp_path).first_call() is None
    reused = ask()
    assert len(naive_asked) == 1 and "reused from" in (reused.note() or "")
    ask(fresh=True)  # --fresh
    assert len(naive_asked) == 2
    monkeypatch.setenv("XFORMERS_MORE_DETAILS", "1")  # a variable a library reads
    ask()
    assert len(naive_asked) == 3
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setattr(sys, "path", [*sys.path, str(site)])
    ask()
    (site / "newlib-1.0.dist-info").mkdir()  # an install changes its directory
    os.utime(site, ns=(1, 1))
    ask()
    assert len(naive_asked) == 5


def test_a_gpu_and_a_plugin_are_always_asked(tmp_path: Path, naive_asked: list[str]) -> None:
    from attnbench.backends.testing import Raising

    naive = default_registry().get("naive")
    for _ in range(2):
        probes = Probes("cuda", tmp_path)
        probes.availability(naive)
        probes.save()
    assert naive_asked == ["cuda", "cuda"] and not (tmp_path / FILE).exists()  # a GPU's answers are never kept
    plugin = Raising()  # attnbench.backends.testing: a plugin, told how to fail
    for _ in range(2):
        probes = Probes("cpu", tmp_path)
        probes.availability(plugin)
        probes.save()
        assert probes.note() is None
    assert not (tmp_path / FILE).exists()
