"""Every CPU backend on each workload axis: it matches the float64 reference, or skips with a reason; and the
check catches the plausible bugs of each axis (a document boundary off by one, a wrong page lookup, soft-capping
after the softmax)."""

from __future__ import annotations

import pytest

from attnbench.backends.base import Backend, Capabilities, Prepared, expand_kv, unmapped_axes
from attnbench.backends.registry import default_registry
from attnbench.core import case as case_mod
from attnbench.core import workload
from attnbench.run.measure import Settings, measure
from attnbench.run.recording import RunInfo
from attnbench.sweep.suite import load_suite
from attnbench.timing.timers import ClockTimer
from attnbench.verify.inputs import CaseData, naive_attention
from tests.helpers import make_case, measure_one

CPU = ("naive", "sdpa", "sdpa-math", "sdpa-flash", "flex", "sliding-window")
AXES = {
    "documents": dict(causal=True, documents=3),
    "documents-random-window": dict(causal=True, window=6, documents=5, doc_lengths="random", heads=4, kv_heads=2),
    "documents-two-sided": dict(causal=False, window=5, documents=4, doc_lengths="random"),
    "ragged": dict(causal=True, batch=3, seq_len=8, kv_seq_len=80, kv_lengths="random", heads=4, kv_heads=1),
    "ragged-decode-window": dict(causal=True, window=9, batch=4, seq_len=1, kv_seq_len=80, kv_lengths="random"),
    "paged": dict(causal=True, batch=2, seq_len=8, kv_seq_len=80, kv_lengths="random", page_size=16),
    "softcap": dict(causal=True, softcap=2.0),
    "alibi": dict(causal=True, alibi=True, heads=6, kv_heads=3),
    "head_dim_v": dict(causal=True, head_dim_v=16, heads=4, kv_heads=2),
    "everything": dict(causal=True, documents=3, doc_lengths="random", softcap=3.0, alibi=True, head_dim_v=48),
    "tp": dict(causal=True, heads=2, kv_heads=1, tp=4),
    # the combinations other libraries run (issue 22): a zero-length document; packed documents over a cached prefix
    # (shared out, or explicit [queries, keys] pairs with a document of fewer keys than queries); caches shorter than
    # the queries, one empty; fewer keys than queries in one sequence. Queries that see no key output zeros.
    "zero-length-document": dict(causal=True, documents=3, doc_lengths="explicit", doc_lens=(40, 0, 24)),
    "documents-prefix": dict(causal=True, kv_seq_len=90, documents=3, heads=4, kv_heads=2),
    "documents-prefix-pairs-window": dict(causal=False, window=5, kv_seq_len=70, documents=3, doc_lengths="explicit",
                                          doc_lens=(30, 0, 34), doc_kv_lens=(20, 6, 44)),
    "short-caches": dict(causal=True, batch=3, seq_len=8, kv_seq_len=24, kv_lengths="explicit", kv_lens=(4, 0, 24),
                         alibi=True),
    "fewer-keys-than-queries": dict(causal=True, window=9, kv_seq_len=20),
}
# The axes flex is also checked on in bfloat16 (the others in float32 only: every flex case is a compile).
BF16_FLEX = ("ragged", "everything")


def structure(case: case_mod.Case) -> tuple:
    """What a case asks of flex's masks and graph, sizes aside: its axes, mask kinds, dtype and mode, and each edge
    the cases above plant (a decode step, keys beyond the queries, an empty document or cache, documents with key
    lengths of their own)."""
    return (case.workload_axes, case.mask_kinds, case.dtype, case.mode, case.seq_len == 1,
            case.kv_seq_len > case.seq_len, 0 in (case.doc_lens or ()), case.doc_kv_lens is not None,
            0 in (case.kv_lens or ()))


# flex compiles every case (seconds each). Where a case of the workloads suite has an axis's structure, the suite's
# run (test_the_workloads_suite_runs_with_nothing_mismatched, at sizes of several 128-token blocks) checks flex on
# it, and the per-axis test does not compile it again.
IN_WORKLOADS_SUITE = frozenset(structure(case) for case in load_suite("workloads").cases("cpu"))
# What each backend may skip, and the words of its reason (anything else must be ok).
SKIPS = {
    "sdpa": {"softcap": "SDPA has no soft-capping", "page_size": "SDPA reads contiguous K/V"},
    "flex": {},  # paged caches through PagedAttention, forward only (below)
    "sliding-window": {"window": "needs a window", "kv_lengths": "does not map", "softcap": "does not map",
                       "alibi": "does not map", "head_dim_v": "does not map", "page_size": "does not map"},
}


