"""Each adapter's `LibraryCall`s held against the installed signatures (else the ATen schema, else the
docstring's signature lines): a mismatch is the skip reason, naming the parameter, before any tensor is made.
An `UnpackedCall` is also held against what the installed function returns: the tuple lengths of its own
return statements (else its return annotation) against how many names its caller unpacks the result into. """

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from attnbench.backends.base import (  # noqa: F401 - LibraryCall: what a backend declares
    LibraryCall,
    first_line,
    installed_version,
    module_owner,
)

if TYPE_CHECKING:
    from attnbench.backends.base import Backend

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_KEYWORD = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


@dataclass(frozen=True)
class CallVerdict:
    """One call's state: `ok`, `mismatch`, `n/a` (not installed) or `unchecked`."""

    function: str  # module.qualname
    call: str  # LibraryCall.spelled()
    state: str
    detail: str
    parameter: str | None = None  # the one a mismatch is about
    signature: str | None = None
    signature_source: str | None = None  # "inspect.signature", "aten schema ...", "docstring"
    notes: tuple[str, ...] = ()
    caller: str | None = None  # the library function that makes the call, where it is not attnbench


@dataclass(frozen=True)
class UnpackedCall(LibraryCall):
    """A call whose result is unpacked into `unpacks` names: by attnbench, or by `caller`, another library's
    function making the call on attnbench's behalf, whose installed source says how many names it unpacks into
    (`unpacks` is what its recorded version does, used where that source cannot be read)."""

    unpacks: int = 1
    caller: LibraryCall | None = None


@dataclass(frozen=True)
class Conformance:

    state: str  # "ok", "mismatch", "n/a", "unchecked"
    summary: str
    verdicts: tuple[CallVerdict, ...] = field(default_factory=tuple)

    @property
    def problem(self) -> CallVerdict | None:
        return next((v for v in self.verdicts if v.state == "mismatch"), None)

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "summary": self.summary,
                "calls": [{"function": v.function, "call": v.call, "state": v.state, "detail": v.detail,
                           "parameter": v.parameter, "signature": v.signature,
                           "signature_source": v.signature_source, "notes": list(v.notes), "caller": v.caller}
                          for v in self.verdicts]}


@dataclass(frozen=True)
class Problem:

    parameter: str
    text: str


def parameter_list(sig: inspect.Signature) -> str:
    """`sig`'s parameter names with `/` and `*` markers."""
    parts: list[str] = []
    params = list(sig.parameters.values())
    star_done = False
    for i, p in enumerate(params):
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            parts.append(f"*{p.name}")
            star_done = True
        elif p.kind is inspect.Parameter.VAR_KEYWORD:
            parts.append(f"**{p.name}")
        else:
            if p.kind is inspect.Parameter.KEYWORD_ONLY and not star_done:
                parts.append("*")
                star_done = True
            parts.append(p.name)
        if p.kind is inspect.Parameter.POSITIONAL_ONLY and (
            i + 1 == len(params) or params[i + 1].kind is not inspect.Parameter.POSITIONAL_ONLY
        ):
            parts.append("/")
    return ", ".join(parts)


def check_signature(call: LibraryCall, sig: inspect.Signature) -> tuple[list[Problem], list[str]]:
    """The problems of calling `sig` as `call` declares, and notes:
    arguments landing in `*args` or `**kwargs`."""
    shown = f"{call.name}({parameter_list(sig)})"
    problems: list[Problem] = []
    notes: list[str] = []
    _positional_problems(call, sig, shown, problems, notes)
    _keyword_problems(call, sig, shown, problems, notes)
    _missing_required(call, sig, shown, problems)
    return problems, notes


def _slots(sig: inspect.Signature) -> list[inspect.Parameter]:
    return [p for p in sig.parameters.values() if p.kind in _POSITIONAL]


def _var(sig: inspect.Signature, kind: Any) -> inspect.Parameter | None:
    return next((p for p in sig.parameters.values() if p.kind is kind), None)


