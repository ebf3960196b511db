"""The workload axes' shared structures (attnbench.core.workload) and their counting, read from docs/conventions.md's
words."""

from __future__ import annotations

import math

import pytest
import torch

from attnbench.core import case as case_mod
from attnbench.core import counting, workload
from attnbench.core.case import Case
from attnbench.records.results import Record, key_of
from tests.helpers import make_case


# ---- documents ----------------------------------------------------------------------------------------
def test_equal_documents_spread_the_remainder_over_the_first() -> None:
    assert case_mod.equal_doc_lens(10, 3) == (4, 3, 3)
    assert case_mod.equal_doc_lens(11, 4) == (3, 3, 3, 2)
    assert make_case(seq_len=64, documents=4).doc_lens == (16, 16, 16, 16)


def test_random_documents_are_seeded_at_least_one_token_and_fill_the_row() -> None:
    case = make_case(seq_len=256, documents=7, doc_lengths="random")
    assert len(case.doc_lens) == 7 and sum(case.doc_lens) == 256 and min(case.doc_lens) >= 1
    assert make_case(seq_len=256, documents=7, doc_lengths="random").doc_lens == case.doc_lens  # from the seed
    assert len(set(case.doc_lens)) > 1, "random lengths are not the equal split"
    assert make_case(seq_len=255, documents=7, doc_lengths="random").doc_lens != case.doc_lens
    assert case_mod.random_doc_lens(5, 5, seed=1) == (1, 1, 1, 1, 1)


def test_cu_seqlens_concatenate_every_rows_documents() -> None:
    case = make_case(batch=2, seq_len=10, documents=3)
    assert workload.cu_seqlens(case) == (0, 4, 7, 10, 14, 17, 20)


def brute_force(case: Case) -> list[list[list[bool]]]:
    """docs/conventions.md's visibility, word for word, per batch row: documents (each its q_len_d queries, the last of
    its k_len_d keys, positions counted from its start), ragged lengths, causal and window."""
    def spans(lens: tuple[int, ...]) -> list[tuple[int, int]]:
        starts = [sum(lens[:n]) for n in range(len(lens))]
        return [(start, start + length) for start, length in zip(starts, lens, strict=False)]

    def owner(index: int, lens: tuple[int, ...]) -> int:
        return next(n for n, (start, end) in enumerate(spans(lens)) if start <= index < end)

    rows = []
    for b in range(case.batch):
        kv_len = case.kv_lens[b] if case.kv_lens is not None else case.kv_seq_len
        off = kv_len - case.seq_len
        grid = []
        for i in range(case.seq_len):
            row = []
            for j in range(case.kv_seq_len):
                if case.doc_lens is not None:
                    q_lens, k_lens = case.doc_lens, case.doc_kv_lens or case.doc_lens
                    doc_i, doc_j = owner(i, q_lens), owner(j, k_lens)
                    if doc_i != doc_j:
                        row.append(False)
                        continue
                    # positions from the document's start; its queries are the last of its keys
                    pi = i - spans(q_lens)[doc_i][0] + k_lens[doc_i] - q_lens[doc_i]
                    pj = j - spans(k_lens)[doc_j][0]
                else:
                    pi, pj = i + off, j
                ok = j < kv_len and (pj <= pi if case.causal else True)
                if case.window is not None:
                    ok = ok and (pi - pj <= case.window if case.causal else abs(pi - pj) <= case.window)
                row.append(ok)
            grid.append(row)
        rows.append(grid)
    return rows