def expected_skip(name: str, case) -> str | None:  # type: ignore[no-untyped-def]
    family = "sdpa" if name.startswith("sdpa") else name
    rules = SKIPS.get(family, {})
    if "window" in rules and case.window is None:
        return rules["window"]
    if name == "sliding-window" and case.doc_kv_lens is not None:
        return "documents with a cached prefix"
    for axis in case.workload_axes:
        if axis in rules:
            return rules[axis]
    if name == "flex" and case.page_size is not None and case.needs_grad:
        return "forward only"
    if name == "sdpa-flash" and case.head_dim_v is not None:
        return "same last dimension"  # PyTorch's own refusal
    return None


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("mode", ["fwd", "bwd"])
@pytest.mark.parametrize("axis", list(AXES))
def test_cpu_backends_match_the_reference_on_each_axis(axis: str, mode: str, dtype: str) -> None:
    case = make_case(mode=mode, dtype=dtype, **AXES[axis])
    data = CaseData(case)
    registry = default_registry()
    for name in CPU:
        if name == "flex" and (mode == "bwd" or (dtype == "bfloat16" and axis not in BF16_FLEX)
                               or structure(case) in IN_WORKLOADS_SUITE):
            continue  # FlexAttention has no CPU backward (a skip tested elsewhere); each compile costs seconds
        record = measure_one(case, registry.get(name), data)
        skip = expected_skip(name, case)
        if skip is None:
            assert record.status == "ok", (name, record.reason)
            assert record.grad_checked == (mode == "bwd")
        else:
            assert record.status == "skipped" and skip in record.reason, (name, record.status, record.reason)


# (flash-attn 2/3/4, xformers, flashinfer and sdpa-varlen map some axes: their own stand-in tests hold what each
# maps and the reason for each it does not.)
@pytest.mark.parametrize("name", ["sdpa-flash-fa3",
                                  "sdpa-flash-fa4", "flex-dynamic"])
def test_backends_without_a_mapping_skip_each_axis_by_name(name: str) -> None:
    backend = default_registry().get(name)
    case = make_case(dtype="float16", causal=True, documents=4, alibi=True)
    assert unmapped_axes(backend, case) == f"attnbench does not map documents, alibi onto {name} yet"
    assert unmapped_axes(backend, make_case(dtype="float16", causal=True, tp=2, heads=2, kv_heads=2)) is None


# ---- the check catches each axis's plausible bug ---------------------------------------------------------
class DocumentOffByOne(Backend):
    """Naive attention whose document boundaries are one token late (the first document takes the next's first)."""

    name = "documents-off-by-one"
    capabilities = Capabilities(workload_axes=frozenset(case_mod.AXES))

    def prepare(self, case, q, k, v) -> Prepared:  # type: ignore[no-untyped-def]
        from dataclasses import replace

        lens = (case.doc_lens[0] + 1, case.doc_lens[1] - 1, *case.doc_lens[2:])
        wrong = replace(case, doc_lengths="explicit", doc_lens=lens)
        mask = workload.visibility(wrong)[:, None]
        return Prepared((q, k, v), lambda q, k, v: naive_attention(q, expand_kv(k, case), expand_kv(v, case), mask),
                        kernel="naive, documents one token late")


class WrongPageLookup(Backend):
    """Naive paged attention that reads logical page p from the physical page of p + 1 (wrapping)."""

    name = "wrong-page-lookup"
    capabilities = Capabilities(workload_axes=frozenset(case_mod.AXES))

    def prepare(self, case, q, k, v) -> Prepared:  # type: ignore[no-untyped-def]
        layout = workload.pages(case)
        table = workload.table_tensor(layout).roll(-1, dims=1)
        mask = workload.visibility(case)[:, None]

        def call(q, k_pool, v_pool):  # type: ignore[no-untyped-def]
            k, v = (workload.gather(pool, table, case.kv_seq_len) for pool in (k_pool, v_pool))
            return naive_attention(q, expand_kv(k, case), expand_kv(v, case), mask)

        return Prepared((q, workload.to_pages(k, layout), workload.to_pages(v, layout)), call, kernel="wrong lookup")


class SoftcapAfterSoftmax(Backend):
    """Soft-capping applied to the probabilities instead of the scores."""

    name = "softcap-after-softmax"
    capabilities = Capabilities(workload_axes=frozenset(case_mod.AXES))

    def prepare(self, case, q, k, v) -> Prepared:  # type: ignore[no-untyped-def]
        import math

        mask = workload.mask(case)
        cap = case.softcap

        def call(q, k, v):  # type: ignore[no-untyped-def]
            scores = (q @ expand_kv(k, case).transpose(-2, -1)) / math.sqrt(q.shape[-1])
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            probs = scores.softmax(-1)
            return (cap * (probs / cap).tanh()) @ expand_kv(v, case)

        return Prepared((q, k, v), call, kernel="softcap after softmax")