def _positional_problems(call: LibraryCall, sig: inspect.Signature, shown: str,
                         problems: list[Problem], notes: list[str]) -> None:
    slots = _slots(sig)
    var_positional = _var(sig, inspect.Parameter.VAR_POSITIONAL)
    for index, name in enumerate(call.positional):
        where = f"positional argument {index + 1} ('{name}')"
        if index < len(slots):
            if slots[index].name == name:
                continue
            there = f"the installed {shown} has '{slots[index].name}' there"
        elif var_positional is not None:
            notes.append(f"{where} goes to *{var_positional.name}")
            continue
        else:
            there = f"the installed {shown} takes {len(slots)} positional argument{'s' * (len(slots) != 1)}"
        problems.append(Problem(name, f"{where} moved: {there}, {_where_now(name, sig, slots)}"))


def _where_now(name: str, sig: inspect.Signature, slots: list[inspect.Parameter]) -> str:
    moved = sig.parameters.get(name)
    if moved is None:
        return f"and no parameter '{name}'"
    if moved.kind is inspect.Parameter.KEYWORD_ONLY:
        return f"and '{name}' is keyword-only"
    return f"and '{name}' at position {slots.index(moved) + 1}"


def _keyword_problems(call: LibraryCall, sig: inspect.Signature, shown: str,
                      problems: list[Problem], notes: list[str]) -> None:
    var_keyword = _var(sig, inspect.Parameter.VAR_KEYWORD)
    for name in call.keywords:
        p = sig.parameters.get(name)
        if name in call.positional:
            problems.append(Problem(name, f"'{name}' is declared both by position and by keyword"))
        if p is not None and p.kind in _KEYWORD:
            continue
        if p is not None and p.kind is inspect.Parameter.POSITIONAL_ONLY:
            problems.append(Problem(name, f"keyword '{name}' is positional-only in the installed {shown}"))
        elif var_keyword is not None:
            notes.append(f"keyword '{name}' goes to **{var_keyword.name}")
        else:
            problems.append(Problem(name, f"keyword '{name}' is not a parameter of the installed {shown}"))


def _missing_required(call: LibraryCall, sig: inspect.Signature, shown: str, problems: list[Problem]) -> None:
    # a moved one: reported
    filled = {p.name for p in _slots(sig)[: len(call.positional)]} | set(call.keywords)
    for p in sig.parameters.values():
        required = p.default is inspect.Parameter.empty and p.kind not in (
            inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        if required and p.name not in filled and p.name not in {q.parameter for q in problems}:
            problems.append(Problem(p.name, f"the installed {shown} requires '{p.name}', "
                                            "which attnbench does not pass"))


def installed_signatures(obj: Any) -> tuple[list[inspect.Signature], str]:
    """Every signature (overload) of `obj` and where it was read from; ValueError when there is none."""
    try:
        return [inspect.signature(obj)], "inspect.signature"
    except (ValueError, TypeError) as exc:
        unreadable = exc
    schema = _aten_schema_signature(obj)
    if schema is not None:
        return [schema[0]], schema[1]
    docs = docstring_signatures(getattr(obj, "__doc__", None) or "", getattr(obj, "__name__", None) or "")
    if docs:
        return docs, "docstring"
    raise ValueError(f"no signature to read ({unreadable})")


def _aten_schema_signature(obj: Any) -> tuple[inspect.Signature, str] | None:
    """A PyTorch builtin's signature from `torch.ops.aten.NAME.default`'s schema."""
    if not str(getattr(obj, "__module__", "") or "").startswith("torch"):
        return None
    name = getattr(obj, "__name__", None)
    try:
        import torch

        schema = getattr(torch.ops.aten, name).default._schema  # type: ignore[arg-type]
    except Exception:
        return None
    params = []
    for arg in schema.arguments:
        kind = inspect.Parameter.KEYWORD_ONLY if arg.kwarg_only else inspect.Parameter.POSITIONAL_OR_KEYWORD
        default = arg.default_value if arg.has_default_value() else inspect.Parameter.empty
        params.append(inspect.Parameter(arg.name, kind, default=default))
    return inspect.Signature(params), f"aten schema {schema.name}"


def docstring_signatures(doc: str, name: str) -> list[inspect.Signature]:
    """The signatures a builtin's docstring states, one per overload (PyTorch's `name(...) -> Tensor`,
    nanobind's lines, pybind11's numbered `1. name(...)`); only names, kinds and whether a default exists are
    read."""
    if not name:
        return []
    found = []
    lines = doc.splitlines(keepends=True)
    for index, line in enumerate(lines):
        text = line.strip()
        numbered = text.split(". ", 1)
        if len(numbered) == 2 and numbered[0].isdigit():  # pybind11's "1. name(...)"
            text = numbered[1]
        if not text.startswith(f"{name}("):
            continue
        # PyTorch's may wrap: read on until the parenthesis closes.
        params = _parameter_texts(text[len(name):] + "".join(lines[index + 1:]))
        if params is None:
            continue
        signature = _signature_of(params)
        if signature is not None:
            found.append(signature)
    # pybind11 opens overloads with a catch-all `name(*args, **kwargs)`.
    real = [s for s in found if not _catch_all(s)]
    return real or found


def _catch_all(signature: inspect.Signature) -> bool:
    kinds = [p.kind for p in signature.parameters.values()]
    return kinds == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]


