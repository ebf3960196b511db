"""attnbench.report.findings' line for a case whose dtype cannot hold its inputs (extra.dtype_limited): the report
tells "the dtype cannot hold this" from "this kernel breaks here" (docs/conventions.md "Input distributions")."""

from __future__ import annotations

from attnbench.report.findings import build_findings
from tests.helpers import loaded, make_case, measure_one


def test_a_case_the_dtype_cannot_hold_is_named_with_each_backends_share_of_the_scale() -> None:
    from attnbench.backends.registry import default_registry

    case = make_case(dtype="bfloat16", seq_len=128, inputs="large_logits")
    records = [measure_one(case, default_registry().get(name)).to_dict() for name in ("naive", "sdpa-math")]
    plain = [measure_one(make_case(dtype="bfloat16", seq_len=128), default_registry().get("naive")).to_dict()]
    assert all(r["extra"]["dtype_limited"] for r in records) and not plain[0]["extra"]["dtype_limited"]
    (line,) = build_findings([], loaded(records + plain), None).dtype
    naive = records[0]["extra"]["naive_relative_error"]
    assert line.startswith("The dtype cannot hold these inputs (") and "large_logits inputs" in line
    assert f"naive attention in bfloat16 is off by {100 * naive:.0f}% of the reference's scale" in line
    share = 100 * records[1]["max_abs_error"] / records[1]["extra"]["reference_scale"]
    assert f"sdpa-math {share:.2g}%" in line and share < 100 * naive / 10  # the fused kernel far inside it
