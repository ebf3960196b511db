"""The correctness verdict pinned from both sides: errors planted just under and just over the bound.

docs/conventions.md's rule is err(backend) <= 2 * err(naive in the case's dtype) + floor(dtype), for the output and,
in backward modes, for dq, dk and dv each. A backend here computes the exact answer (float64 math on the
case's inputs, rounded once to the case's dtype) and plants an error of a chosen size in one tensor, so
the verdict can be watched flipping at the bound itself.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import attnbench.verify.inputs as inputs_mod
from attnbench.backends.base import Backend, Prepared
from attnbench.backends.registry import default_registry
from attnbench.core import workload
from attnbench.core.case import Case
from attnbench.verify.check import FLOOR, judge, max_abs_error
from attnbench.verify.inputs import Answer, CaseData, naive_attention
from tests.helpers import make_case, measure_one

# docs/conventions.md's floors, written out: changing the package's values must fail these tests.
FLOORS = {"float32": 1e-5, "float16": 1e-4, "bfloat16": 1e-3}
FACTOR = 2.0
TENSORS = ("out", "dq", "dk", "dv")


def exact_attention(case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Attention in float64 on the given tensors (K/V repeated per query head)."""
    g = case.group_size
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    return naive_attention(q.double(), k.double(), v.double(), workload.mask(case, device=q.device))


class Plant:
    """Where to put an error: `size` added to one element of `target` (the smallest in magnitude of a middle
    row, so that rounding to a half type barely changes it), or to every element of query row `row`."""

    def __init__(self, target: str | None, size: float, row: int | None = None) -> None:
        self.target, self.size, self.row = target, size, row

    def __call__(self, name: str, t: torch.Tensor) -> torch.Tensor:
        if name != self.target:
            return t
        t = t.clone()
        if self.row is not None:
            t[:, :, self.row, :] += self.size
        else:
            middle = t.shape[2] // 2
            col = int(t[0, 0, middle].abs().argmin())
            t[0, 0, middle, col] += self.size
        return t


class _Exact(torch.autograd.Function):
    """Exact forward and backward in float64, each rounded once to the inputs' dtype, with the plant applied."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, case: Case, plant: Plant) -> torch.Tensor:
        ctx.save_for_backward(q, k, v)
        ctx.case, ctx.plant = case, plant
        return plant("out", exact_attention(case, q, k, v)).to(q.dtype)

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v = ctx.saved_tensors
        with torch.enable_grad():
            leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
            grads = torch.autograd.grad(exact_attention(ctx.case, *leaves), leaves, dout.double())
        planted = (ctx.plant(n, g).to(t.dtype) for n, g, t in zip(TENSORS[1:], grads, (q, k, v), strict=False))
        return (*planted, None, None)


class Planted(Backend):
    """The exact answer with a planted error."""

    name = "planted"

    def __init__(self, plant: Plant) -> None:
        self.plant = plant

    def prepare(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Prepared:
        return Prepared((q, k, v), lambda q, k, v: _Exact.apply(q, k, v, case, self.plant), kernel="planted")


def expected_bounds(data: CaseData) -> dict[str, float]:
    """2 * err(naive) + floor per tensor, computed here from the case's naive run and reference."""
    naive, ref = data.naive, data.reference
    pairs = [("out", naive.out, ref.out)]
    if ref.grads is not None:
        pairs += zip(TENSORS[1:], naive.grads, ref.grads, strict=False)
    return {n: FACTOR * float((low.double() - want).abs().max()) + FLOORS[data.case.dtype] for n, low, want in pairs}


# ---- the rule's constants, as values ---------------------------------------------------------
def test_floors_are_guides_values() -> None:
    assert FLOOR == FLOORS


@pytest.mark.parametrize("dtype", list(FLOORS))
def test_bound_is_twice_naives_error_plus_the_floor(dtype: str) -> None:
    """Exact arithmetic: naive errs by 2^-10 in one element; the bound is 2 * 2^-10 + floor, flipping right there."""
    ref = torch.zeros(1, 1, 4, 4, dtype=torch.float64)
    naive_err = 2.0 ** -10
    naive = ref.clone()
    naive[0, 0, 1, 2] = -naive_err
    bound = FACTOR * naive_err + FLOORS[dtype]

    def answer(err: float) -> Answer:
        out = ref.clone()
        out[0, 0, 3, 0] = err
        return Answer(out, None)

    under = judge(answer(bound * (1 - 1e-9)), Answer(ref, None), Answer(naive, None), dtype)
    over = judge(answer(bound * (1 + 1e-9)), Answer(ref, None), Answer(naive, None), dtype)
    at = judge(answer(bound), Answer(ref, None), Answer(naive, None), dtype)
    assert under.passed and at.passed and not over.passed  # err <= bound passes: equality included
    assert under.error_bound == over.error_bound == bound
    assert over.max_abs_error == pytest.approx(bound * (1 + 1e-9), rel=1e-12)
    # with an exact naive run (an fp32 naive on a tiny case can be), the floor alone is the bound
    exact = judge(answer(FLOORS[dtype] * 1.01), Answer(ref, None), Answer(ref, None), dtype)
    assert exact.error_bound == FLOORS[dtype] and not exact.passed