def _parameter_texts(text: str) -> list[str] | None:
    """The top-level parameter texts of the `(...)` opening `text` (quotes, brackets, `<repr>` as units); None
    when it does not close."""
    assert text.startswith("(")
    depth, current, parts, index = 0, [], [], 0
    while index < len(text):
        char = text[index]
        end = _unit_end(text, index, "".join(current))
        if end == -1:
            return None
        if end is not None:
            current.append(text[index:end])
            index = end
            continue
        index += 1
        if char in "([{":
            depth += 1
            if depth == 1 and char == "(":
                continue
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                tail = "".join(current).strip()
                return [*parts, tail] if tail else parts
        elif char == "," and depth == 1:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    return None


def _unit_end(text: str, index: int, before: str) -> int | None:
    """The end of a quoted string or `<repr>` default opening at `index`; -1: never closes;
    None: none opens."""
    char = text[index]
    if char in "\'\"":
        close = text.find(char, index + 1)
        return -1 if close < 0 else close + 1
    if char != "<" or not before.rstrip().endswith("="):
        return None
    depth = 0
    for end in range(index, len(text)):
        depth += (text[end] == "<") - (text[end] == ">")
        if depth == 0:
            return end + 1
    return -1


def _signature_of(params: list[str]) -> inspect.Signature | None:
    """An inspect.Signature from texts such as `q: mod.tensor`, `x: int = 0`, `*`, `/`, `**kw`."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    built: list[inspect.Parameter] = []
    for text in params:
        if text == "/":
            built = [p.replace(kind=inspect.Parameter.POSITIONAL_ONLY) for p in built]
            continue
        if text == "*":
            kind = inspect.Parameter.KEYWORD_ONLY
            continue
        head, has_default = _split_default(text)
        name = head.split(":", 1)[0].strip()
        if name.startswith("**"):
            built.append(inspect.Parameter(name[2:], inspect.Parameter.VAR_KEYWORD))
            continue
        if name.startswith("*"):
            built.append(inspect.Parameter(name[1:], inspect.Parameter.VAR_POSITIONAL))
            kind = inspect.Parameter.KEYWORD_ONLY
            continue
        if not name.isidentifier():
            return None
        default = "..." if has_default else inspect.Parameter.empty
        built.append(inspect.Parameter(name, kind, default=default))
    try:
        return inspect.Signature(built)
    except ValueError:  # e.g. a parameter without a default after one with
        return None


def _split_default(text: str) -> tuple[str, bool]:
    depth = 0
    for index, char in enumerate(text):
        depth += (char in "([{") - (char in ")]}")
        if char == "=" and depth == 0:
            return text[:index], True
    return text, False


# --- what a call returns ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Returns:
    """How many values a function returns: `counts`, the tuple lengths read; `whole`, every return was read;
    `shown`, what was read, in the library's own words."""

    counts: frozenset[int]
    whole: bool
    shown: str


