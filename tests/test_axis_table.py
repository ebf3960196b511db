"""One table of axis facts (attnbench.core.axes): an axis declared there alone reaches the suite's schema, the case
id, the record and its defaults, the report's groups and the dispatch buckets, and every backend that does not
declare it skips it by name; a backend that ignores a new mask kind is skipped, not run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnbench.core import axes
from attnbench.report import dispatch_table
from attnbench.stats import dispatch

ROOT = Path(__file__).resolve().parents[1]

# A toy workload axis (a kind of score bias) and a toy mask kind (chunked attention), declared in the table alone
# before anything else imports it: the schema, Case, Record and Shape are built from the table at import.
DECLARE = """
from typing import Literal, Optional
from attnbench.core import axes
axes.TABLE.append(axes.simple_axis("bias_kind", Optional[Literal["rel", "abs"]], None, lambda v: f"bias{v}",
                                   lambda v: f"{v} bias", mapped=True, feature="biased", feature_words="a bias"))
axes.TABLE.append(axes.simple_axis("chunk", Optional[int], None, lambda n: f"chunk{n}", lambda n: f"chunks of {n}",
                                   bounds=(1, axes.MAX_SEQ), mask=True))
"""

SUITE = """
name: toy
device: cpu
backends: [naive, sdpa, planted]
timing: {warmup_ms: 0, budget_ms: 1, min_samples: 1, max_samples: 1, energy_ms: 0}
sweep:
  seq_len: [32]
  heads: [2]
  head_dim: [16]
  causal: [true]
  bias_kind: [null, rel]
  chunk: [null, 8]
"""

PLANTED = """
import dataclasses

from attnbench.backends.base import Backend
from attnbench.backends.naive import NaiveBackend


class Planted(NaiveBackend):
    '''Maps every workload axis there is (the toy one too) and ignores the mask kind it never heard of.'''

    name = "planted"
    capabilities = dataclasses.replace(NaiveBackend.capabilities,
                                       workload_axes=NaiveBackend.capabilities.workload_axes | {"bias_kind"})
"""

CHECK = """
import json, sys
from pathlib import Path
from attnbench.sweep.suite import load_suite
from attnbench.core.errors import SuiteError
from attnbench.records.results import WORKLOAD_DEFAULTS
from attnbench.report import groups, dispatch_table
from attnbench.stats import dispatch
from attnbench.backends.registry import default_registry
from attnbench.run.skip import Facts, why_skipped

out = {}
folder = Path(sys.argv[1])
text = (folder / "toy.yaml").read_text()
for good, bad in (("bias_kind: [null, rel]", "bias_kind: [xyz]"), ("chunk: [null, 8]", "chunk: [0]")):
    (folder / "bad.yaml").write_text(text.replace(good, bad))
    try:
        load_suite(folder / "bad.yaml")
    except SuiteError as exc:
        out.setdefault("refused", []).append(str(exc).split(": ", 1)[1])
