"""The GPU-scale tier (docs/conventions.md "GPU scale"): every shape-dependent computation run on the CPU at the
largest CUDA shapes the shipped suites run, and every bounded index at the sizes where float32 (2^24) and int32
(2^31) stop being exact. On an H200 (reports/NVIDIA-H200-20261204-c671d98) a float32 index broke every 16K case;
nothing here needs a GPU: int8 stand-ins of `torch.empty` cost address space, not memory, and the helpers are pure."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import torch

from attnbench.backends import packing
from attnbench.backends.base import Unsupported
from attnbench.backends.registry import default_registry
from attnbench.core import counting, workload
from attnbench.core.case import Case
from attnbench.records.results import stored_lines
from attnbench.sweep.suite import load_suite, packaged_suites
from attnbench.verify import integrity
from attnbench.verify.inputs import SUBSET_ROWS, checked_rows
from tests.helpers import make_case, measure_one

ROOT = Path(__file__).resolve().parents[1]
H200_RUN = ROOT / "reports" / "NVIDIA-H200-20261204-c671d98"
# float32 holds every integer up to 2^24; int32 up to 2^31 - 1
EDGES = (2**24 - 1, 2**24, 2**24 + 1, 2**25, 2**31 + 1)
INT32_MAX = 2**31 - 1


@pytest.mark.parametrize("numel", EDGES)
def test_the_integrity_sample_reads_the_first_and_last_element_and_never_past_the_end(numel: int) -> None:
    index = integrity.sample_index(numel)
    assert index.dtype == torch.int64 and len(index) == integrity.SAMPLE
    assert index[0] == 0 and index[-1] == numel - 1
    assert bool((index.diff() > 0).all())
    gaps = index.diff()
    assert int(gaps.max()) - int(gaps.min()) <= 1  # evenly spread
    stand_in = torch.empty(numel, dtype=torch.int8)  # address space only: `take` touches 4096 pages
    stand_in[-1] = 7
    assert int(integrity.sample(stand_in)[-1]) == 7


def test_a_small_output_is_sampled_whole() -> None:
    t = torch.arange(10.0)
    assert integrity.sample(t).tolist() == t.tolist()
    assert integrity.sample(torch.empty(0)).numel() == 0


def h200_records(folder: str) -> list[dict]:
    return stored_lines(H200_RUN / folder)


def case_of(record: dict) -> Case:
    return Case(**{name: record[name] for name in Case.__dataclass_fields__ if name in record})


def test_the_16k_output_the_h200_could_not_sample_is_sampled_in_bounds() -> None:
    """naive16k's one record: its output (1, 16, 16384, 128) has 2^25 elements; the float32 index rounded its last
    position up to 2^25 and `take` read past the end (a device-side assert on CUDA)."""
    (record,) = h200_records("naive16k")
    case = case_of(record)
    numel = case.batch * case.heads * case.seq_len * case.v_dim
    assert numel == 2**25
    old = torch.linspace(0, numel - 1, integrity.SAMPLE).long()  # what the run of 2026-12-04 did
    assert int(old[-1]) == numel  # one past the end: the recorded failure, reproduced
    out = torch.empty(case.batch, case.heads, case.seq_len, case.v_dim, dtype=torch.int8)
    out.view(-1)[-1] = 3
    assert int(integrity.sample(out)[-1]) == 3


def test_a_cpu_measurement_with_a_2_25_element_output_is_ok_through_the_whole_pipeline() -> None:
    """The shape of every errored 16K record of the H200's check run, on the CPU: guards, reference rows, check,
    timing and record. The local backend keeps it to about a second of work."""
    errored = [r for r in h200_records("check") if r["status"] == "error" and r["seq_len"] == 16384]
    assert errored and all("device-side assert" in r["reason"] for r in errored)
    shape = {name: errored[0][name] for name in ("dtype", "batch", "seq_len", "heads", "kv_heads", "head_dim")}
    case = make_case(**shape, causal=True, window=32)
    record = measure_one(case, default_registry().get("sliding-window"))
    assert record.status == "ok", record.reason
    assert record.batch * record.heads * record.seq_len * record.head_dim == 2**25
    assert record.extra["integrity"][-1] == "new output on other inputs"
    assert record.rows_checked == SUBSET_ROWS + 2 and record.max_abs_error <= record.error_bound


@cache
def shipped_cuda_cases() -> dict[str, list[Case]]:
    return {name: load_suite(path).cases("cuda") for name, path in sorted(packaged_suites().items())}


def extremes(cases: list[Case]) -> list[Case]:
    """The largest of each shape-dependent size: output, scores, K/V, tokens, and each workload axis's largest."""
    sizes = (lambda c: c.batch * c.heads * c.seq_len * c.v_dim,
             lambda c: c.batch * c.heads * c.seq_len * c.kv_seq_len,
             lambda c: c.batch * c.kv_heads * c.kv_seq_len * c.head_dim,
             lambda c: c.batch * c.kv_seq_len)
    chosen = [max(cases, key=size) for size in sizes]
    for axis in ("doc_lens", "kv_lens", "page_size", "alibi", "window"):
        having = [c for c in cases if getattr(c, axis)]
        if having:
            chosen.append(max(having, key=sizes[1]))
    return list(dict.fromkeys(chosen))


