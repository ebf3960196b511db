"""Record a library's functions from its source file as this folder keeps them: the definition's line with its
parameters and return annotation as written (decorators and docstring dropped), a body that raises, and after it
the function's own return statements and the assignments unpacking its calls to `--unpacking` names, each with its
line: what conformance reads of what a call returns, and of how a caller unpacks it.

    python -m tests.signatures.record path/to/interface.py _flash_attn_fwd _flash_attn_bwd flash_attn_func
    python -m tests.signatures.record path/to/_fa4.py _fa4_run_forward --unpacking _flash_attn_fwd

The output is the body of a recorded file; its header (the wheel, its version, the file read) is written by hand.
"""

from __future__ import annotations

import argparse
import ast
import copy
import sys
from pathlib import Path

RAISE = "raise NotImplementedError('recorded signature only')"
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def definition(tree: ast.Module, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """The last top-level definition of function `name` in `tree`, the one Python binds."""
    found = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
    if not found:
        raise SystemExit(f"no top-level function {name} in the file")
    return found[-1]


def kept(function: ast.AST, unpacking: frozenset[str]) -> list[ast.stmt]:
    """`function`'s own return statements and its assignments unpacking a call to an `unpacking` name, in order."""
    found, stack = [], list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return) or (
                isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "attr", getattr(node.value.func, "id", None)) in unpacking
                and any(isinstance(t, (ast.Tuple, ast.List)) for t in node.targets)):
            found.append(node)
        elif not isinstance(node, SCOPES):
            stack.extend(ast.iter_child_nodes(node))
    return sorted(found, key=lambda node: node.lineno)


def record(source: str, name: str, unpacking: frozenset[str] = frozenset()) -> str:
    """The recorded form of top-level function `name` from `source`."""
    function = definition(ast.parse(source), name)
    stub = copy.copy(function)
    stub.decorator_list, stub.body = [], [ast.Pass()]
    head = ast.unparse(stub).rsplit("\n", 1)[0]
    lines = [head, f"    {RAISE}"]
    lines += [f"    {ast.unparse(node)}  # line {node.lineno}" for node in kept(function, unpacking)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("names", nargs="+")
    parser.add_argument("--unpacking", nargs="*", default=[], help="keep assignments unpacking calls to these")
    args = parser.parse_args(argv)
    text = args.source.read_text()
    sys.stdout.write("\n\n".join(record(text, name, frozenset(args.unpacking)) for name in args.names))


if __name__ == "__main__":
    main()