cases = load_suite(folder / "toy.yaml").cases("cpu")
out["ids"] = [c.case_id for c in cases]
out["defaults"] = {k: WORKLOAD_DEFAULTS[k] for k in ("bias_kind", "chunk")}
out["group_fields"] = [k for k in ("bias_kind", "chunk") if k in groups.GROUP_FIELDS]
out["features"] = list(dispatch.FEATURES)
out["schema_requires"] = "biased" in dispatch_table.schema()["$defs"]["bucket"]["required"]
biased = next(c for c in cases if c.bias_kind and not c.chunk)
out["words"] = groups.workload_words(biased) + groups.workload_words(biased, short=True)
out["bucket"] = dispatch.Shape.of_record(biased).bucket().biased
out["words_dense"] = groups.workload_words(cases[0])
registry = default_registry()
out["skips"] = {name: why_skipped(biased, registry.get(name), Facts()) for name in registry.names()}
print(json.dumps(out))
"""


def _run(code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(cwd), str(ROOT)]))
    return subprocess.run([sys.executable, "-c", DECLARE + code, *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_an_axis_declared_in_the_table_alone_reaches_every_place_and_is_skipped_by_name(tmp_path: Path) -> None:
    (tmp_path / "toy.yaml").write_text(SUITE.replace(", planted]", "]"))
    done = _run(CHECK, str(tmp_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    # validated: a value outside the axis' type or bounds is one line naming the axis
    assert out["refused"][0].startswith("sweep.bias_kind[0]: 'xyz' is not allowed")
    assert out["refused"][1] == f"sweep.chunk: 0 is out of range; allowed: 1 to {axes.MAX_SEQ}"
    # crossed into the cases, and in their ids (the dense case's id unchanged)
    assert out["ids"] == ["cpu-fp32-b1-s32-h2-kv2-d16-causal-fwd", "cpu-fp32-b1-s32-h2-kv2-d16-causal-biasrel-fwd",
                          "cpu-fp32-b1-s32-h2-kv2-d16-causal-chunk8-fwd",
                          "cpu-fp32-b1-s32-h2-kv2-d16-causal-biasrel-chunk8-fwd"]
    assert out["defaults"] == {"bias_kind": None, "chunk": None}
    assert out["group_fields"] == ["bias_kind", "chunk"]
    assert out["features"][-1] == "biased" and out["schema_requires"]
    assert out["words"] == ["rel bias", "biasrel"] and out["words_dense"] == []
    assert out["bucket"] is True  # a dispatch bucket tells a biased case apart
    # every built-in backend that does not declare the axis is skipped, most by its name; none is run
    skips = out["skips"]
    assert all(skips.values()), skips
    assert skips["naive"] == "attnbench does not map bias_kind onto naive yet"
    assert skips["sdpa"] == "attnbench does not map bias_kind onto sdpa yet"


@pytest.mark.slow
def test_a_backend_that_ignores_a_new_mask_kind_is_skipped_not_run(tmp_path: Path) -> None:
    (tmp_path / "toy.yaml").write_text(SUITE)
    (tmp_path / "planted.py").write_text(PLANTED)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    code = DECLARE + ("import runpy, sys; sys.argv = ['attnbench', *sys.argv[1:]]; "
                      "runpy.run_module('attnbench', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code, "run", str(tmp_path / "toy.yaml"), "--out",
                           str(tmp_path / "out"), "--no-report", "--plugin", "planted:Planted"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    by = {(r["case_id"].split("-d16-causal")[1], r["backend"]): r for r in records}
    # the plain case runs and is checked; the record of a case setting an axis carries it (left out when unset)
    assert by[("-fwd", "planted")]["status"] == "ok" and "chunk" not in by[("-fwd", "planted")]
    assert by[("-biasrel-fwd", "planted")]["bias_kind"] == "rel"
    # planted maps bias_kind (it says so), so it runs that case; the chunked mask it never declared is a skip by name
    assert by[("-biasrel-fwd", "planted")]["status"] == "ok"
    for tail in ("-chunk8-fwd", "-biasrel-chunk8-fwd"):
        record = by[(tail, "planted")]
        assert record["status"] == "skipped" and record["chunk"] == 8
        assert record["reason"] == "attnbench does not map chunk onto planted yet"
    assert by[("-chunk8-fwd", "naive")]["reason"] == "attnbench does not map chunk onto naive yet"
    assert by[("-biasrel-fwd", "sdpa")]["reason"] == "attnbench does not map bias_kind onto sdpa yet"


def test_the_shipped_dispatch_schema_lists_the_tables_features() -> None:
    shipped = json.loads((ROOT / "attnbench" / "report" / dispatch_table.SCHEMA_FILE).read_text())
    bucket = shipped["$defs"]["bucket"]
    booleans = {f for f in bucket["required"] if bucket["properties"].get(f) == {"type": "boolean"}}
    assert booleans - {"causal"} == set(dispatch.FEATURES)
    assert dispatch_table.FEATURE_WORDS == axes.features()


def test_case_record_and_schema_fields_follow_the_table() -> None:
    import dataclasses

    from attnbench.core.case import Case
    from attnbench.records.results import WORKLOAD_DEFAULTS, Record
    from attnbench.sweep.schema import Axes

    names = [f.name for f in axes.case_fields()]
    assert [f.name for f in dataclasses.fields(Case)][11:] == names
    assert [f.name for f in dataclasses.fields(Record) if f.name in WORKLOAD_DEFAULTS] == names
    assert [n for n in Axes.model_fields if n in {a.name for a in axes.TABLE}] == [a.name for a in axes.TABLE]


def test_the_inputs_axis_goes_through_the_table_like_the_others(tmp_path: Path) -> None:
    """`inputs:` is declared in the table alone: validated (one line, exit 2), in the case id (randn's unchanged), the
    record (left out for randn), the report's groups and the dispatch buckets, and mapped by no backend (every one
    takes any values)."""
    from typer.testing import CliRunner

    from attnbench.backends.registry import default_registry
    from attnbench.cli.main import app
    from attnbench.core.case import Case
    from attnbench.records.results import WORKLOAD_DEFAULTS
    from attnbench.report import groups
    from attnbench.run.skip import Facts, why_skipped
    from attnbench.sweep.suite import load_suite

    text = ("name: s\ndevice: cpu\nbackends: [naive]\nsweep:\n  seq_len: [32]\n  heads: [2]\n  head_dim: [16]\n"
            "  inputs: [randn, large_logits]\n")
    (tmp_path / "s.yaml").write_text(text)
    randn, large = load_suite(tmp_path / "s.yaml").cases("cpu")
    assert randn.case_id == "cpu-fp32-b1-s32-h2-kv2-d16-full-fwd" and randn.inputs is None
    assert large.case_id == "cpu-fp32-b1-s32-h2-kv2-d16-full-large_logits-fwd" and large.inputs == "large_logits"
    assert large.seed == randn.seed  # the same draws, then transformed
    assert WORKLOAD_DEFAULTS["inputs"] is None and "inputs" in groups.GROUP_FIELDS
    assert groups.workload_words(large) == ["large_logits inputs"]
    assert groups.workload_words(large, short=True) == ["large_logits"]
    assert dispatch.Shape.of_record(large).bucket().stress_inputs is True  # a case has a record's case fields
    assert dispatch.Shape.of_record(randn).bucket().stress_inputs is False
    registry = default_registry()
    assert all(why_skipped(large, registry.get(n), Facts()) is None for n in ("naive", "sdpa-math", "sdpa-flash"))
    assert isinstance(large, Case)
    (tmp_path / "bad.yaml").write_text(text.replace("large_logits", "large_logit"))
    result = CliRunner().invoke(app, ["run", str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    line = " ".join(result.output.split())
    assert "sweep.inputs[1]: 'large_logit' is not allowed (did you mean 'large_logits'?); allowed: randn, outliers, " \
           "sink, large_logits, shifted_keys, near_constant, denormal" in line
