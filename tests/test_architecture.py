"""The shape of the code: the import graph of attnbench/ has no cycle and no import points up a layer but the
registry's decorator; between its subpackages (the folders are the layers) there is no cycle and no import pointing
up, types included, and at most MAX_LAYERS layers; comments and docstrings are at most MAX_PROSE of the package's
characters, at most MAX_TOP modules sit directly under attnbench/, and one function makes a measurement. (Style and
complexity are ruff's, in `make test`.)

Imports are read from the source (module-level and inside functions alike). Between modules, those under
`if TYPE_CHECKING:` are types only and do not count; between subpackages they count too. A layer is the length of
the longest chain of imports below it.
"""

from __future__ import annotations

import ast
import io
import tokenize
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "attnbench"
MAX_LAYERS = 8
MAX_PROSE = 0.15  # pyperf's source is 6% prose, tritonbench's 15%, asv's 18% by this count
MAX_TOP = 12


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in PACKAGE.rglob("*.py")}


def is_upward_allowed(importer: str, imported: str) -> bool:
    """The one import allowed to point up: a backend's `@register` from the registry, which imports the built-in
    backends by name at run time (importlib), not by an import statement."""
    return importer.startswith("attnbench.backends.") and imported == "attnbench.backends.registry"


@cache
def import_graph(types_too: bool = False) -> dict[str, frozenset[str]]:
    known = modules()
    graph: dict[str, frozenset[str]] = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                       and getattr(block.test, "id", None) == "TYPE_CHECKING" for node in ast.walk(block)}
        targets: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in typing_only and not types_too:
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


def layers(graph: dict[str, frozenset[str]] | None = None, allowed=None) -> dict[str, int]:
    graph = import_graph() if graph is None else graph
    allowed = allowed or is_upward_allowed
    depth: dict[str, int] = {}

    def layer(name: str, seen: tuple[str, ...] = ()) -> int:
        assert name not in seen, "import cycle: " + " -> ".join((*seen, name))
        if name not in depth:
            below = [layer(t, (*seen, name)) for t in graph[name] if not allowed(name, t)]
            depth[name] = 1 + max(below, default=0)
        return depth[name]

    for name in graph:
        layer(name)
    return depth


def folder_of(module: str) -> str:
    """A module's subpackage (attnbench.run.session -> attnbench.run); a module directly under attnbench/ is its
    own node (the package's thin public shims, its entry points)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or (PACKAGE / parts[-1]).is_dir() else module


def folder_graph() -> dict[str, frozenset[str]]:
    """The imports between subpackages, those under TYPE_CHECKING included, but a backend's `@register`."""
    edges: dict[str, set[str]] = {}
    for module, targets in import_graph(types_too=True).items():
        edges.setdefault(folder_of(module), set())
        for target in targets:
            if folder_of(target) != folder_of(module) and not is_upward_allowed(module, target):
                edges[folder_of(module)].add(folder_of(target))
    return {name: frozenset(ts) for name, ts in edges.items()}


@pytest.mark.slow
def test_the_import_graph_has_no_cycle_types_included() -> None:
    assert layers()
    pairs = sorted({tuple(sorted((a, b))) for a, ts in import_graph(True).items() for b in ts
                    if a in import_graph(True).get(b, ())})
    assert pairs == []  # no half-circle: a definition two modules both need is in the one below
    assert layers(import_graph(True))


@pytest.mark.slow
def test_the_subpackages_have_no_cycle_no_import_up_and_at_most_eight_layers() -> None:
    graph = folder_graph()
    depth = layers(graph, allowed=lambda a, b: False)  # asserts there is no cycle, types included
    upward = [(a, b) for a, ts in graph.items() for b in ts if depth[b] >= depth[a]]
    assert upward == []
    deepest = max(depth.values())
    assert deepest <= MAX_LAYERS, f"{deepest} layers: {sorted((d, n) for n, d in depth.items())}"
    assert {"attnbench.core", "attnbench.run", "attnbench.report"} <= set(graph)  # the folders are the nodes


def test_at_most_twelve_modules_sit_directly_under_the_package() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP, top


