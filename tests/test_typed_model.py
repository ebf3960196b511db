"""Issue 55's seams held: outside records/ no env.json key is read by string and at most MAX_EXTRA_READS keys of a
record's `extra` (its typed parts are records/parts.py's), history/ imports nothing from report/, and one class holds
a run's records with its environment (records.run.Run); compare and recommend decide in stats/ as enums."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import pytest

from attnbench.records.env import ENV_TYPES, RunEnv
from attnbench.records.record import Record

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


def shape_key_reads() -> list[str]:
    """Each read of a record field's name as a key of a case shape, a dispatch bucket or a sweep combination (named
    *shape, *bucket, *combo, or `s`) outside records/."""
    names = {f.name for f in fields(Record)}
    found = []
    for path, tree in sources("records").items():
        for node in ast.walk(tree):
            read = key_read(node)
            held = ast.unparse(read[0]).lower() if read else ""
            if read and read[1] in names and (held == "s" or held.endswith(("shape", "bucket", "combo"))):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_shapes_buckets_and_combinations_are_read_by_attribute() -> None:
    """109 such reads on 514d7d4; CaseShape, Bucket and Combo hold them as fields now."""
    assert shape_key_reads() == []


def env_parsers() -> list[str]:
    """Each `read_json_object(...)` or `json.loads(...)` of an env.json (its text names ENV_FILE or env_file)."""
    found = []
    for path, tree in sources().items():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and ast.unparse(node.func) in ("read_json_object", "json.loads")
                    and any(word in ast.unparse(node) for word in ("ENV_FILE", "env_file"))):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node.func)}")
    return found


def test_env_json_is_parsed_by_records_env_alone() -> None:
    """On 514d7d4 the run folder and resume parsed it too (2), as dicts."""
    assert [line.split(":")[0] for line in env_parsers()] == ["records/env.py"]


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


def test_compare_decides_in_stats_as_a_verdict_and_report_only_formats() -> None:
    """No report/ module applies the change rule (report/compare.py did); compare's decision is a Verdict."""
    from attnbench.stats.compare import Verdict

    deciding = [f"{path.name}: {node.module}" for path, tree in sources().items() if path.parent.name == "report"
                for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module == "attnbench.stats.change_rule"]
    assert deciding == []
    assert {v.name: v.exit_code for v in Verdict} == {"PASSED": 0, "REGRESSED": 1, "BROKE": 1, "NOT_JUDGED": 3}


def test_recommend_builds_each_decision_once_frozen_with_its_call() -> None:
    """Decision was a mutable object filled by six functions, its kind a string, its contests split back apart."""
    from attnbench.stats.recommend import Call, Decision

    assert Decision.__dataclass_params__.frozen and Decision.__annotations__["decision"] == "Call"
    assert [c.value for c in Call] == ["winner", "tie", "unsettled", "none"]
    splits = [f"{path.relative_to(PACKAGE)}:{node.lineno}" for path, tree in sources().items()
              for node in ast.walk(tree)
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "split"
              and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == " on "]
    assert splits == []


def test_an_ab_verdict_is_an_enum_member_not_a_string() -> None:
    import math

    from attnbench.stats.ab import AbVerdict, Paired

    assert Paired.of([math.log(1.15)] * 6).verdict(0.05) is AbVerdict.SLOWER
    assert Paired.of([math.log(1.15)] * 5 + [-0.01]).verdict(0.05) is AbVerdict.UNCHANGED


def test_a_record_is_read_by_its_attributes_alone() -> None:
    """On 514d7d4 its dict-style view (get, [], in) was read on 53 test lines and by key_of on 8 test sites."""
    assert [name for name in ("get", "__getitem__", "__contains__") if hasattr(Record, name)] == []


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


FACT_METHODS = {"deterministic": 1, "unsupported": 9}  # 18 and 18 before backends declared a BackendSpec
SPEC_FACTS = {"name", "summary", "library", "install_hint", "capabilities", "cost"}


