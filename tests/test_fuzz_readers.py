"""Every reader fuzzed (hypothesis): suite YAML of any structure and any scalar through `validate` and
`run --dry-run`; results.jsonl with lines cut, duplicated, reordered, not UTF-8 or of the wrong schema through
`report`, `merge`, `compare`, `recommend`, `history add` and `--resume`'s reading; env.json missing or damaged.
Every outcome is a clean exit (0, 1 or 2), a refusal is one line, nothing raises, and every line left whole is kept.

In `make test` each test runs a fixed number of examples (FUZZ_EXAMPLES, 20 by default, no deadline, the same
examples every time): the 80 took 30 s (14 s of CPU) on a busy two-core machine. The report's charts are left out
unless FUZZ_CHARTS=1 (matplotlib, about 2 s of CPU a report; tests/test_charts.py draws them). `make fuzz` runs the
same tests with new random examples, FUZZ_EXAMPLES=1000 each.
Commands run in-process (typer's CliRunner), so an exception is seen as itself, not as a child's stderr.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.records.resume import done_keys, drop_cut_line
from attnbench.sweep.schema import Block, Timing

DATA = Path(__file__).parent / "data"
RUN = DATA / "cpu-like"
LINES = (RUN / "results.jsonl").read_bytes().splitlines(keepends=True)
RECORD = json.loads(LINES[0])
LONG = "FUZZ_EXAMPLES" in os.environ
CHARTS = os.environ.get("FUZZ_CHARTS") == "1"
MAX_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "20"))
FUZZ = settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=not LONG,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])

scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True) | st.text(max_size=12)
           | st.sampled_from(["cpu", "cuda", "naive", "sdpa-math", "float32", "fwd", "bwd", "random", "amax", "-1"]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.text(max_size=8) | st.sampled_from(list(Block.model_fields)), inner, max_size=4), max_leaves=12)
small_ints = st.lists(st.integers(-4, 300), min_size=1, max_size=3)


def mix_like() -> st.SearchStrategy[Any]:
    """A `mix:` block with its own keys holding any value: sources of each kind, sized small or not at all."""
    source = st.fixed_dictionaries({}, optional={
        "generate": st.sampled_from(["longtail", "bimodal", "zipf"]) | values, "batch": st.integers(-1, 40) | values,
        "seq_len": st.integers(-1, 300) | values, "decode_fraction": st.floats(-1, 2) | values,
        "zero_fraction": st.floats(-1, 2) | values, "seeds": st.integers(0, 3) | values, "weight": values,
        "vllm": st.sampled_from(["q2k", "2q64_8q1s128", "q1s0", "3q", ""]) | values, "flashinfer": values})
    return st.fixed_dictionaries({"heads": st.just(2) | values, "kv_heads": st.just(1) | values,
                                  "head_dim": st.just(8) | values, "sources": st.lists(source, max_size=3) | values},
                                 optional={"dtype": values, "causal": values, "page_size": values, "cpu": values})


def suite_like() -> st.SearchStrategy[Any]:
    """A mapping with the suite's own keys (and the sweep's, the timing's) holding any value, or anything at all."""
    sweep = st.fixed_dictionaries({"seq_len": small_ints, "heads": st.just([2]), "head_dim": st.just([8])},
                                  optional={k: values | small_ints for k in Block.model_fields
                                            if k not in ("seq_len", "heads", "head_dim")})
    timing = st.fixed_dictionaries({}, optional={k: values for k in Timing.model_fields})
    top = st.fixed_dictionaries({"name": st.just("f") | values, "sweep": sweep | values},
                                optional={"device": st.just("cpu") | values, "backends": st.just(["naive"]) | values,
                                          "timing": timing | values, "also": st.lists(sweep, max_size=2) | values,
                                          "cpu": st.dictionaries(st.sampled_from(list(Block.model_fields)), values),
                                          "deterministic": values, "mix": mix_like() | values})
    return top | values


@pytest.fixture(autouse=True)
def charts_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    if not CHARTS:
        monkeypatch.setattr("attnbench.report.render.build_charts", lambda *args, **kwargs: ([], []))