@dataclass(frozen=True)
class Unpack:
    """An assignment unpacking a call's result into `count` names
    (`starred`: `a, b, *rest =`, at least `count`)."""

    count: int
    starred: bool = False

    def fits(self, counts: frozenset[int]) -> bool:
        return self.count in counts or (self.starred and any(n >= self.count for n in counts))

    def __str__(self) -> str:
        return f"{'at least ' * self.starred}{self.count} value{'s' * (self.count != 1)}"


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _definition(obj: Any) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """`obj`'s own definition, parsed from its source; None when there is no source to read."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(obj))))
    except (OSError, TypeError, SyntaxError):
        return None
    node = tree.body[0] if tree.body else None
    return node if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def _own_returns(function: ast.AST) -> list[ast.Return]:
    """The return statements of `function` itself, in order, not those of the functions it defines."""
    found, stack = [], list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return):
            found.append(node)
        elif not isinstance(node, _SCOPES):
            stack.extend(ast.iter_child_nodes(node))
    return sorted(found, key=lambda node: node.lineno)


def _tuple_lengths(value: ast.expr | None) -> frozenset[int] | None:
    """The lengths of the tuple `value` builds (`a if c else b` of tuples: either);
    None: not a tuple we can count."""
    if isinstance(value, ast.Tuple) and not any(isinstance(e, ast.Starred) for e in value.elts):
        return frozenset({len(value.elts)})
    if isinstance(value, ast.IfExp):
        body, orelse = _tuple_lengths(value.body), _tuple_lengths(value.orelse)
        return body | orelse if body is not None and orelse is not None else None
    return None


def _dotted_tail(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


_SINGLE = frozenset({"Tensor", "None", "int", "float", "bool", "str"})


def _annotation_lengths(node: ast.expr) -> frozenset[int] | None:
    """The lengths an annotation allows: `Tuple[a, b]` 2, `Union`/`Optional`/`|` each member's, a tensor 1;
    None for `Tuple[X, ...]` or anything else."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _union((node.left, node.right))
    if isinstance(node, ast.Constant) and node.value is None:
        return frozenset({1})
    if not isinstance(node, ast.Subscript):
        return frozenset({1}) if _dotted_tail(node) in _SINGLE else None
    kind = _dotted_tail(node.value)
    members = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
    if kind in ("Tuple", "tuple"):
        ellipsis = any(isinstance(m, ast.Constant) and m.value is Ellipsis for m in members)
        return None if ellipsis else frozenset({len(members)})
    if kind == "Optional":
        return _union((*members, ast.Constant(None)))
    return _union(members) if kind == "Union" else None


def _union(members: tuple[ast.expr, ...] | list[ast.expr]) -> frozenset[int] | None:
    lengths = [_annotation_lengths(m) for m in members]
    return None if any(n is None for n in lengths) else frozenset().union(*lengths)  # type: ignore[arg-type]


def _return_annotation(obj: Any) -> str | None:
    try:
        annotation = inspect.signature(obj).return_annotation
    except (ValueError, TypeError):
        return None
    if annotation is inspect.Signature.empty:
        return None
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


def returns_of(obj: Any) -> Returns | None:
    """What `obj` returns, read from its own return statements (an annotation can lag behind them:
    flash-attn-4 4.0.0b19 annotated two values and returned four), else from its return annotation; None when
    neither says."""
    function = _definition(obj)
    statements = _own_returns(function) if function is not None else []
    read = [(r, _tuple_lengths(r.value)) for r in statements]
    counted = [(r, n) for r, n in read if n is not None]
    if counted:
        shown = "; ".join(dict.fromkeys(ast.unparse(r) for r, _ in counted))
        return Returns(frozenset().union(*(n for _, n in counted)), len(counted) == len(read), shown)
    annotation = _return_annotation(obj)
    try:
        counts = _annotation_lengths(ast.parse(annotation, mode="eval").body) if annotation else None
    except SyntaxError:
        counts = None
    return Returns(counts, True, f"annotated -> {annotation}") if counts else None