def backend_classes() -> dict[str, ast.ClassDef]:
    """The classes of attnbench/backends/ but base.py's and testing.py's."""
    return {f"{path.name}:{node.name}": node for path, tree in sources().items()
            if path.parent.name == "backends" and path.name not in ("base.py", "testing.py")
            for node in tree.body if isinstance(node, ast.ClassDef)}


def test_the_fact_methods_are_overridden_only_where_the_answer_needs_code() -> None:
    """A determinism answer or a field limit is data in the spec: FlashAttention 3's head_dim refusal and the
    refusals that read a library, a route or several fields are the overrides left."""
    counts = dict.fromkeys(FACT_METHODS, 0)
    for node in backend_classes().values():
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name in counts:
                counts[item.name] += 1
    assert counts == FACT_METHODS


def test_a_built_in_backend_declares_its_facts_in_its_spec_alone() -> None:
    assigned = [f"{where}.{target.id}" for where, node in backend_classes().items() for item in node.body
                if isinstance(item, ast.Assign) for target in item.targets
                if isinstance(target, ast.Name) and target.id in SPEC_FACTS | {"cuda_determinism", "module"}]
    assert assigned == []


def test_a_backends_facts_are_read_from_its_spec() -> None:
    from dataclasses import replace

    from attnbench.backends.base import Backend
    from attnbench.backends.naive import NaiveBackend
    from attnbench.backends.registry import default_registry
    from attnbench.backends.spec import REFUSED, Limit, always
    from tests.helpers import make_case

    for name in default_registry().names():
        backend = default_registry().get(name)
        assert {fact: getattr(backend, fact) for fact in SPEC_FACTS} == {
            fact: getattr(backend.spec, fact) for fact in SPEC_FACTS}, name

    class Renamed(NaiveBackend):
        spec = replace(NaiveBackend.spec, name="renamed", library="elsewhere",
                       limits=(Limit(field="dtype", allowed=("float16",), reason="{dtype}: float16 only"),),
                       determinism=always(REFUSED, "no switch"))

    backend = Renamed()
    assert (Renamed.name, backend.name, backend.library) == ("renamed", "renamed", "elsewhere")
    assert backend.unsupported(make_case(dtype="float32")) == "float32: float16 only"
    assert backend.unsupported(make_case(dtype="float16")) is None
    assert backend.deterministic(make_case()) == "refused: no switch"

    class Plugin(Backend):  # docs/backends.md#plugins: facts as class variables, folded into the spec
        name = "plugin"
        summary = "a plugin"

    assert (Plugin.spec.name, Plugin.spec.summary, Plugin().name, Plugin.library) == (
        "plugin", "a plugin", "plugin", "torch")
    with pytest.raises(TypeError, match="beside spec"):
        class Both(Backend):
            spec = Plugin.spec
            name = "both"


@pytest.mark.parametrize(("backend", "fields", "sentence"), [
    ("flash-attn-3", dict(device="cuda", dtype="bfloat16", mode="fwd_bwd", head_dim=256),
     "refused: FlashAttention 3's deterministic backward does not support head_dim 256"),
    ("flash-attn", dict(device="cuda", dtype="bfloat16", mode="fwd_bwd"),
     "honoured (deterministic=True to flash-attn's backward)"),
    ("sdpa-flash", dict(), "not applicable (PyTorch's FLASH_ATTENTION kernel on a CPU: no atomics)"),
    ("sdpa-cudnn", dict(device="cuda"), "refused: PyTorch does not run cuDNN SDPA under "
     "torch.use_deterministic_algorithms(True), forward included (\"cuDNN SDPA is not deterministic\")"),
    ("onnxruntime", dict(device="cuda"), "not applicable (ONNX Runtime's backend here runs on the CPU only)"),
    ("flex", dict(device="cuda", mode="fwd_bwd"), "not applicable (no atomics: its Triton backward computes each dQ "
     "and each dK/dV block in one program)"),
])
def test_a_declared_determinism_answer_keeps_its_stored_sentence(backend: str, fields: dict, sentence: str) -> None:
    from attnbench.backends.registry import default_registry
    from tests.helpers import make_case

    assert default_registry().get(backend).deterministic(make_case(**fields)) == sentence