def invoke(args: list[Any]) -> Any:
    """A command in-process: its exit is clean (0, 1 or 2), nothing raised, a refusal one line."""
    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code in (0, 1, 2), result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    if result.exit_code == 2:
        assert len(errors) == 1 and result.stderr.strip().endswith(errors[0]), result.stderr
    return result


@pytest.mark.slow
@FUZZ
@given(suite=suite_like(), raw=st.none() | st.binary(max_size=60))
@example(suite={"name": "f", "sweep": None, "cpu": {"batch": None}}, raw=None)  # found by make fuzz: a TypeError
@example(suite={"\n": None}, raw=None)  # found by make fuzz: a key with a newline made the refusal two lines
@example(suite={"\x1e": None}, raw=None)  # and one with a record separator (a line break to str.splitlines)
def test_any_suite_yaml(tmp_path_factory: pytest.TempPathFactory, suite: Any, raw: bytes | None) -> None:
    path = tmp_path_factory.mktemp("suite") / "s.yaml"
    path.write_bytes(raw if raw is not None else yaml.safe_dump(suite).encode())
    invoke(["validate", path, "--device", "cpu"])
    invoke(["run", path, "--dry-run", "--device", "cpu", "--out", path.parent / "out"])
    assert not (path.parent / "out").exists(), "a dry run writes nothing"


def damage(lines: list[bytes], edits: list[tuple[str, int, Any]]) -> tuple[list[bytes], set[int]]:
    """The lines with each edit applied; and which of them (by position) are original lines left whole."""
    lines, whole = list(lines), list(range(len(lines)))
    for kind, at, value in edits:
        i = at % len(lines) if lines else 0
        if kind == "cut" and lines:
            end = b"" if i == len(lines) - 1 else b"\n"  # cut inside the line; only the last loses its newline
            lines[i], whole[i] = lines[i][: value % max(len(lines[i]) - 1, 1)] + end, -1
        elif kind == "duplicate" and lines:
            lines.insert(i, lines[i])
            whole.insert(i, whole[i])
        elif kind == "swap" and lines:
            j = value % len(lines)
            lines[i], lines[j], whole[i], whole[j] = lines[j], lines[i], whole[j], whole[i]
        elif kind == "bytes":
            lines.insert(i, bytes(value) + b"\n")
            whole.insert(i, -1)
        elif kind == "field" and lines:
            record = json.loads(lines[i]) if whole[i] >= 0 else dict(RECORD)
            name, new = value
            if new is DELETE:
                record.pop(name, None)
            else:
                record[name] = new
            lines[i], whole[i] = json.dumps(record, allow_nan=True).encode() + b"\n", -1
    for i, line in enumerate(lines):  # only the last line may lack its newline (a record cut by a kill)
        if not line.endswith(b"\n") and (i < len(lines) - 1 or whole[i] >= 0):
            lines[i] += b"\n"
    return lines, {w for w in whole if w >= 0}


DELETE = object()
field_edit = st.tuples(st.sampled_from(sorted(RECORD) + ["extra", "reason", "noisy"]), values | st.just(DELETE))
edits = st.lists(st.one_of(
    st.tuples(st.just("cut"), st.integers(0, 99), st.integers(0, 2000)),
    st.tuples(st.just("duplicate"), st.integers(0, 99), st.none()),
    st.tuples(st.just("swap"), st.integers(0, 99), st.integers(0, 99)),
    st.tuples(st.just("bytes"), st.integers(0, 99), st.binary(max_size=20) | st.just(b"\xff\xfe{\"a\": 1}")),
    st.tuples(st.just("field"), st.integers(0, 99), field_edit)), min_size=1, max_size=6)


def damaged_run(tmp: Path, edit_list: list[tuple[str, int, Any]], lines: list[bytes] = LINES) -> tuple[Path, set]:
    run = tmp / "run"
    shutil.copytree(RUN, run)
    new, whole = damage(lines, edit_list)
    (run / "results.jsonl").write_bytes(b"".join(new))
    return run, whole