@pytest.mark.parametrize("name", TENSORS)
def test_each_tensor_is_judged_on_its_own_bound(name: str) -> None:
    """Four tensors with different naive errors: one over its own bound fails the verdict, and is named."""
    shape = (1, 1, 4, 4)
    ref = [torch.zeros(shape, dtype=torch.float64) for _ in TENSORS]
    naive_errs = {"out": 2.0 ** -12, "dq": 2.0 ** -8, "dk": 2.0 ** -6, "dv": 2.0 ** -9}
    naive = [torch.full(shape, naive_errs[n], dtype=torch.float64) for n in TENSORS]
    bounds = {n: FACTOR * naive_errs[n] + FLOORS["float32"] for n in TENSORS}

    def answer(factor_for: dict[str, float]) -> Answer:
        t = [torch.full(shape, factor_for[n] * bounds[n], dtype=torch.float64) for n in TENSORS]
        return Answer(t[0], (t[1], t[2], t[3]))

    ok = judge(answer({n: 0.99 for n in TENSORS}), Answer(ref[0], tuple(ref[1:])), Answer(naive[0], tuple(naive[1:])),
               "float32")
    assert ok.passed and ok.bounds == bounds
    bad = judge(answer({n: 1.01 if n == name else 0.99 for n in TENSORS}), Answer(ref[0], tuple(ref[1:])),
                Answer(naive[0], tuple(naive[1:])), "float32")
    assert not bad.passed
    assert bad.worst == name
    assert bad.max_abs_error == pytest.approx(1.01 * bounds[name]) and bad.error_bound == bounds[name]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_nan_or_inf_anywhere_fails(bad: float) -> None:
    ref = torch.zeros(2, 3, dtype=torch.float64)
    got = torch.zeros(2, 3, dtype=torch.float32)
    got[1, 2] = bad
    assert max_abs_error(got, ref) == float("inf")
    assert max_abs_error(torch.full((2, 3), 0.25), ref) == 0.25
    assert not judge(Answer(got, None), Answer(ref, None), Answer(ref, None), "float32").passed


# ---- through the runner: planted errors just under and just over ------------------------------
SIDES = {"under": 0.95, "over": 1.05}