def test_a_torch_ops_answer_names_the_cublas_workspace_in_force(monkeypatch: pytest.MonkeyPatch) -> None:
    from attnbench.backends.registry import default_registry
    from tests.helpers import make_case

    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    assert default_registry().get("naive").deterministic(make_case(device="cuda")) == (
        "honoured (matmul, softmax and masking under torch.use_deterministic_algorithms(True), cuBLAS with "
        "CUBLAS_WORKSPACE_CONFIG=:16:8)")


def test_an_ab_is_judged_in_stats_and_put_in_words_in_report() -> None:
    """stats/ab.py built its sentences (Paired.words, the regressions' names); report/ab_text.py does now."""
    from attnbench.stats.ab import AbResult, GroupVerdict, Paired

    tree = sources()[PACKAGE / "stats" / "ab.py"]
    worded = [f"{node.lineno}: {ast.unparse(node)}" for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
              and any(isinstance(v, ast.Constant) and any(c.isalpha() for c in v.value) for v in node.values)]
    assert worded == []
    assert not hasattr(Paired, "words") and "words" not in GroupVerdict.__annotations__
    assert isinstance(AbResult.__dict__["regressed"], property) and not hasattr(AbResult, "regressions")


def test_an_exclusion_is_read_by_its_cause_never_from_its_reason() -> None:
    """report/lead.py and dispatch_table.py split the reason (`why.split(":")[0]`, `startswith("skipped")`)."""
    from attnbench.records.record import Status
    from attnbench.stats.pooling import Trouble
    from attnbench.stats.recommend import Exclusion, Unranked

    parsed = [f"{path.name}:{node.lineno}" for path, tree in sources().items() if path.parent.name == "report"
              for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("split", "startswith") and "why" in ast.unparse(node.func.value)]
    assert parsed == []
    assert Exclusion.__annotations__["cause"] == "Status | Trouble | Unranked"
    assert not set(Status) & set(Trouble) and not set(Trouble) & set(Unranked)


def test_report_loads_no_history_store_and_no_run() -> None:
    """report/history_compare.py opened the Store and loaded the run to compare; history/compare.py does now."""
    loading = [f"{path.name}: {alias.name}" for path, tree in sources().items() if path.parent.name == "report"
               for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and node.module in ("attnbench.history.store", "attnbench.records.run")
               for alias in node.names if alias.name in ("Store", "load_run", "load_runs")]
    assert loading == []


def device_fallbacks() -> list[str]:
    """Each `x or "cpu"`, `.get(d, X["cuda"])` and default "cpu"/"cuda" outside core/policy.py."""
    def named(node: ast.AST | None) -> bool:
        return isinstance(node, ast.Constant) and node.value in ("cpu", "cuda")

    found = []
    for path, tree in sources().items():
        for node in ast.walk(tree):
            if (isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and named(node.values[-1])
                    or isinstance(node, ast.arguments) and any(map(named, node.defaults + node.kw_defaults))
                    or isinstance(node, ast.AnnAssign) and named(node.value)
                    or isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and len(node.args) == 2 and any(map(named, ast.walk(node.args[1])))):
                found.append(str(path.relative_to(PACKAGE)))
    return found


def test_one_device_fallback_the_policy_s() -> None:
    """compare fell back to cpu, the policy and profile.py to cuda, timing_fields to cpu: the policy's is the one."""
    from attnbench.core import policy

    tensors = ["timing/timers.py", "verify/integrity.py"]  # a tensor's device, not whose figures apply
    assert device_fallbacks() == tensors
    assert policy.device("xpu") == policy.DEVICES[policy.FALLBACK_DEVICE]