@pytest.mark.slow
def test_no_import_points_up_a_layer_but_the_registrys_decorator() -> None:
    depth = layers()
    upward = [(a, b) for a, targets in import_graph().items() for b in targets
              if depth[b] >= depth[a] and not is_upward_allowed(a, b)]
    assert upward == []
    # the exception is real: the backends do import the registry, which sits above them
    assert any(is_upward_allowed(a, b) and depth[b] >= depth[a] for a, ts in import_graph().items() for b in ts)


def prose_characters(source: str) -> int:
    """The characters of `source`'s comments and docstrings (module, class and function ones, quotes included)."""
    tree = ast.parse(source)
    comments = sum(len(t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline)
                   if t.type == tokenize.COMMENT)
    docstrings = sum(len(ast.get_source_segment(source, node.body[0]) or "") for node in ast.walk(tree)
                     if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                     and ast.get_docstring(node, clean=False) is not None)
    return comments + docstrings


def test_prose_counts_comments_and_docstrings_only() -> None:
    source = '"""Doc."""\n\n\ndef f() -> int:\n    """Two."""\n    return 1  # one\n\n\nx = "not prose"\n'
    assert prose_characters(source) == len('"""Doc."""') + len('"""Two."""') + len("# one")


def test_comments_and_docstrings_are_at_most_15_percent_of_the_package() -> None:
    sources = [path.read_text(encoding="utf-8") for path in modules().values()]
    share = sum(map(prose_characters, sources)) / sum(map(len, sources))
    assert share <= MAX_PROSE, f"comments and docstrings are {share:.1%} of attnbench/'s characters"


# Callers of a backend's `prepare` that are not measurements, each with why. (precompile.compile_job goes through
# stages.prepare itself, in a compile process before the run's first measurement, only to leave the compiled graph
# or JIT module in the on-disk cache: nothing there is checked, timed or recorded, and the measurement still makes
# its own `prepare`, which then loads it and counts that load as its setup.)
NOT_MEASUREMENTS = {"attnbench.run.rounds.resample": "a later round of a measurement already made: it makes no "
                                                     "record, its samples join that one's"}


def test_one_function_makes_a_measurement() -> None:
    """`prepare` (a backend's case made ready for its kernel) is called in one place only: stages.prepare, the first
    stage of measure.measure, which the in-process run and the isolated worker both reach through measure.InProcess;
    and, by name, by the callers in NOT_MEASUREMENTS, which make no record."""
    callers = []
    for name, path in modules().items():
        if name.startswith("attnbench.backends."):
            continue  # a backend may prepare through another (packing, flex's paged path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            if any(isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "prepare"
                   and "backend" in ast.unparse(c.func.value) for c in ast.walk(function)):
                callers.append(f"{name}.{function.name}")
    assert sorted(callers) == sorted(["attnbench.run.stages.prepare", *NOT_MEASUREMENTS])
    worker = (PACKAGE / "run" / "isolation.py").read_text(encoding="utf-8")
    assert "InProcess(" in worker and "_measure(" not in worker
    ahead = (PACKAGE / "run" / "precompile.py").read_text(encoding="utf-8")  # it makes no record and times nothing
    assert not any(word in ahead for word in ("make_record", "Record(", "timer", "measure("))


def test_no_comment_cites_a_conventions_file_that_is_not_in_the_repository() -> None:
    """The conventions live in docs/conventions.md; a comment citing the old out-of-tree name points nowhere, and
    every section a comment names is a heading of the page it names."""
    import re

    root = PACKAGE.parent
    old = "GUIDE" + ".md"
    sources = [*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.yaml"), *(root / "tests").glob("*.py"),
               *(root / "docs").glob("*.md")]
    assert [str(p.relative_to(root)) for p in sources if old in p.read_text(encoding="utf-8")] == []
    headings = {page: {line.lstrip("#").strip() for line in (root / "docs" / page).read_text().splitlines()
                       if line.startswith("#")} for page in ("conventions.md", "suites.md", "results.md")}
    cited = {(page, " ".join(section.split())) for p in sources for page, section in
             re.findall(r'docs/(conventions\.md|suites\.md|results\.md) "([^"]+)"', p.read_text(encoding="utf-8"))}
    assert cited and {(page, s) for page, s in cited if s not in headings[page]} == set()