def unpacks_of(caller: Any, callee: str) -> list[Unpack] | None:
    """How `caller`'s source unpacks the results of its calls to a function named `callee` (none: it does
    not); None when its source cannot be read."""
    function = _definition(caller)
    if function is None:
        return None
    found = []
    for node in ast.walk(function):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and _dotted_tail(node.value.func) == callee):
            continue
        for target in node.targets:
            if isinstance(target, (ast.Tuple, ast.List)):
                starred = any(isinstance(e, ast.Starred) for e in target.elts)
                found.append(Unpack(len(target.elts) - starred, starred))
    return found


def installed_as(module: str) -> str:
    """The distribution and version that installed `module`
    ("flash-attn-4 4.0.0b36"), else "the installed TOP"."""
    import importlib.metadata

    top = module.partition(".")[0]
    names = list(dict.fromkeys(importlib.metadata.packages_distributions().get(top, [])))
    if len(names) > 1:  # a shared namespace (flash_attn): the one whose file it is
        names = [name for name in names if module_owner(module, name) is None] or names
    versions = [f"{name} {installed_version(name)}" for name in names if installed_version(name)]
    return " / ".join(versions) or f"the installed {top}"


def _counts_text(counts: frozenset[int]) -> str:
    return " or ".join(str(n) for n in sorted(counts))


def check_returns(call: UnpackedCall, obj: Any) -> tuple[str, str]:
    """(state, detail) of unpacking what the installed `obj` returns as `call` declares: `ok`, `mismatch`, or
    `unchecked` where a return or the caller could not be read; `n/a` where the caller is not installed."""
    read: list[Unpack] | None = None
    if call.caller is not None:
        try:
            caller = call.caller.resolve()
        except Exception as exc:  # no such caller here: nothing makes this call
            return "n/a", (f"{call.caller.target} is absent ({type(exc).__name__}): "
                           "nothing here makes this call")
        read = unpacks_of(caller, call.name)
        if read == []:
            return "ok", f"{call.caller.target} does not unpack what {call.name} returns"
    unpacks = read or [Unpack(call.unpacks)]
    returns = returns_of(obj)
    if returns is None:
        return "unchecked", f"what {call.target} returns is unread (no return statement or annotation says)"
    bad = next((u for u in unpacks if not u.fits(returns.counts)), None)
    if bad is None:
        return "ok", f"returns {_counts_text(returns.counts)}, unpacked into {unpacks[0]}"
    detail = (f"{_unpacker(call, read)} unpacks {bad} from {call.target}, which returns "
              f"{_counts_text(returns.counts)} in {installed_as(call.module)} ({returns.shown})")
    return ("mismatch" if returns.whole else "unchecked"), detail


def _unpacker(call: UnpackedCall, read: list[Unpack] | None) -> str:
    """Who unpacks `call`'s result, in words: attnbench, or the caller with its library's version."""
    if call.caller is None:
        return "attnbench"
    unread = " (its source unread: as its recorded version does)" if read is None else ""
    return f"{installed_as(call.caller.module)}'s {call.caller.target}{unread}"