def test_a_fraction_that_decides_a_verdict_is_declared_in_the_policy() -> None:
    """verify/check.py held the correctness rule's floors; its factor and floors are policy.ERROR_*."""
    allowed = {1.4826, 1e-12, 1e-3, 1e3}  # MAD's normal factor, a division's guard, a chart band's floor, ms per s
    decides = [PACKAGE / "stats", PACKAGE / "verify" / "check.py", PACKAGE / "timing" / "profile.py",
               PACKAGE / "run" / "skip.py"]
    bare = [f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value}" for path, tree in sources().items()
            if any(path == d or d in path.parents for d in decides) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and type(node.value) is float and node.value not in {0.0, 1.0, *allowed}]
    assert bare == []
    assert ast.unparse(sources()[PACKAGE / "verify" / "check.py"]).count("policy.ERROR_FACTOR * ") == 1


def test_each_stage_returns_a_frozen_value_without_an_untyped_extra() -> None:
    """On 4499ad1 the prepared, sustained, repeated and statistics stages each returned an `extra` dict and the
    profiled call its fields as a dict, merged later by hand."""
    import dataclasses
    import inspect

    from attnbench.run import measure, profiled, record_parts, stages

    values = {name: kind for name, kind in vars(stages).items()
              if dataclasses.is_dataclass(kind) and kind.__module__ == stages.__name__}
    made = [inspect.signature(getattr(stages, name)).return_annotation.removesuffix(" | None")
            for name in ("prepare", "check", "calls", "sustained", "timed", "memory", "repeated", "kernels")]
    made.append(inspect.signature(measure.numbers).return_annotation.removeprefix("stage."))
    assert set(made) <= set(values)
    assert all(kind.__dataclass_params__.frozen and "extra" not in {f.name for f in dataclasses.fields(kind)}
               for kind in values.values())
    assert {f.name: f.type for f in dataclasses.fields(profiled.Profiled)}["fields"] == "KernelFields"
    held = [f.type.removeprefix("stage.").removesuffix(" | None") for f in dataclasses.fields(record_parts.Progress)]
    assert set(held) <= set(values)


def test_a_record_stores_its_extra_entries_in_the_stages_order() -> None:
    """results.jsonl's layout: the backend's and setup's entries, then each stage's, then the measurement's own."""
    from attnbench.backends.registry import default_registry
    from tests.helpers import make_case, measure_one

    record = measure_one(make_case(seq_len=32), default_registry().get("naive"))
    assert list(record.extra) == [
        "setup_ms", "setup_parts", "repeat_calls", "repeat_tensors", "integrity", "warmup_ms", "warmup_calls",
        "warmup_steady", "check_ms", "check_sampled", "check_call_ms", "errors", "kernel_error",
        "naive_relative_error", "dtype_limited", "reference_scale", "peak_bound", "peak_source", "reference_s",
        "phases_ms"]
    assert list(record.extra["setup_parts"]) == ["other", "profile"]


def test_the_pool_seconds_go_on_a_new_record_for_the_first_measurement_of_its_graph() -> None:
    """The sink finds the graph from the measured case, and leaves the measured record as it was made."""
    from attnbench.core.case import Case
    from attnbench.run.recording import RunInfo, make_record
    from attnbench.run.session import Compiles
    from tests.helpers import make_case

    class Compiling:
        name = "compiling"

        def compile_key(self, case: Case) -> str:
            return f"graph {case.seq_len}"

    case = make_case(seq_len=16)
    made = make_record(RunInfo("r", "t"), case, "compiling", "ok", None, {"extra": {"compile_s": 0.5}})
    compiles = Compiles({"graph 16": 1.23456}, {"compiling": Compiling()})  # type: ignore[dict-item]
    first, again = compiles.noted(case, made), compiles.noted(case, made)
    assert first.extra == {"compile_s": 0.5, "precompile_s": 1.235} and made.extra == again.extra == {"compile_s": 0.5}
    assert compiles.compiled == ["graph 16", "graph 16"]


def test_no_record_extra_is_written_into_after_the_record_is_made() -> None:
    """On 4499ad1 the worker set extra.gpu and extra.gpu_name, the run's sink extra.precompile_s, on a frozen
    record."""
    written = [f"{path.relative_to(PACKAGE)}:{node.lineno}" for path, tree in sources().items()
               for node in ast.walk(tree) if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))
               for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
               if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute)
               and target.value.attr == "extra"]
    assert written == []