def largest_cases() -> list[tuple[str, Case]]:
    return [(name, case) for name, cases in shipped_cuda_cases().items() for case in extremes(cases)]


LARGEST = largest_cases()
IDS = [f"{name}:{case.case_id[:60]}" for name, case in LARGEST]


def test_the_tier_reaches_the_largest_shapes_the_suites_ship() -> None:
    """128K tokens, 2^31 output elements (128 heads x 128K x 128), 2^41 score pairs: the sizes that break float32
    and int32 indices are among the cases below."""
    outputs = max(c.batch * c.heads * c.seq_len * c.v_dim for _, c in LARGEST)
    pairs = max(c.batch * c.heads * c.seq_len * c.kv_seq_len for _, c in LARGEST)
    assert max(c.seq_len for _, c in LARGEST) == 131072
    assert outputs >= 2**31 and pairs >= 2**41


@pytest.mark.parametrize(("suite", "case"), LARGEST, ids=IDS)
def test_checked_rows_are_in_bounds_and_hold_the_first_and_last_query(suite: str, case: Case) -> None:
    rows = checked_rows(case)
    if rows is None:
        assert case.batch * case.heads * case.seq_len * case.kv_seq_len <= 1 << 32 or case.seq_len <= SUBSET_ROWS + 2
        return
    assert rows.dtype == torch.int64 and len(rows) == SUBSET_ROWS + 2
    assert rows[0] == 0 and rows[-1] == case.seq_len - 1 and bool((rows.diff() > 0).all())


def keys_seen(case: Case, pos: int, keys: int) -> int:
    """Keys a query at `pos` among `keys` sees, by docs/conventions.md's rule."""
    first, last = 0, keys - 1
    if case.window is not None:
        first = max(first, pos - case.window)
        if not case.causal:
            last = min(last, pos + case.window)
    if case.causal:
        last = min(last, pos)
    return max(0, last - first + 1)


def exact_visible_rows(case: Case, rows: list[int]) -> int:
    """Visible pairs of `rows` over the batch, in Python integers, one request (or document) at a time."""
    if case.doc_lens is not None:
        starts = np.cumsum((0, *case.doc_lens)).tolist()
        total = 0
        for i in rows:
            d = int(np.searchsorted(starts, i, side="right")) - 1
            q_len, k_len = case.doc_lens[d], workload.doc_key_lens(case)[d]
            total += keys_seen(case, i - starts[d] + k_len - q_len, k_len)
        return total * case.batch
    return sum(keys_seen(case, i + kv_len - case.seq_len, kv_len)
               for kv_len in workload.request_kv_lens(case) for i in rows)


@pytest.mark.parametrize(("suite", "case"), LARGEST, ids=IDS)
def test_the_mask_and_the_visible_count_agree_with_the_rule_at_full_length(suite: str, case: Case) -> None:
    """The mask the reference applies on its checked rows, the key ranges the counts come from, and the rule in
    Python integers agree; the FLOPs are exact integers (a TFLOP/s numerator)."""
    rows = checked_rows(case)
    rows = torch.arange(min(case.seq_len, SUBSET_ROWS)) if rows is None else rows
    expected = exact_visible_rows(case, rows.tolist())
    seen = workload.visibility(case, rows)
    counted = (case.batch * len(rows) * case.kv_seq_len if seen is None
               else int(seen.sum()) * (case.batch if seen.shape[0] == 1 else 1))
    assert counted == expected
    lo, hi = workload.key_ranges(case)
    in_rows = np.maximum(hi[:, rows.numpy()] - lo[:, rows.numpy()] + 1, 0).sum()
    assert int(in_rows) * (case.batch if len(lo) == 1 else 1) == expected
    flops = counting.flops(case)
    assert isinstance(flops, int) and flops == round(counting.MODE_FLOP_FACTOR[case.mode]
                                                     * 2 * case.heads * (case.head_dim + case.v_dim)
                                                     * workload.visible_total(case))