def check_call(call: LibraryCall, resolve: Callable[[LibraryCall], Any] | None = None) -> CallVerdict:
    """`call` against the installed library; never raises. `resolve` replaces the import (tests)."""
    base = dict(function=call.target, call=call.spelled())
    try:
        obj = (resolve or LibraryCall.resolve)(call)
    except ImportError as exc:
        return CallVerdict(**base, state="n/a", detail=f"cannot import {call.module}: {first_line(exc)}")
    except AttributeError:
        if call.optional:
            return CallVerdict(**base, state="n/a",
                               detail=f"{call.target} is absent (the adapter does without it)")
        return CallVerdict(**base, state="mismatch", parameter=call.name,
                           detail=f"the installed {call.module} has no {call.qualname}")
    except Exception as exc:  # not installed usably
        return CallVerdict(**base, state="n/a",
                           detail=f"{call.module} does not import ({type(exc).__name__}: {first_line(exc)})")
    try:
        signatures, source = installed_signatures(obj)
        # One fitting overload is enough; else the first one's problems.
        judged = [(sig, *check_signature(call, sig)) for sig in signatures]
        sig, problems, notes = next((j for j in judged if not j[1]), judged[0])
    except Exception as exc:  # nothing to read, or a signature we cannot judge
        return CallVerdict(**base, state="unchecked", detail=f"{call.target}: {first_line(exc)}")
    shown = f"{call.name}({parameter_list(sig)})"
    if problems:
        first = problems[0]
        return CallVerdict(**base, state="mismatch", detail="; ".join(p.text for p in problems),
                           parameter=first.parameter, signature=shown, signature_source=source,
                           notes=tuple(notes))
    if isinstance(call, UnpackedCall):
        state, detail = check_returns(call, obj)
        if state == "mismatch":
            return CallVerdict(**base, state="mismatch", detail=detail, parameter="return", signature=shown,
                               signature_source=source, notes=tuple(notes),
                               caller=call.caller.target if call.caller else None)
        notes.append(f"what it returns: {state}: {detail}")
    return CallVerdict(**base, state="ok", detail=f"{call.spelled()} matches", signature=shown,
                       signature_source=source, notes=tuple(notes))


def check_backend(backend: Backend) -> Conformance:
    """Every call `backend` declares, against what is installed; never raises."""
    try:
        calls = backend.library_calls()
    except Exception as exc:  # a plugin's failing declaration is not worth a crashed run
        return Conformance("unchecked", f"unchecked: {backend.name}.library_calls() raised {first_line(exc)}")
    if not calls:
        return Conformance("n/a", "n/a: no library call to check (plain PyTorch ops)")
    verdicts = tuple(check_call(call) for call in calls)
    bad = [v for v in verdicts if v.state == "mismatch"]
    if bad:
        return Conformance("mismatch", f"MISMATCH: {bad[0].detail}", verdicts)
    checked = [v for v in verdicts if v.state == "ok"]
    missing = [v for v in verdicts if v.state == "n/a" and not _optional(calls, v)]
    unchecked = [v for v in verdicts if v.state == "unchecked"]
    if missing and not checked:  # the import failure is in the verdict
        if missing[0].detail.startswith("cannot import"):
            return Conformance("n/a", f"n/a: {backend.library} not installed", verdicts)
        return Conformance("n/a", f"n/a: {missing[0].detail}", verdicts)
    if unchecked and not checked:
        return Conformance("unchecked", f"unchecked: {unchecked[0].detail}", verdicts)
    sources = sorted({v.signature_source for v in checked if v.signature_source != "inspect.signature"})
    text = ", ".join(v.call for v in checked)
    tail = "".join(f"; {v.state}: {v.detail}" for v in verdicts if v.state in ("unchecked", "n/a")
                   and not _optional(calls, v))
    via = f" (signature from the {', '.join(s for s in sources if s)})" if sources else ""
    state = "ok" if not tail else "unchecked"
    return Conformance(state, f"{state}: {text} {'match' if len(checked) > 1 else 'matches'}{via}{tail}",
                       verdicts)


def _optional(calls: tuple[LibraryCall, ...], verdict: CallVerdict) -> bool:
    return any(c.target == verdict.function and c.optional for c in calls)


def conformance_problem(backend: Backend) -> str | None:
    """The skip reason when `backend`'s calls do not fit the installed library (naming the parameter);
    else None."""
    conformance = check_backend(backend)
    problem = conformance.problem
    if problem is None:
        return None
    if problem.caller is not None:  # two libraries disagree; attnbench's own call is not the one at fault
        return f"the installed libraries do not fit each other: {problem.detail}; install versions that agree"
    version = backend.version()
    installed = f"{backend.library} {version}" if version else backend.library
    return (f"adapter does not match the installed {installed}: {problem.detail} "
            f"(attnbench calls {problem.call}); update attnbench's {backend.name} adapter "
            "or install a version it knows")