class EmptyRows(Backend):
    """Naive attention that gets the rows with no visible key wrong: a plain softmax over nothing (NaN), or a mask
    filled with the dtype's lowest finite value (a uniform average over the masked keys), as kernels have done."""

    name = "empty-rows"
    capabilities = Capabilities(workload_axes=frozenset(case_mod.AXES))
    fill = "nan"

    def prepare(self, case, q, k, v) -> Prepared:  # type: ignore[no-untyped-def]
        import math

        import torch

        mask = workload.visibility(case)[:, None]

        def call(q, k, v):  # type: ignore[no-untyped-def]
            scores = (q @ expand_kv(k, case).transpose(-2, -1)) / math.sqrt(q.shape[-1])
            low = float("-inf") if self.fill == "nan" else torch.finfo(scores.dtype).min
            return scores.masked_fill(~mask, low).softmax(-1) @ expand_kv(v, case)

        return Prepared((q, k, v), call, kernel=f"empty rows: {self.fill}")


class EmptyRowsAveraged(EmptyRows):
    name = "empty-rows-averaged"
    fill = "lowest"


EMPTY_ROWS = {
    "queries-of-a-document-without-keys": make_case(causal=True, seq_len=64, kv_seq_len=54, documents=3,
                                                    doc_lengths="explicit", doc_lens=(30, 10, 24),
                                                    doc_kv_lens=(30, 0, 24)),
    "caches-shorter-than-the-queries": make_case(**AXES["short-caches"]),
    "fewer-keys-than-queries": make_case(causal=True, kv_seq_len=20),
}


@pytest.mark.parametrize("name", list(EMPTY_ROWS))
def test_a_row_with_no_key_is_checked_against_zeros(name: str) -> None:
    """The reference's rows that see no key are zeros; a backend answering NaN there, or an average over the masked
    keys, is a mismatch, and naive (the reference's math in the case's dtype) is ok."""
    case = EMPTY_ROWS[name]
    lo, hi = workload.key_ranges(case)
    assert bool((hi < lo).any()), "the case has a query that sees no key"
    data = CaseData(case)
    assert measure_one(case, default_registry().get("naive"), data).status == "ok"
    nan = measure_one(case, EmptyRows(), data)
    assert nan.status == "mismatch" and nan.max_abs_error is None and nan.extra["nonfinite"]  # JSON has no infinity
    averaged = measure_one(case, EmptyRowsAveraged(), data)
    assert averaged.status == "mismatch" and averaged.max_abs_error > 10 * averaged.error_bound


def test_the_check_catches_a_document_boundary_off_by_one() -> None:
    record = measure_one(make_case(causal=True, documents=4), DocumentOffByOne())
    assert record.status == "mismatch" and record.max_abs_error > record.error_bound


def test_the_check_catches_a_wrong_page_table_lookup() -> None:
    case = make_case(causal=True, batch=2, seq_len=8, kv_seq_len=80, kv_lengths="random", page_size=16)
    assert measure_one(case, default_registry().get("naive")).status == "ok"
    assert measure_one(case, WrongPageLookup()).status == "mismatch"


def test_the_check_catches_softcap_after_the_softmax() -> None:
    """With a cap of 1, tanh barely bends probabilities below 1, but scores of ±3 are squashed hard."""
    assert measure_one(make_case(causal=True, softcap=1.0), SoftcapAfterSoftmax()).status == "mismatch"