@pytest.mark.parametrize(("suite", "case"), [(s, c) for s, c in LARGEST if c.doc_lens or c.kv_lens or c.page_size],
                         ids=[i for i, (_, c) in zip(IDS, LARGEST, strict=True) if c.doc_lens or c.kv_lens
                              or c.page_size])
def test_offsets_and_page_tables_fit_the_int32_the_kernels_take(suite: str, case: Case) -> None:
    tokens = case.batch * case.seq_len
    if case.doc_lens is not None:
        cu_q, cu_k = workload.cu_seqlens(case), workload.cu_seqlens_k(case)
        assert cu_q[0] == 0 and cu_q[-1] == tokens and list(cu_q) == sorted(cu_q)
        assert cu_k[-1] == case.batch * case.kv_seq_len
        assert packing.int32(cu_k, "cpu")[-1] == cu_k[-1]
    if case.page_size is not None:
        layout = workload.pages(case)
        used = [p for row in layout.table for p in row if p >= 0]
        assert len(used) == len(set(used)) and max(used) < layout.num_pages <= INT32_MAX
        indptr, indices, last = packing.flashinfer_page_indices(layout)
        assert indptr[-1] == len(indices) == len(used)
        assert all(1 <= n <= case.page_size for n in last)
        assert packing.block_table(layout, "cpu").dtype == torch.int32


def test_an_offset_past_int32_is_a_skip_with_the_reason_not_a_wrapped_index() -> None:
    with pytest.raises(Unsupported, match=r"int32.*2147483648"):
        packing.int32((0, 2**31), "cpu")


@pytest.mark.parametrize(("suite", "case"), LARGEST, ids=IDS)
def test_every_backends_memory_estimate_and_traffic_are_exact_integers_at_full_length(suite: str, case: Case) -> None:
    """JSON integers, at least the output they write: a numpy or float32 count would round or wrap at 2^31."""
    out_bytes = counting.tensor_bytes(case)["o"]
    assert isinstance(counting.bytes_moved(case), int) and counting.bytes_moved(case) >= out_bytes
    registry = default_registry()
    for backend in map(registry.get, registry.names()):
        estimate = backend.estimate_memory(case)
        assert isinstance(estimate, int) and not isinstance(estimate, bool), (backend.name, type(estimate))
        assert estimate >= out_bytes, backend.name
        json.dumps(estimate)


def test_no_index_is_computed_in_float() -> None:
    """`linspace` is float: an index made from it is exact only below 2^24 (the 2026-12-04 H200 failure)."""
    found = [f"{path.relative_to(ROOT)}:{n}" for path in sorted((ROOT / "attnbench").rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"\blinspace\(", line.split("#")[0])]
    assert found == []


DENSE_STORAGE = [(i, s, c) for i, (s, c) in zip(IDS, LARGEST, strict=True) if not (c.kv_lens or c.page_size)]


@pytest.mark.parametrize(("suite", "case"), [(s, c) for _, s, c in DENSE_STORAGE], ids=[i for i, _, _ in DENSE_STORAGE])
def test_the_float64_reference_composes_at_full_length_on_meta_tensors(suite: str, case: Case) -> None:
    """The reference's query blocks, masks and ALiBi at the suite's own shape, shapes only (meta tensors; ragged
    lengths and pages index by value, which meta tensors cannot, and their tables are held above)."""
    from attnbench.verify.inputs import Inputs, blocked_attention

    q = torch.empty(case.batch, case.heads, case.seq_len, case.head_dim, dtype=torch.float64, device="meta")
    k = torch.empty(case.batch, case.kv_heads, case.kv_seq_len, case.head_dim, dtype=torch.float64, device="meta")
    v = torch.empty(case.batch, case.kv_heads, case.kv_seq_len, case.v_dim, dtype=torch.float64, device="meta")
    rows = checked_rows(case)
    rows = torch.arange(min(case.seq_len, SUBSET_ROWS)) if rows is None else rows
    answer = blocked_attention(case, Inputs(q, k, v, None), rows, with_grads=False)
    assert tuple(answer.out.shape) == (case.batch, case.heads, len(rows), case.v_dim)
