"""The backend registry: names, duplicates, entry points, plugins and did-you-mean."""

from __future__ import annotations

import importlib.metadata

import pytest

from attnbench.backends.registry import Registry, default_registry
from attnbench.backends.testing import Raising, Wrong
from attnbench.core.errors import RegistryError


def test_builtins_are_registered() -> None:
    names = default_registry().names()
    for name in ("naive", "sdpa", "sdpa-math", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn"):
        assert name in names


def test_duplicate_name_refused() -> None:
    registry = Registry()
    registry.register(Raising)
    with pytest.raises(RegistryError, match="'faulty-raise' is already registered"):
        registry.add("faulty-raise", Wrong)


def test_unknown_name_did_you_mean() -> None:
    with pytest.raises(RegistryError, match=r"unknown backend 'sdpa-flsh' \(did you mean 'sdpa-flash'\?\)"):
        default_registry().get("sdpa-flsh")


def test_lazy_string_target_loads_on_first_use() -> None:
    registry = Registry()
    registry.add("w", "attnbench.backends.testing:Wrong")
    assert registry.get("w").fault == "wrong"


def test_entry_point_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    point = importlib.metadata.EntryPoint("third-party", "attnbench.backends.testing:Raising", "attnbench.backends")
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group: [point] if group == "attnbench.backends" else [])
    registry = Registry()
    registry.load_entry_points()
    assert registry.names() == ["third-party"]
    assert registry.get("third-party").fault == "raise"


def test_plugin_module_attr() -> None:
    registry = Registry()
    assert registry.load_plugin("attnbench.backends.testing:FAULTY") == ["faulty-raise", "faulty-oom", "faulty-wrong"]


@pytest.mark.parametrize("spec, message", [
    ("no_such_module_xyz:Thing", "cannot import no_such_module_xyz"),
    ("attnbench.backends.testing:Nope", "has no attribute 'Nope'"),
    ("attnbench.backends.testing", "expected 'module:attr'"),
    ("attnbench.backends.testing:FaultyBackend.fault", "has no attribute"),
])
def test_bad_plugins_are_one_line_errors(spec: str, message: str) -> None:
    with pytest.raises(RegistryError, match=message):
        Registry().load_plugin(spec)


def test_the_old_registry_path_still_resolves_with_a_deprecation_warning() -> None:
    """A plugin written against `attnbench.registry.register` keeps working: the old path is the registry itself."""
    import importlib
    import sys

    import pytest

    from attnbench.backends import registry as current

    sys.modules.pop("attnbench.registry", None)
    with pytest.warns(DeprecationWarning, match="attnbench.backends.registry"):
        old = importlib.import_module("attnbench.registry")
    assert old is current and old.register is current.register


def test_model_code_imports_the_dispatch_table_from_attnbench_dispatch() -> None:
    from attnbench.dispatch import DispatchTable
    from attnbench.stats.dispatch import DispatchTable as Table

    assert DispatchTable is Table


def test_built_in_backends_are_found_by_walking_the_package(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module dropped into attnbench/backends is a built-in without being listed anywhere; every module that
    registers an adapter is walked."""
    from pathlib import Path

    import attnbench.backends as package
    from attnbench.backends.registry import builtin_modules

    folder = Path(package.__file__).parent
    registering = {f"attnbench.backends.{p.stem}" for p in folder.glob("*.py") if "@register\n" in p.read_text()}
    assert registering and registering <= set(builtin_modules())
    assert "attnbench.backends.testing" not in builtin_modules()  # its faulty backends come only as a plugin
    (tmp_path / "new_adapter.py").write_text("")
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
    assert "attnbench.backends.new_adapter" in builtin_modules()