def kept_whole_lines(run: Path, whole: set[int]) -> None:
    """Every original line left whole is among the records read back."""
    from attnbench.records.results import Record, load_records

    def same(record: Record) -> str:  # the schema version aside: the loader relabels a file's (docs/results.md)
        return json.dumps({k: v for k, v in record.to_dict().items() if k != "schema_version"}, sort_keys=True)

    records = {same(r) for r in load_records(run)}
    for i in whole:
        assert same(Record.from_dict(json.loads(LINES[i]))) in records


@pytest.mark.slow
@FUZZ
@given(edit_list=edits)
def test_damaged_results_through_every_reader(tmp_path_factory: pytest.TempPathFactory,
                                              edit_list: list[tuple[str, int, Any]]) -> None:
    tmp = tmp_path_factory.mktemp("results")
    run, whole = damaged_run(tmp, edit_list)
    report = invoke(["report", run, "--out", tmp / "report", "--format", "html,md"])
    if report.exit_code == 0 and whole:
        kept_whole_lines(run, whole)
    invoke(["merge", run, "--out", tmp / "merged"])
    invoke(["compare", RUN, run])
    invoke(["compare", run, RUN])
    invoke(["recommend", run])
    invoke(["history", "add", run, "--db", tmp / "h.sqlite"])
    if whole:
        assert report.exit_code == 0, report.output


@FUZZ
@given(edit_list=edits)
def test_damaged_results_through_resume(tmp_path_factory: pytest.TempPathFactory,
                                        edit_list: list[tuple[str, int, Any]]) -> None:
    """What --resume reads of a run: the cut last line dropped, then the keys it holds (the rest of a resume is the
    run itself, tests/test_resume.py and tests/test_bad_lines.py)."""
    from attnbench.core.errors import AttnbenchError
    from attnbench.records.results import key_of

    run, whole = damaged_run(tmp_path_factory.mktemp("resume"), edit_list)
    drop_cut_line(run / "results.jsonl")
    try:
        keys = done_keys(run)
    except AttnbenchError:
        assert not whole, "refused although whole records were there"
        return
    assert {key_of(json.loads(LINES[i])) for i in whole} <= keys


env_damage = st.one_of(
    st.just(None),  # missing
    st.binary(max_size=40),
    values.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(st.sampled_from(["run_id", "timestamp", "device", "device_name", "libraries", "gpu_state",
                                     "suite_name", "git_commit", "torch", "cuda", "merged_from", "shard"]),
                    values, min_size=1).map(lambda d: json.dumps({**json.loads((RUN / "env.json").read_text()), **d})
                                            .encode()),
)


@pytest.mark.slow
@FUZZ
@given(env=env_damage)
def test_damaged_env_json(tmp_path_factory: pytest.TempPathFactory, env: bytes | None) -> None:
    tmp = tmp_path_factory.mktemp("env")
    run = tmp / "run"
    shutil.copytree(RUN, run)
    if env is None:
        (run / "env.json").unlink()
    else:
        (run / "env.json").write_bytes(env)
    invoke(["report", run, "--out", tmp / "report", "--format", "html,md"])
    invoke(["merge", run, "--out", tmp / "merged"])
    invoke(["compare", RUN, run])
    invoke(["recommend", run])
    invoke(["history", "add", run, "--db", tmp / "h.sqlite"])


@pytest.mark.parametrize("axis", ["batch", "heads", "head_dim"])
def test_a_cpu_block_may_leave_a_size_unset(tmp_path: Path, axis: str) -> None:
    """`cpu: {batch: null}` keeps the sweep's batch (make fuzz found it a TypeError in the schema's bounds check)."""
    path = tmp_path / "s.yaml"
    path.write_text(f"name: f\nsweep: {{seq_len: [8], heads: [2], head_dim: [8]}}\ncpu: {{{axis}: null}}\n")
    result = invoke(["validate", path, "--device", "cpu"])
    assert result.exit_code == 0 and result.stdout.strip() == f"{path}: valid; 1 cases on cpu"
