"""Issue 55's seams held: outside records/ no env.json key is read by string and at most MAX_EXTRA_READS keys of a
record's `extra` (its typed parts are records/parts.py's), history/ imports nothing from report/, and one class holds
a run's records with its environment (records.run.Run)."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import pytest

from attnbench.records.env import ENV_TYPES, RunEnv

PACKAGE = Path(__file__).resolve().parents[1] / "attnbench"
MAX_EXTRA_READS = 10  # today 7: gpu/sample.py's GPU state (6, below records/) and a re-pooled record's bimodal
ENV_KEYS = {f.name for f in fields(RunEnv)} - {"raw"} | set(ENV_TYPES)


def sources(*skip: str) -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(encoding="utf-8")) for path in sorted(PACKAGE.rglob("*.py"))
            if path.relative_to(PACKAGE).parts[0] not in skip}


def key_read(node: ast.AST) -> tuple[ast.expr, str] | None:
    """(what is read from, the key) for `x["key"]` and `x.get("key", ...)`."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return node.value, node.slice.value
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and node.args and isinstance(node.args[0], ast.Constant)):
        return node.func.value, node.args[0].value
    return None


def env_key_reads() -> list[str]:
    """Each read of an env.json key from something named *env or *environment, outside records/."""
    found = []
    for path, tree in sources("records").items():
        for node in ast.walk(tree):
            read = key_read(node)
            if read and read[1] in ENV_KEYS and ast.unparse(read[0]).lower().endswith(("env", "environment")):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node)}")
    return found


def extra_key_reads() -> list[str]:
    """Each read of a key of something named *extra outside records/: `extra["k"]`, `.get`, `.pop`, `in`."""
    def is_extra(node: ast.expr) -> bool:
        return ast.unparse(node).endswith(("extra", "extra or {}"))

    found = []
    for path, tree in sources("records").items():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and is_extra(node.value)
                    or isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("get", "pop", "setdefault") and is_extra(node.func.value)
                    or isinstance(node, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn)) for o in node.ops)
                    and any(is_extra(c) for c in node.comparators)):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_at_most_ten_extra_keys_are_read_outside_records() -> None:
    found = extra_key_reads()
    assert len(found) <= MAX_EXTRA_READS, "\n".join(found)


def test_no_env_json_key_is_read_by_string_outside_records() -> None:
    assert env_key_reads() == []


def test_history_imports_nothing_from_report() -> None:
    imported = [f"{path.name}: {node.module}" for path, tree in sources().items() if path.parent.name == "history"
                for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and (node.module or "").startswith("attnbench.report")]
    imported += [f"{path.name}: {alias.name}" for path, tree in sources().items() if path.parent.name == "history"
                 for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
                 if alias.name.startswith("attnbench.report")]
    assert imported == []


def test_one_class_holds_a_run_records_and_environment() -> None:
    """A class with `records` beside an env.json (`env` not a process's variables) is a run; records/run.py's is
    the one."""
    holders = []
    for path, tree in sources().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                names = {t.target.id: ast.unparse(t.annotation) for t in node.body if isinstance(t, ast.AnnAssign)
                         and isinstance(t.target, ast.Name)}
                if "records" in names and names.get("env", "dict[str, str]") != "dict[str, str]" or node.name == "Run":
                    holders.append(f"{path.relative_to(PACKAGE)}:{node.name}")
    assert holders == ["records/run.py:Run"]


def test_determinism_is_read_as_its_answer_with_the_sentence_as_reason() -> None:
    from attnbench.records.parts import Determinism, DeterminismAnswer

    honoured = DeterminismAnswer.of("honoured (torch.use_deterministic_algorithms)")
    assert honoured is not None and honoured.kind == Determinism.HONOURED
    assert honoured.reason == "honoured (torch.use_deterministic_algorithms)"
    assert DeterminismAnswer.of("refused: no deterministic backward").kind == Determinism.REFUSED
    assert DeterminismAnswer.of("not applicable (forward only)").kind == Determinism.NOT_APPLICABLE
    assert DeterminismAnswer.of(None) is None


def test_the_kernel_label_is_made_and_parsed_in_one_module_only() -> None:
    """The route marker appears in no string but core/kernel_id.py's; its label round-trips every shape."""
    from attnbench.core.kernel_id import ROUTED, KernelId

    marked = [f"{path.relative_to(PACKAGE)}:{node.lineno}" for path, tree in sources().items()
              if path.name != "kernel_id.py" for node in ast.walk(tree)
              if isinstance(node, ast.Constant) and isinstance(node.value, str) and ROUTED in node.value]
    assert marked == []
    for label in ("torch 2.13.0+cpu sdpa auto→FLASH_ATTENTION (is_causal, enable_gqa)",
                  "torch 2.11.0 sdpa FLASH_ATTENTION via FA2 (built into PyTorch) (is_causal)",
                  "flashinfer 0.7.2.post1 single_prefill_with_kv_cache(causal=True, window_left=-1)"):
        assert KernelId.parse(label).label == label
    routed = KernelId.parse("torch 2.11.0 sdpa auto→CUDNN_ATTENTION (explicit mask)")
    assert (routed.ran, routed.choice, routed.how) == ("torch 2.11.0 sdpa CUDNN_ATTENTION", "CUDNN_ATTENTION",
                                                       "(explicit mask)")


def test_the_timer_is_read_through_its_declared_attributes_never_probed() -> None:
    from attnbench.timing import timers

    probes = [f"{path.relative_to(PACKAGE)}:{node.lineno}" for path, tree in sources().items()
              for node in ast.walk(tree) if isinstance(node, ast.Call) and ast.unparse(node.func) in ("getattr",
              "hasattr") and node.args and "timer" in ast.unparse(node.args[0])]
    assert probes == []
    made = [timers.ClockTimer, timers.CudaEventTimer, timers.HostTimer, timers.CudaGraphTimer]
    assert all(issubclass(kind, timers.Timer) for kind in made) and timers.ClockTimer().modes is None


def test_samples_are_a_frozen_value_of_a_tuple_of_times() -> None:
    import dataclasses

    from attnbench.timing.sampling import Samples

    made = Samples((2.0, 1.0), "precision", warmup_calls=0)
    assert not issubclass(Samples, list) and made.times == (2.0, 1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.stop = "budget"  # type: ignore[misc]