@pytest.mark.slow
def test_the_workloads_suite_runs_with_nothing_mismatched(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`attnbench run workloads` on this CPU: every record ok or skipped with a reason, each backend ok somewhere,
    flex ok on every case (the per-axis test leaves the axes of these cases to this run: IN_WORKLOADS_SUITE)."""
    import subprocess
    import sys

    from attnbench.records.record import WORKLOAD_DEFAULTS
    from attnbench.records.results import load_records

    out = tmp_path / "workloads"
    proc = subprocess.run([sys.executable, "-m", "attnbench", "run", "workloads", "--out", str(out), "--device", "cpu",
                           "--no-report"],  # the records are what it reads
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = load_records(out)
    assert {r.status for r in records} <= {"ok", "skipped"}
    assert all(r.reason for r in records if r.status == "skipped")
    assert {r.backend for r in records if r.status == "ok"} == set(CPU)
    flex = [r for r in records if r.backend == "flex"]
    assert len(flex) == len(load_suite("workloads").cases("cpu")) and all(r.status == "ok" for r in flex)
    axes = {axis for r in records if r.status == "ok" for axis in
            ("doc_lens", "kv_lens", "page_size", "softcap", "alibi", "head_dim_v", "tp")
            if getattr(r, axis) != WORKLOAD_DEFAULTS[axis]}  # each axis set on some ok record
    assert axes == {"doc_lens", "kv_lens", "page_size", "softcap", "alibi", "head_dim_v", "tp"}


def test_a_python_bug_in_flex_is_an_error_not_a_skip() -> None:
    """Python's own "unsupported format string" once made a flex bug look like torch refusing the case."""
    from attnbench.backends.flex import FlexBackend

    flex = FlexBackend()
    assert flex.skip_reason(TypeError("unsupported format string passed to NoneType.__format__"), []) is None
    refusal = NotImplementedError("FlexAttention does not support backward on CPU")
    assert flex.skip_reason(refusal, []) == "flex_attention refused: FlexAttention does not support backward on CPU"


@pytest.mark.slow
def test_flex_on_packed_documents_is_faster_than_on_one_sequence() -> None:
    """Block sparsity follows the documents and pays: 16 equal documents in a 4K-token row leave flex 1/16 of the
    causal blocks (the record's sparsity says so), so the packed case must be measured faster than the one-sequence
    case (README: 9.3x at 16K on this CPU)."""
    from attnbench.backends.flex import FlexBackend
    from attnbench.timing.timers import TimingSettings

    settings = TimingSettings(warmup_ms=20, budget_ms=200, min_samples=5)
    shape = dict(device="cpu", dtype="float32", seq_len=4096, heads=2, kv_heads=2, head_dim=64, causal=True)
    one, packed = (measure(CaseData(make_case(**shape, **docs)), FlexBackend(), ClockTimer(),
                           Settings(RunInfo("p", "t"), settings))
                   for docs in ({}, {"documents": 16}))
    assert one.status == packed.status == "ok", (one.reason, packed.reason)
    assert packed.extra["sparsity_percent"] > one.extra["sparsity_percent"] + 30  # 95% against 48% here
    assert packed.time_ms < 0.5 * one.time_ms, (packed.time_ms, one.time_ms)


@pytest.mark.slow
def test_flex_runs_paged_caches_through_pagedattention_and_a_wrong_table_is_caught(monkeypatch) -> None:
    """flex reads K/V from the shared page pool through PyTorch's PagedAttention, with the workload's shuffled
    table: a ragged decode batch with soft-capping matches the reference; the same batch read under a table whose
    first two requests (of equal length) are swapped, what a wrong page lookup reads, is a mismatch (the same graph:
    the table is data)."""
    from attnbench.backends.flex import FlexBackend

    ragged = make_case(batch=4, seq_len=1, kv_seq_len=300, heads=4, kv_heads=2, head_dim=32, causal=True,
                       page_size=16, kv_lengths="explicit", kv_lens=(300, 300, 121, 37), softcap=30.0)
    record = measure_one(ragged, FlexBackend())
    assert record.status == "ok", record.reason
    assert "PagedAttention (pages of 16)" in record.kernel and "paged" in record.extra["mask_build"]
    from torch.nn.attention.experimental._paged_attention import PagedAttention

    original = PagedAttention.convert_logical_block_mask

    def swapped(self, block_mask, batch_idx=None, kv_len=None):  # type: ignore[no-untyped-def]
        self.page_table[[0, 1]] = self.page_table[[1, 0]].clone()  # request 0 reads request 1's pages
        return original(self, block_mask, batch_idx, kv_len)

    monkeypatch.setattr(PagedAttention, "convert_logical_block_mask", swapped)
    assert measure_one(ragged, FlexBackend()).status == "mismatch"
    backward = make_case(batch=2, seq_len=8, kv_seq_len=64, heads=2, kv_heads=2, head_dim=16, causal=True,
                         page_size=16, mode="fwd_bwd")
    assert "forward only" in measure_one(backward, FlexBackend()).reason


@pytest.mark.slow
def test_kv_shared_v_is_ks_first_channels_and_the_cpu_backends_run_it() -> None:
    """Absorbed MLA decode (docs/conventions.md): V is the first head_dim_v channels of K; naive, SDPA and flex run it
    (V passed as its own tensor), a backend that does not map the axis skips it by name."""
    from attnbench.verify.inputs import make_inputs

    case = make_case(batch=2, seq_len=1, kv_seq_len=96, heads=4, kv_heads=1, head_dim=48, head_dim_v=32,
                     kv_shared=True, causal=True)
    inputs = make_inputs(case)
    assert inputs.v.shape[-1] == 32 and bool((inputs.v == inputs.k[..., :32]).all())
    assert case.case_id.endswith("-dv32-kvshared-fwd")
    registry = default_registry()
    for name in ("naive", "sdpa", "sdpa-math", "flex"):
        record = measure_one(case, registry.get(name))
        assert record.status == "ok", (name, record.reason)
        assert record.kv_shared is True
    assert unmapped_axes(registry.get("flex-dynamic"), case) == (
        "attnbench does not map head_dim_v, kv_shared onto flex-dynamic yet")
    assert unmapped_axes(registry.get("flash-attn-3"), case) is None  # the qv form (tests/test_flash_standin.py)