EXPLICIT = dict(doc_lengths="explicit")
WORKLOADS = [
    dict(seq_len=24, documents=3, causal=True),
    dict(seq_len=24, documents=4, doc_lengths="random", causal=False),
    dict(seq_len=30, documents=5, doc_lengths="random", causal=True, window=3),
    dict(seq_len=30, documents=2, causal=False, window=4),
    dict(seq_len=6, kv_seq_len=40, batch=3, kv_lengths="random", causal=True),
    dict(seq_len=6, kv_seq_len=40, batch=3, kv_lengths="random", causal=True, window=2),
    dict(seq_len=6, kv_seq_len=40, batch=3, kv_lengths="random", causal=False, window=5),
    dict(seq_len=1, kv_seq_len=40, batch=4, kv_lengths="random", causal=False),
    # zero-length documents, a cached prefix per document (shared out equally, or explicit [q, k] pairs, some
    # documents with fewer keys than queries), caches shorter than the queries, a dense Sk < Sq
    dict(seq_len=20, documents=3, **EXPLICIT, doc_lens=(12, 0, 8), causal=True),
    dict(seq_len=20, documents=4, **EXPLICIT, doc_lens=(0, 12, 0, 8), causal=False, window=3),
    dict(seq_len=20, kv_seq_len=31, documents=3, causal=True),
    dict(seq_len=20, kv_seq_len=31, documents=3, doc_lengths="random", causal=True, window=4),
    dict(seq_len=20, kv_seq_len=27, documents=4, **EXPLICIT, doc_lens=(6, 0, 9, 5), doc_kv_lens=(10, 3, 9, 5),
         causal=True),
    dict(seq_len=20, kv_seq_len=14, documents=3, **EXPLICIT, doc_lens=(6, 9, 5), doc_kv_lens=(2, 12, 0),
         causal=True, window=2),
    dict(seq_len=20, kv_seq_len=14, documents=3, **EXPLICIT, doc_lens=(6, 9, 5), doc_kv_lens=(2, 12, 0),
         causal=False, window=3),
    dict(seq_len=8, kv_seq_len=24, batch=3, kv_lengths="explicit", kv_lens=(4, 0, 24), causal=True),
    dict(seq_len=8, kv_seq_len=24, batch=3, kv_lengths="explicit", kv_lens=(4, 16, 24), causal=True, window=3),
    dict(seq_len=8, kv_seq_len=24, batch=3, kv_lengths="explicit", kv_lens=(5, 0, 9), causal=False, window=2),
    dict(seq_len=16, kv_seq_len=5, causal=True),
    dict(seq_len=16, kv_seq_len=5, causal=False, window=4),
]


@pytest.mark.parametrize("kwargs", WORKLOADS, ids=[str(i) for i in range(len(WORKLOADS))])
def test_mask_and_visible_count_are_guides_rules(kwargs: dict) -> None:
    case = make_case(**kwargs)
    want = brute_force(case)
    mask = workload.visibility(case)
    per_row = mask.expand(case.batch, -1, -1) if mask.shape[0] == 1 else mask
    assert per_row.tolist() == want
    visible = sum(sum(map(sum, grid)) for grid in want)
    assert workload.visible_total(case) == visible
    seen = sum(sum(any(grid[i][j] for i in range(case.seq_len)) for j in range(case.kv_seq_len)) for grid in want)
    assert counting.key_rows_read(case) == seen


def test_flops_count_both_head_sizes_and_every_request() -> None:
    case = make_case(seq_len=6, kv_seq_len=40, batch=3, kv_lengths="random", causal=True, heads=4, head_dim=32,
                     head_dim_v=16)
    visible = sum(n * 6 - 15 for n in case.kv_lens)  # causal, last 6 of n keys: n + (n-1) + ... + (n-5)
    assert workload.visible_total(case) == visible
    assert counting.flops(case) == 2 * 4 * (32 + 16) * visible
    dense = make_case(causal=True)
    # unchanged
    assert counting.flops(dense) == 4 * dense.batch * dense.heads * dense.head_dim * workload.visible_pairs(dense)