@pytest.mark.parametrize("side", list(SIDES))
@pytest.mark.parametrize("target", TENSORS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_planted_error_flips_the_status_at_the_bound(dtype: str, target: str, side: str) -> None:
    """An error 5% under its tensor's bound is `ok`, 5% over is `mismatch` naming that tensor; the others exact."""
    case = make_case(dtype=dtype, seq_len=48, heads=2, kv_heads=2, head_dim=16, causal=True, mode="bwd")
    data = CaseData(case)
    bounds = expected_bounds(data)
    size = SIDES[side] * bounds[target]
    record = measure_one(case, Planted(Plant(target, size)), data)
    assert record.grad_checked is True
    assert record.extra["errors"][target] == pytest.approx(size, rel=0.02)
    assert record.error_bound == pytest.approx(bounds[target], rel=1e-9)  # the worst tensor is the planted one
    if side == "under":
        assert record.status == "ok", record.reason
    else:
        assert record.status == "mismatch"
        assert record.reason.startswith(f"{target} max |error| ")
        assert record.time_ms is not None, "a mismatch keeps its time"


def test_exact_backend_is_ok_and_far_inside_every_bound() -> None:
    case = make_case(dtype="bfloat16", seq_len=48, heads=4, kv_heads=2, head_dim=16, causal=True, window=6, mode="bwd")
    data = CaseData(case)
    record = measure_one(case, Planted(Plant(None, 0.0)), data)
    assert record.status == "ok"
    bounds = expected_bounds(data)
    assert set(record.extra["errors"]) == set(TENSORS)
    for name in TENSORS:  # rounding once to bf16 is well inside twice naive's error
        assert record.extra["errors"][name] < 0.5 * bounds[name], name


# ---- the long-case path: a seeded subset of query rows ----------------------------------------
@pytest.fixture
def subset_path(monkeypatch: pytest.MonkeyPatch) -> int:
    """Force the row-subset check on small CPU cases: threshold 0 pairs, 16 sampled middle rows."""
    monkeypatch.setitem(inputs_mod.FULL_CHECK_PAIRS, "cpu", 0)
    monkeypatch.setattr(inputs_mod, "SUBSET_ROWS", 16)
    return 16


SUBSET_CASE = make_case(seq_len=96, heads=2, kv_heads=2, head_dim=16, causal=True)


def test_checked_rows_are_first_last_and_a_seeded_sample(subset_path: int) -> None:
    rows = inputs_mod.checked_rows(SUBSET_CASE)
    assert rows is not None
    assert len(rows) == subset_path + 2
    assert rows[0] == 0 and rows[-1] == SUBSET_CASE.seq_len - 1
    assert rows.tolist() == sorted(set(rows.tolist()))  # distinct, in order
    assert torch.equal(rows, inputs_mod.checked_rows(SUBSET_CASE))  # the same subset every time
    other = make_case(seq_len=96, heads=2, kv_heads=2, head_dim=16, causal=False)
    assert not torch.equal(rows, inputs_mod.checked_rows(other))  # seeded by the case
    assert inputs_mod.grad_checkable(make_case(seq_len=96, mode="bwd")) is False


# README's "Conventions", written out: above 2²⁴ (batch·heads·Sq·Sk) pairs on a CPU (2³² on CUDA) the forward
# check compares 258 seeded query rows, the first and the last among them. Changing the package's values must
# fail a test; the tests above inject their own, so only this one reads the package's.
DOCUMENTED_PAIRS = {"cpu": 1 << 24, "cuda": 1 << 32}
DOCUMENTED_ROWS = 258


def test_a_long_case_is_checked_on_the_documented_rows() -> None:
    """No injection: a CPU case just over 2²⁴ pairs is checked on 258 distinct rows, first and last included (a
    subset of 0 would check only those two); at exactly 2²⁴ pairs, on every row."""
    assert inputs_mod.FULL_CHECK_PAIRS == DOCUMENTED_PAIRS
    long = make_case(seq_len=4097, heads=1, kv_heads=1)  # 4097² pairs: one row past the threshold
    rows = inputs_mod.checked_rows(long)
    assert rows is not None and len(rows) == DOCUMENTED_ROWS
    assert rows[0] == 0 and rows[-1] == long.seq_len - 1
    assert len(set(rows.tolist())) == DOCUMENTED_ROWS
    assert inputs_mod.checked_rows(make_case(seq_len=4096, heads=1, kv_heads=1)) is None


def test_small_cases_check_every_row() -> None:
    assert inputs_mod.checked_rows(SUBSET_CASE) is None
    assert inputs_mod.grad_checkable(make_case(seq_len=96, mode="bwd")) is True


def test_threshold_is_pairs_over_the_whole_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """At exactly FULL_CHECK_PAIRS pairs every row is checked; one more batch row tips it onto the subset."""
    case = make_case(batch=2, seq_len=300, heads=2, kv_heads=2)
    pairs = 2 * 2 * 300 * 300
    monkeypatch.setitem(inputs_mod.FULL_CHECK_PAIRS, "cpu", pairs)
    assert inputs_mod.checked_rows(case) is None
    monkeypatch.setitem(inputs_mod.FULL_CHECK_PAIRS, "cpu", pairs - 1)
    assert len(inputs_mod.checked_rows(case)) == inputs_mod.SUBSET_ROWS + 2
    short = make_case(batch=2, seq_len=inputs_mod.SUBSET_ROWS + 2, heads=2, kv_heads=2)
    assert inputs_mod.checked_rows(short) is None  # no fewer rows than the subset would hold


def test_correct_backends_on_the_subset_path_are_ok(subset_path: int) -> None:
    data = CaseData(SUBSET_CASE)
    for backend in (Planted(Plant(None, 0.0)), default_registry().get("naive"), default_registry().get("sdpa")):
        record = measure_one(SUBSET_CASE, backend, data)
        assert record.status == "ok", (backend.name, record.reason)
        assert record.rows_checked == subset_path + 2


def test_backward_check_is_skipped_on_the_subset_path(subset_path: int) -> None:
    case = make_case(seq_len=96, heads=2, kv_heads=2, head_dim=16, causal=True, mode="bwd")
    record = measure_one(case, Planted(Plant("dk", 1.0)))
    assert record.status == "ok" and record.grad_checked is False and record.rows_checked == subset_path + 2


def test_a_wrong_middle_row_is_caught_exactly_when_it_is_sampled(subset_path: int) -> None:
    data = CaseData(SUBSET_CASE)
    sampled = data.rows.tolist()
    middle = [r for r in sampled if 0 < r < SUBSET_CASE.seq_len - 1]
    unsampled = [r for r in range(1, SUBSET_CASE.seq_len - 1) if r not in sampled]
    assert len(middle) == subset_path and unsampled
    for row in (middle[len(middle) // 2], middle[-1]):
        record = measure_one(SUBSET_CASE, Planted(Plant("out", 0.1, row=row)), data)
        assert record.status == "mismatch", row
        assert record.max_abs_error == pytest.approx(0.1, rel=1e-3)
    record = measure_one(SUBSET_CASE, Planted(Plant("out", 0.1, row=unsampled[0])), data)
    assert record.status == "ok", "a row outside the sample is not checked: rows_checked tells the reader"


def test_short_sequences_check_every_row_whatever_the_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below SUBSET_ROWS + 3 rows a subset would be all of them: every row is checked."""
    monkeypatch.setitem(inputs_mod.FULL_CHECK_PAIRS, "cpu", 0)
    monkeypatch.setattr(inputs_mod, "SUBSET_ROWS", 16)
    assert inputs_mod.checked_rows(make_case(seq_len=18)) is None
    rows = inputs_mod.checked_rows(make_case(seq_len=19))
    assert rows is not None and len(rows) == 18


def test_sampled_rows_cover_every_middle_row_across_cases(monkeypatch: pytest.MonkeyPatch) -> None:
    """16 of the 17 middle rows of a 19-row case, for several cases: each middle row is drawn by some case, never a
    first or last row twice."""
    monkeypatch.setitem(inputs_mod.FULL_CHECK_PAIRS, "cpu", 0)
    monkeypatch.setattr(inputs_mod, "SUBSET_ROWS", 16)
    seen: set[int] = set()
    for heads in (1, 2, 4, 8, 16, 32):
        rows = inputs_mod.checked_rows(make_case(seq_len=19, heads=heads, kv_heads=1)).tolist()
        assert len(set(rows)) == 18 and rows[0] == 0 and rows[-1] == 18
        seen.update(rows[1:-1])
    assert seen == set(range(1, 18))


def test_blocked_reference_equals_one_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference in query blocks (bounded memory) is the one-block reference: output and summed K/V grads."""
    case = make_case(batch=2, seq_len=40, kv_seq_len=56, heads=4, kv_heads=2, head_dim=8, causal=True, window=9,
                     mode="bwd")
    inp = inputs_mod.make_inputs(case)
    whole = inputs_mod.reference(case, inp, None)
    monkeypatch.setattr(inputs_mod, "BLOCK_BYTES", 2 * 4 * 56 * 8 * 7)  # 7 query rows per block: 6 blocks
    blocked = inputs_mod.reference(case, inp, None)
    assert torch.allclose(blocked.out, whole.out, rtol=0, atol=1e-12)
    for got, want in zip(blocked.grads, whole.grads, strict=False):
        assert torch.allclose(got, want, rtol=0, atol=1e-12)
    rows = torch.tensor([0, 3, 17, 39])
    subset = inputs_mod.reference(make_case(**{**case.fields(), "mode": "fwd"}), inp, rows)
    assert torch.allclose(subset.out, whole.out[:, :, rows], rtol=0, atol=1e-12)


def test_inputs_are_seeded_per_case_and_dout_only_for_backward() -> None:
    fwd = inputs_mod.make_inputs(make_case(seq_len=8))
    assert fwd.dout is None and fwd.q.dtype == torch.float32 and fwd.q.shape == (1, 4, 8, 32)
    bwd = inputs_mod.make_inputs(make_case(seq_len=8, mode="bwd", dtype="bfloat16", kv_heads=2))
    assert bwd.dout.shape == bwd.q.shape and bwd.k.shape == (1, 2, 8, 32) and bwd.q.dtype == torch.bfloat16
    assert torch.equal(inputs_mod.make_inputs(make_case(seq_len=8)).q, fwd.q)
