"""Property tests: the mask arithmetic of Case against a brute-force reading of docs/conventions.md's mask rules.

For random shapes (Sq <= Sk), causal or not, with or without a window, every pair (query i, key j) is
judged one by one from the conventions' words; `visible_pairs`, `key_rows_read`, `key_ranges`, `mask` and the work
counts built on them must agree with that count.
"""

from __future__ import annotations

import pytest

hypothesis = pytest.importorskip("hypothesis")  # a test dependency; a bare GPU box may lack it

import torch  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from attnbench.core import counting, workload  # noqa: E402
from attnbench.core.case import Case  # noqa: E402
from tests.helpers import make_case  # noqa: E402

settings.register_profile("attnbench", max_examples=150, deadline=None, database=None)
settings.load_profile("attnbench")


def sees(i: int, j: int, sq: int, sk: int, causal: bool, window: int | None) -> bool:
    """docs/conventions.md, word for word: queries are the last Sq positions (off = Sk - Sq)."""
    pos = i + sk - sq
    if causal:
        return j <= pos and (window is None or j >= pos - window)
    if window is not None:
        return abs(pos - j) <= window
    return True


def brute(case: Case) -> list[list[bool]]:
    return [[sees(i, j, case.seq_len, case.kv_seq_len, case.causal, case.window) for j in range(case.kv_seq_len)]
            for i in range(case.seq_len)]


@st.composite
def cases(draw: st.DrawFn, max_seq: int = 40) -> Case:
    sq = draw(st.integers(1, max_seq))
    sk = draw(st.integers(sq, sq + 60))
    window = draw(st.none() | st.integers(0, sk + 4))
    heads, group = draw(st.sampled_from([(1, 1), (2, 1), (4, 2), (4, 4), (6, 3)]))
    return make_case(seq_len=sq, kv_seq_len=sk, causal=draw(st.booleans()), window=window, heads=heads,
                     kv_heads=heads // group, batch=draw(st.integers(1, 3)), head_dim=draw(st.sampled_from([8, 64])),
                     dtype=draw(st.sampled_from(["float32", "bfloat16"])),
                     mode=draw(st.sampled_from(["fwd", "bwd", "fwd_bwd"])))


@given(cases())
def test_visible_pairs_and_has_mask_are_the_brute_force_count(case: Case) -> None:
    grid = brute(case)
    visible = sum(map(sum, grid))
    assert workload.visible_pairs(case) == visible
    assert workload.has_mask(case) == (visible < case.seq_len * case.kv_seq_len)


@given(cases())
def test_key_ranges_are_each_rows_first_and_last_visible_key(case: Case) -> None:
    lo, hi = workload.key_ranges(case)
    for i, row in enumerate(brute(case)):
        seen = [j for j, ok in enumerate(row) if ok]
        assert seen, "with Sq <= Sk every query sees at least itself"
        assert (int(lo[0, i]), int(hi[0, i])) == (seen[0], seen[-1])
        assert len(seen) == seen[-1] - seen[0] + 1  # contiguous: the range says it all


@given(cases())
def test_key_rows_read_counts_the_keys_some_query_sees(case: Case) -> None:
    grid = brute(case)
    seen = sum(any(grid[i][j] for i in range(case.seq_len)) for j in range(case.kv_seq_len))
    assert counting.key_rows_read(case) // case.batch == seen


@given(cases())
def test_mask_is_the_brute_force_grid(case: Case) -> None:
    grid = brute(case)
    mask = workload.mask(case)
    if all(map(all, grid)):
        assert mask is None
    else:
        assert mask.dtype == torch.bool and mask.tolist() == grid


@given(cases(), st.data())
def test_mask_of_chosen_rows(case: Case, data: st.DataObject) -> None:
    rows = data.draw(st.lists(st.integers(0, case.seq_len - 1), min_size=1, max_size=8, unique=True))
    grid = brute(case)
    mask = workload.mask(case, rows=torch.tensor(rows))
    if mask is not None:
        assert mask.tolist() == [grid[r] for r in rows]


@given(cases())
def test_flops_and_bytes_follow_the_counts(case: Case) -> None:
    """FLOPs = 4·B·H·D·visible × (1, 2.5, 3.5); bytes: Q and O once per pass, K/V only the rows some query sees."""
    visible = sum(map(sum, brute(case)))
    grid = brute(case)
    keys = sum(any(grid[i][j] for i in range(case.seq_len)) for j in range(case.kv_seq_len))
    factor = {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}[case.mode]
    assert counting.flops(case) == int(4 * case.batch * case.heads * case.head_dim * visible * factor)
    elem = {"float32": 4, "bfloat16": 2}[case.dtype]
    q = case.batch * case.heads * case.seq_len * case.head_dim * elem
    kv = 2 * case.batch * case.kv_heads * keys * case.head_dim * elem
    passes = {"fwd": 1, "bwd": 2, "fwd_bwd": 3}[case.mode]
    assert counting.bytes_moved(case) == passes * (q + kv) + passes * q
    assert type(counting.bytes_moved(case)) is int and type(counting.flops(case)) is int  # records hold whole numbers