def test_documents_cut_the_work_of_a_causal_row() -> None:
    one, sixteen = make_case(seq_len=1024, causal=True), make_case(seq_len=1024, causal=True, documents=16)
    assert workload.visible_total(one) == 1024 * 1025 // 2
    assert workload.visible_total(sixteen) == 16 * (64 * 65 // 2)


# ---- ragged lengths ------------------------------------------------------------------------------------
def test_ragged_lengths_are_seeded_and_hold_every_query() -> None:
    case = make_case(seq_len=8, kv_seq_len=100, batch=16, kv_lengths="random")
    assert len(case.kv_lens) == 16 and all(8 <= n <= 100 for n in case.kv_lens)
    assert len(set(case.kv_lens)) > 1
    assert make_case(seq_len=8, kv_seq_len=100, batch=16, kv_lengths="random").kv_lens == case.kv_lens


# ---- pages ---------------------------------------------------------------------------------------------
def test_page_table_is_a_shuffled_part_of_a_larger_pool() -> None:
    case = make_case(seq_len=4, kv_seq_len=100, batch=3, kv_lengths="random", page_size=16)
    layout = workload.pages(case)
    used = [p for row in layout.table for p in row if p >= 0]
    assert len(used) == sum(-(-n // 16) for n in case.kv_lens) == len(set(used))
    assert layout.num_pages > len(used), "spare pages"
    assert used != list(range(len(used))), "never the identity"
    assert all(0 <= p < layout.num_pages for p in used)


def test_a_single_page_request_is_not_stored_in_page_zero() -> None:
    """The smallest pool (one page needed) must still be shuffled: a lookup that ignores the table is caught."""
    for seq in range(1, 9):
        case = make_case(seq_len=seq, page_size=16)
        assert workload.pages(case).table[0][0] != 0


def test_pages_hold_every_real_key_and_junk_elsewhere() -> None:
    case = make_case(seq_len=4, kv_seq_len=50, batch=2, kv_lengths="random", page_size=8, heads=2, kv_heads=2)
    layout = workload.pages(case)
    k = torch.randn(2, 2, 50, 32)
    pool = workload.to_pages(k, layout)
    assert pool.shape == (layout.num_pages, 8, 2, 32)
    back = workload.from_pages(pool, layout, 50)
    for b, n in enumerate(case.kv_lens):
        assert torch.equal(back[b, :, :n], k[b, :, :n])
        assert bool((back[b, :, n:-(-n // 8) * 8] == workload.JUNK).all()), "the slots past a request's length"
    used = {p for row in layout.table for p in row if p >= 0}
    spare = [p for p in range(layout.num_pages) if p not in used]
    assert spare and bool((pool[spare] == workload.JUNK).all())


def test_bytes_count_whole_pages_actually_read() -> None:
    """Decode with a 4-key window over a 100-key cache: the keys sit in at most two pages of 16, not seven."""
    plain = make_case(seq_len=1, kv_seq_len=100, causal=True, window=3)
    paged = make_case(seq_len=1, kv_seq_len=100, causal=True, window=3, page_size=16)
    assert counting.key_rows_read(plain) == 4  # keys 96..99
    assert counting.key_rows_read(paged) == 16  # all in page 6 (keys 96..111)
    kv_row = 2 * plain.kv_heads * plain.head_dim * 4  # K and V, fp32
    assert counting.bytes_moved(paged) - counting.bytes_moved(plain) == (16 - 4) * kv_row


# ---- ALiBi ---------------------------------------------------------------------------------------------
def test_alibi_slopes_follow_the_paper() -> None:
    assert workload.alibi_slopes(8) == tuple(2 ** (-(h + 1)) for h in range(8))
    assert workload.alibi_slopes(4) == (2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8)
    twelve = workload.alibi_slopes(12)  # 8 from the power of two below, then 4 odd-position ones of 16
    assert twelve[:8] == workload.alibi_slopes(8)
    assert twelve[8:] == tuple(2 ** (-8 * (h + 1) / 16) for h in (0, 2, 4, 6))
    assert math.isclose(twelve[8], 2 ** -0.5)


def test_alibi_under_tensor_parallelism_is_rank_zeros_share_of_the_models_slopes() -> None:
    case = make_case(heads=4, kv_heads=1, alibi=True, tp=8)  # a 32-head model on 8 GPUs
    assert workload.case_slopes(case) == workload.alibi_slopes(32)[:4]


def test_alibi_bias_uses_each_requests_own_offset() -> None:
    case = make_case(seq_len=2, kv_seq_len=10, batch=2, kv_lengths="random", alibi=True, heads=2, kv_heads=2)
    bias = workload.alibi_bias(case)
    for b, n in enumerate(case.kv_lens):
        off = n - 2
        assert bias[b, 1, 0, 0].item() == -workload.case_slopes(case)[1] * abs(0 + off - 0)


# ---- records -------------------------------------------------------------------------------------------
def record_of(case: Case) -> Record:
    return Record(run_id="r", suite="s", timestamp="t", backend="naive", status="ok", case_id=case.case_id,
                  **case.fields())


def test_records_carry_the_axes_when_set_and_nothing_new_otherwise() -> None:
    dense = record_of(make_case()).to_dict()
    assert not set(dense) & {"documents", "doc_lens", "kv_lens", "page_size", "softcap", "alibi", "head_dim_v", "tp"}
    packed = record_of(make_case(seq_len=10, documents=3, doc_lengths="random", softcap=50.0, alibi=True,
                                 head_dim_v=16, page_size=4, tp=2)).to_dict()
    assert packed["documents"] == 3 and sum(packed["doc_lens"]) == 10 and packed["doc_lengths"] == "random"
    assert (packed["softcap"], packed["alibi"], packed["head_dim_v"], packed["page_size"], packed["tp"]) == (
        50.0, True, 16, 4, 2)
    ragged = record_of(make_case(seq_len=2, kv_seq_len=9, batch=3, kv_lengths="random")).to_dict()
    assert ragged["kv_lens"] == list(make_case(seq_len=2, kv_seq_len=9, batch=3, kv_lengths="random").kv_lens)


def test_a_record_read_back_is_the_same_case_and_key() -> None:
    import json

    from attnbench.records.record import case_of

    case = make_case(seq_len=10, documents=3, doc_lengths="random", alibi=True)
    stored = json.loads(json.dumps(record_of(case).to_dict()))
    assert case_of(Record(**stored)) == case
    assert key_of(stored) == key_of({**case.fields(), "backend": "naive"})
    assert key_of(stored) != key_of({**make_case(seq_len=10).fields(), "backend": "naive"})


def test_case_ids_name_the_axes_and_keep_the_old_ones() -> None:
    assert make_case(causal=True).case_id == "cpu-fp32-b1-s64-h4-kv4-d32-causal-fwd"
    case = make_case(causal=True, documents=4, doc_lengths="random", page_size=16, softcap=50.0, alibi=True,
                     head_dim_v=16, tp=2)
    assert case.case_id == "cpu-fp32-b1-s64-h4-kv4-d32-causal-doc4rand-page16-cap50-alibi-dv16-tp2-fwd"
    explicit = make_case(seq_len=10, documents=2, doc_lengths="explicit", doc_lens=(7, 3))
    assert "-docs7+3-" in explicit.case_id


def test_report_groups_keep_workloads_apart_and_name_them() -> None:
    from attnbench.report.groups import group_records

    cases = [make_case(seq_len=s, causal=True, **extra) for s in (64, 128)
             for extra in ({}, {"documents": 4}, {"documents": 4, "doc_lengths": "random"}, {"softcap": 50.0})]
    groups = group_records([record_of(c) for c in cases])
    assert len(groups) == 4 and all(len(g.records) == 2 for g in groups)
    titles = {g.title() for g in groups}
    assert any("4 documents (equal)" in t for t in titles) and any("4 documents (random)" in t for t in titles)
    assert any("softcap 50" in t for t in titles)
    assert len({g.slug() for g in groups}) == 4


def test_pages_and_score_modifiers_keep_the_same_documents_and_requests() -> None:
    """docs/suites.md "Workloads": pages change only the storage; so the drawn lengths are those of the same case
    without them."""
    ragged = dict(seq_len=1, kv_seq_len=512, batch=4, kv_lengths="random", causal=True)
    plain = make_case(**ragged)
    for extra in ({"page_size": 64}, {"softcap": 30.0}, {"alibi": True}, {"mode": "bwd"}, {"dtype": "bfloat16"}):
        assert make_case(**ragged, **extra).kv_lens == plain.kv_lens, extra
    packed = dict(seq_len=256, documents=4, doc_lengths="random", causal=True)
    assert make_case(**packed, window=32).doc_lens == make_case(**packed).doc_lens
    assert workload.visible_total(make_case(**ragged, page_size=64)) == workload.visible_total(plain)


def test_the_manual_documents_every_workload_field_of_a_record() -> None:
    """The manual's "Reading a result" page is the user's description of the record: each workload field is in
    it; and its "Workloads" section of the suites page gives an example line for each axis."""
    from pathlib import Path

    from attnbench.records.results import WORKLOAD_DEFAULTS

    docs = Path(__file__).parent.parent / "docs"
    reading = (docs / "results.md").read_text(encoding="utf-8").split("\n## Workload fields", 1)[1]
    assert [name for name in WORKLOAD_DEFAULTS if f"`{name}`" not in reading] == []
    suites = (docs / "suites.md").read_text(encoding="utf-8")
    workloads = suites.split("\n## Workloads", 1)[1].split("\n## ", 1)[0]
    assert [axis for axis in case_mod.AXES + ("doc_lengths", "tp") if f"\n{axis}:" not in workloads] == []


def test_the_forecast_counts_a_workloads_flex_compile_apart_from_the_dense_one() -> None:
    from attnbench.backends.flex import FlexBackend

    compile_key = FlexBackend().compile_key
    dense = make_case(causal=True)
    assert compile_key(dense) == compile_key(make_case(causal=True, tp=2, heads=4, kv_heads=4))  # tp: same shapes
    keys = {compile_key(make_case(causal=True, **extra)) for extra in
            ({}, {"documents": 4}, {"documents": 4, "doc_lengths": "random"}, {"softcap": 5.0}, {"alibi": True})}
    assert len(keys) == 5


def test_oom_pruning_groups_packed_cases_across_lengths() -> None:
    """An oom at 8K packed tokens skips 16K of the same packing: their drawn doc_lens differ, their group does not."""
    from attnbench.core.case import group_of

    short, long = (make_case(seq_len=s, causal=True, documents=4, doc_lengths="random") for s in (8192, 16384))
    assert short.doc_lens != long.doc_lens and group_of(short) == group_of(long)
    assert group_of(short) != group_of(make_case(seq_len=8192, causal=True, documents=8))


def test_naive_paged_estimate_counts_the_gathered_cache() -> None:
    from attnbench.backends.registry import default_registry

    naive = default_registry().get("naive")
    plain = make_case(seq_len=1, kv_seq_len=4096, causal=True, heads=4, kv_heads=4)
    paged = make_case(seq_len=1, kv_seq_len=4096, causal=True, heads=4, kv_heads=4, page_size=64)
    assert naive.estimate_memory(paged) - naive.estimate_memory(plain) == 2 * 4 * 4096 * 32 * 4  # K and V, fp32


# ---- zero-length documents, cached prefixes, short caches: the zero convention ------------------------------------
def test_a_cached_prefix_is_shared_out_equally_and_explicit_pairs_are_kept() -> None:
    shared = make_case(seq_len=20, kv_seq_len=31, documents=3, causal=True)
    assert shared.doc_lens == (7, 7, 6) and shared.doc_kv_lens == (11, 11, 9)  # 11 prefix keys: 4, 4, 3
    assert workload.cu_seqlens(shared) == (0, 7, 14, 20) and workload.cu_seqlens_k(shared) == (0, 11, 22, 31)
    # each document's queries are the last of its keys: query 0 of document 0 sits at key 4
    assert workload.query_positions(shared)[0].tolist()[:8] == [4, 5, 6, 7, 8, 9, 10, 15]
    assert workload.visible_total(shared) == sum(q * (k - q) + q * (q + 1) // 2 for q, k in ((7, 11), (7, 11), (6, 9)))


def test_zero_length_documents_and_empty_caches_count_nothing() -> None:
    with_empty = make_case(seq_len=20, documents=3, doc_lengths="explicit", doc_lens=(12, 0, 8), causal=True)
    without = make_case(seq_len=20, documents=2, doc_lengths="explicit", doc_lens=(12, 8), causal=True)
    assert workload.visible_total(with_empty) == workload.visible_total(without) == 78 + 36
    assert counting.bytes_moved(with_empty) == counting.bytes_moved(without)
    short = make_case(seq_len=8, kv_seq_len=24, batch=3, kv_lengths="explicit", kv_lens=(4, 0, 24), causal=True)
    # request 0: queries 4..7 see 1..4 keys; request 1 nothing; request 2 the last 8 of 24 (17..24 keys each)
    assert workload.visible_total(short) == (1 + 2 + 3 + 4) + 0 + sum(range(17, 25))
    assert counting.key_rows_read(short) == 4 + 0 + 24  # only K/V rows some query sees


def test_a_query_with_no_key_outputs_zeros_and_passes_no_gradient() -> None:
    """docs/conventions.md: a row that sees no key outputs zeros (FlashAttention's convention), in the float64 reference
    and in naive attention on any dtype, never NaN; its gradients are zero, the other rows' untouched."""
    from attnbench.verify.inputs import blocked_attention, make_inputs, naive_attention, upcast

    case = make_case(seq_len=8, kv_seq_len=24, batch=3, kv_lengths="explicit", kv_lens=(4, 0, 24), causal=True,
                     mode="fwd_bwd")
    inputs = upcast(make_inputs(case))
    answer = blocked_attention(case, inputs, None, with_grads=True)
    assert bool(torch.isfinite(answer.out).all()) and all(bool(torch.isfinite(g).all()) for g in answer.grads)
    assert bool((answer.out[0, :, :4] == 0).all()) and bool((answer.out[1] == 0).all())
    assert bool((answer.out[0, :, 4:] != 0).all()) and bool((answer.grads[0][1] == 0).all())
    # the rows that see keys are what softmax over their own keys gives
    q, k, v = (t[2:3] for t in (inputs.q, inputs.k, inputs.v))
    dense = naive_attention(q, k, v, workload.visibility(make_case(seq_len=8, kv_seq_len=24, causal=True))[0])
    assert torch.allclose(answer.out[2:3], dense, rtol=0, atol=1e-12)


def test_case_ids_name_explicit_lengths_and_prefixes() -> None:
    zero = make_case(seq_len=20, documents=3, doc_lengths="explicit", doc_lens=(12, 0, 8))
    assert "-docs12+0+8-" in zero.case_id
    pairs = make_case(seq_len=20, kv_seq_len=27, documents=4, doc_lengths="explicit", doc_lens=(6, 0, 9, 5),
                      doc_kv_lens=(10, 3, 9, 5))
    assert pairs.case_id == "cpu-fp32-b1-s20-kv27-h4-kv4-d32-full-docs6of10+0of3+9+5-fwd"
    shared = make_case(seq_len=20, kv_seq_len=31, documents=3, causal=True)
    assert shared.case_id == "cpu-fp32-b1-s20-kv31-h4-kv4-d32-causal-doc3-fwd"
    short = make_case(seq_len=8, kv_seq_len=24, batch=3, kv_lengths="explicit", kv_lens=(4, 0, 24))
    assert "-kvlens4+0+24-" in short.case_id
    assert short.seed != make_case(seq_len=8, kv_seq_len=24, batch=3, kv_lengths="explicit", kv_lens=(4, 1, 24)).seed


def test_a_long_explicit_list_is_named_by_its_count_and_a_checksum_so_ids_stay_file_names() -> None:
    """A serving batch of 64 decodes: 64 cache lengths in the id would pass the 255 bytes of a file name (--trace
    writes traces/<case_id>-<backend>.json). Two such batches still get two ids, and two seeds."""
    lens = tuple(range(1000, 1064))
    one = make_case(seq_len=1, kv_seq_len=2000, batch=64, kv_lengths="explicit", kv_lens=lens)
    other = make_case(seq_len=1, kv_seq_len=2000, batch=64, kv_lengths="explicit", kv_lens=lens[::-1])
    assert "-kvlens64x" in one.case_id and len(one.case_id) < 100
    assert one.case_id != other.case_id and one.seed != other.seed


def test_records_carry_the_prefix_and_read_back_as_the_same_case() -> None:
    import json

    from attnbench.records.record import case_of

    case = make_case(seq_len=20, kv_seq_len=27, documents=4, doc_lengths="explicit", doc_lens=(6, 0, 9, 5),
                     doc_kv_lens=(10, 3, 9, 5), causal=True)
    stored = json.loads(json.dumps(record_of(case).to_dict()))
    assert stored["doc_kv_lens"] == [10, 3, 9, 5] and stored["doc_lens"] == [6, 0, 9, 5]
    assert case_of(Record(**stored)) == case
    assert "doc_kv_lens" not in record_of(make_case(seq_len=20, documents=3)).to_dict()
