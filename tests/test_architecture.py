"""The shape of the code: the import graph of attnbench/ has no cycle and at most MAX_LAYERS layers, no import
points up a layer but the registry's decorator, no module is over MAX_LINES lines, and one function makes a
measurement.

Imports are read from the source (module-level and inside functions alike; those under `if TYPE_CHECKING:` are
types only and do not count). A module's layer is the length of the longest chain of imports below it.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "attnbench"
MAX_LAYERS = 10
MAX_LINES = 450


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in PACKAGE.rglob("*.py")}


def is_upward_allowed(importer: str, imported: str) -> bool:
    """The one import allowed to point up: a backend's `@register` from the registry, which imports the built-in
    backends by name at run time (importlib), not by an import statement."""
    return importer.startswith("attnbench.backends.") and imported == "attnbench.backends.registry"


@lru_cache(maxsize=None)
def import_graph() -> dict[str, frozenset[str]]:
    known = modules()
    graph: dict[str, frozenset[str]] = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                       and getattr(block.test, "id", None) == "TYPE_CHECKING" for node in ast.walk(block)}
        targets: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                    base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
                targets.add(base)
                targets.update(f"{base}.{alias.name}" for alias in node.names)
        graph[name] = frozenset(t for t in targets if t in known and t != name)
    return graph


def layers() -> dict[str, int]:
    graph = import_graph()
    depth: dict[str, int] = {}

    def layer(name: str, seen: tuple[str, ...] = ()) -> int:
        assert name not in seen, "import cycle: " + " -> ".join((*seen, name))
        if name not in depth:
            below = [layer(t, (*seen, name)) for t in graph[name] if not is_upward_allowed(name, t)]
            depth[name] = 1 + max(below, default=0)
        return depth[name]

    for name in graph:
        layer(name)
    return depth


def test_the_import_graph_has_no_cycle_and_at_most_ten_layers() -> None:
    depth = layers()
    deepest = max(depth.values())
    chain = sorted((d, n) for n, d in depth.items())[-3:]
    assert deepest <= MAX_LAYERS, f"{deepest} layers; deepest: {chain}"


def test_no_import_points_up_a_layer_but_the_registrys_decorator() -> None:
    depth = layers()
    upward = [(a, b) for a, targets in import_graph().items() for b in targets
              if depth[b] >= depth[a] and not is_upward_allowed(a, b)]
    assert upward == []
    # the exception is real: the backends do import the registry, which sits above them
    assert any(is_upward_allowed(a, b) and depth[b] >= depth[a] for a, ts in import_graph().items() for b in ts)


def test_no_module_is_over_450_lines() -> None:
    long = {name: n for name, path in modules().items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


# Callers of a backend's `prepare` that are not measurements, each with why. precompile.compile_job calls it in a
# compile process before the run's first measurement, only to leave the compiled graph in the on-disk cache: its
# tensors are thrown away, nothing there is checked, timed or recorded, and the measurement still makes its own
# `prepare` in measure._measure (which then loads the graph, and counts that load as its setup).
NOT_MEASUREMENTS = {"attnbench.run.precompile.compile_job": "compiles ahead; its result is only the on-disk cache"}


def test_one_function_makes_a_measurement() -> None:
    """`prepare` (a backend's case made ready for its kernel) is called in one place only: measure._measure, which
    the in-process run and the isolated worker both reach through measure.InProcess; and, by name, by the callers in
    NOT_MEASUREMENTS, which make no record."""
    callers = []
    for name, path in modules().items():
        if name.startswith("attnbench.backends."):
            continue  # a backend may prepare through another (packing, flex's paged path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            if any(isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "prepare"
                   and "backend" in ast.unparse(c.func.value) for c in ast.walk(function)):
                callers.append(f"{name}.{function.name}")
    assert sorted(callers) == sorted(["attnbench.run.measure._measure", *NOT_MEASUREMENTS])
    worker = (PACKAGE / "run" / "isolation.py").read_text(encoding="utf-8")
    assert "InProcess(" in worker and "_measure(" not in worker
    ahead = (PACKAGE / "run" / "precompile.py").read_text(encoding="utf-8")  # it makes no record and times nothing
    assert not any(word in ahead for word in ("make_record", "Record(", "timer", "measure("))