def test_no_case_is_rebuilt_from_a_record_outside_records() -> None:
    """On 4499ad1 the session, the later rounds and the A/B made a measurement's Case again from its record (6)."""
    rebuilt = [f"{path.relative_to(PACKAGE)}:{node.lineno}" for path, tree in sources("records").items()
               for node in ast.walk(tree)
               if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] == "case_of"]
    assert rebuilt == []


PARTS = ("Timing", "GpuReading", "Memory", "Correctness", "Kernels", "SetupParts", "Integrity", "Implausibility")


def bare_record(**fields: object) -> Record:
    """A skipped record of a one-token case: no part of it set."""
    return Record(run_id="r", suite="s", timestamp="t", backend="b", device="cpu", dtype="float32", batch=1,
                  seq_len=1, kv_seq_len=1, heads=1, kv_heads=1, head_dim=1, causal=False, window=None, mode="fwd",
                  status="skipped", reason="not here", **fields)  # type: ignore[arg-type]


def test_the_record_declares_no_field_a_part_declares_and_takes_each_from_its_part() -> None:
    """On 4499ad1 Record listed its ~55 fields itself, the parts none: time_ms, max_abs_error... were untyped."""
    from attnbench.records import parts

    record_py = next(node for node in ast.walk(ast.parse((PACKAGE / "records/record.py").read_text()))
                     if isinstance(node, ast.ClassDef) and node.name == "Record")
    own = {node.target.id for node in record_py.body if isinstance(node, ast.AnnAssign)}
    declared = {f.name for name in PARTS for f in fields(getattr(parts, name))}
    assert own & declared == set()
    flat = {f.name: f for f in fields(Record)}
    for name in ("Timing", "Memory", "Correctness", "Kernels"):
        for spec in fields(getattr(parts, name)):
            assert (flat[spec.name].type, parts.unset(flat[spec.name])) == (spec.type, parts.unset(spec))
    assert flat["throttled"].type == "bool | None" and "sm_clock_mhz" not in flat


@pytest.mark.parametrize("name", PARTS)
def test_each_part_is_none_exactly_where_its_fields_are_all_unset(name: str) -> None:
    from dataclasses import replace

    from attnbench.records import parts

    kind, flat = getattr(parts, name), {f.name for f in fields(Record)}
    assert [other for other in PARTS if bare_record().part(getattr(parts, other)) is not None] == []
    for spec in fields(kind):
        if kind in parts.NESTED:
            record = bare_record(extra={parts.NESTED[kind]: {spec.name: 7}})
        elif spec.name in flat:
            record = replace(bare_record(), **{spec.name: 7})
        else:
            record = bare_record(extra={spec.name: 7})
        held = record.part(kind)
        assert held is not None and getattr(held, spec.name) == 7, spec.name
        assert [other for other in PARTS if other != name and record.part(getattr(parts, other))] == []


def test_the_named_parts_are_the_records_parts() -> None:
    record = bare_record(time_ms=1.5, samples=2, times_ms=[1.0, 2.0], max_abs_error=0.0, peak_memory_bytes=64,
                         kernel="k", throttled=False, extra={"integrity": ["stale output"], "setup_ms": 3.0,
                                                             "implausible": {"compute": 5.2, "was": "mismatch"}})
    assert record.timing is not None and (record.timing.time_ms, record.timing.times_ms) == (1.5, [1.0, 2.0])
    assert record.correctness is not None and record.correctness.max_abs_error == 0.0
    assert record.memory is not None and record.memory.peak_memory_bytes == 64
    assert record.kernels_ran is not None and record.kernels_ran.kernel == "k"
    assert record.gpu_reading is not None and record.gpu_reading.throttled is False
    assert record.integrity is not None and record.integrity.integrity == ["stale output"]
    assert record.implausible is not None and record.implausible.roofs() == {"compute": 5.2}
    assert record.implausible.was == "mismatch"
