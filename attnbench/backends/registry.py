"""Backend registry: name -> backend, filled by a decorator, entry points and `module:attr` plugins."""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from attnbench.backends.base import Backend
from attnbench.core.errors import RegistryError, SuiteError, did_you_mean

if TYPE_CHECKING:
    from attnbench.sweep.suite import Suite

ENTRY_POINT_GROUP = "attnbench.backends"


def builtin_modules() -> list[str]:
    """The adapter modules of attnbench.backends, by walking the package (not this module, nor `testing`)."""
    import attnbench.backends as package

    return [f"{package.__name__}.{m.name}" for m in pkgutil.iter_modules(package.__path__)
            if m.name not in ("registry", "testing")]


Target = type[Backend] | Backend | str
B = TypeVar("B", bound=type[Backend])


class Registry:
    """Named backends: a Backend class, an instance, or a lazy "module:attr" string."""

    def __init__(self) -> None:
        self._targets: dict[str, Target] = {}
        self._loaded: dict[str, Backend] = {}
        self._plugins: dict[str, list[str]] = {}

    def add(self, name: str, target: Target) -> None:
        if name in self._targets:
            raise RegistryError(f"backend {name!r} is already registered ({_describe(self._targets[name])})")
        self._targets[name] = target

    def register(self, cls: B) -> B:
        self.add(cls.spec.name, cls)
        return cls

    def names(self) -> list[str]:
        return list(self._targets)

    def __contains__(self, name: str) -> bool:
        return name in self._targets

    def get(self, name: str) -> Backend:
        """The backend called `name`, loading it on first use; unknown names get a did-you-mean."""
        if name not in self._targets:
            raise RegistryError(f"unknown backend {name!r}{did_you_mean(name, self.names())}; "
                                f"known: {', '.join(self.names())}")
        if name not in self._loaded:
            self._loaded[name] = _instantiate(self._targets[name], name)
        return self._loaded[name]

    def chosen(self, requested: list[str] | None, suite: Suite | None = None) -> list[str]:
        """The backend names a run measures: `requested`, else the suite's, else every registered one;
        all known."""
        if requested is not None:
            names, where = requested, "--backend"
        elif suite is not None and suite.model.backends is not None:
            names, where = suite.model.backends, f"{suite.path}: backends"
        else:
            return self.names()
        for index, name in enumerate(names):
            if name not in self:
                position = f"[{index}]" if where != "--backend" else ""
                raise SuiteError(f"{where}{position}: unknown backend "
                                 f"{name!r}{did_you_mean(name, self.names())}; allowed: "
                                 f"{', '.join(self.names())}")
        return list(dict.fromkeys(names))

    def resolve(self, names: list[str] | None) -> list[Backend]:
        """Backends for `names` (all registered when None), in the order given."""
        return [self.get(name) for name in (self.names() if names is None else names)]

    def load_entry_points(self) -> None:
        """Register third-party backends declared in the `attnbench.backends` entry-point group."""
        for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if entry.name not in self._targets:
                self.add(entry.name, entry.value)

    def load_plugin(self, spec: str) -> list[str]:
        """Import `module:attr` (a Backend class, instance, or list) and register it; again: a no-op."""
        if spec in self._plugins:
            return self._plugins[spec]
        found = load_object(spec)
        items = found if isinstance(found, (list, tuple)) else [found]
        names = []
        for item in items:
            backend = _instantiate(item, spec)
            self.add(backend.name, backend)
            names.append(backend.name)
        self._plugins[spec] = names
        return names


def load_object(spec: str) -> object:
    """Import the object named by "module:attr"; failures are one-line RegistryErrors."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise RegistryError(f"plugin {spec!r}: expected 'module:attr'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # a plugin may fail in any way while importing
        raise RegistryError(f"plugin {spec!r}: cannot import {module_name} "
                            f"({type(exc).__name__}: {exc})") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise RegistryError(f"plugin {spec!r}: module {module_name} has no attribute {attr!r}") from None


def _instantiate(target: object, name: str) -> Backend:
    if isinstance(target, str):
        target = load_object(target)
    if isinstance(target, type) and issubclass(target, Backend):
        target = target()
    if not isinstance(target, Backend):
        raise RegistryError(f"backend {name!r}: {target!r} is not an attnbench Backend")
    return target


def _describe(target: Target) -> str:
    if isinstance(target, str):
        return target
    cls = target if isinstance(target, type) else type(target)
    return f"{cls.__module__}:{cls.__qualname__}"


REGISTRY = Registry()
register: Callable[[B], B] = REGISTRY.register
_builtins_loaded = False


def default_registry(plugins: list[str] | None = None) -> Registry:
    """The registry with the built-in backends, installed entry points and the named plugins."""
    global _builtins_loaded
    if not _builtins_loaded:
        # flash-attn-4's own directory joins sys.path after xformers.ops (attnbench.backends.layout).
        from attnbench.backends.layout import add_flash_attn_4_path

        add_flash_attn_4_path()
        for module in builtin_modules():
            importlib.import_module(module)
        REGISTRY.load_entry_points()
        _builtins_loaded = True
    for spec in plugins or []:
        REGISTRY.load_plugin(spec)
    return REGISTRY


def declared_kernels(device: str, mode: str) -> dict[str, tuple[str, ...]]:
    """Every built-in backend's attention kernel names on `device` in `mode`, by backend."""
    registry = default_registry()
    found: dict[str, tuple[str, ...]] = {}
    for name in registry.names():
        try:
            patterns = registry.get(name).capabilities.attention_kernels(device, mode)
        except Exception:  # a plugin that cannot load declares nothing here
            continue
        if patterns:
            found[name] = patterns
    return found
