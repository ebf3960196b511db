"""The `sdpa-varlen` adapter against a stand-in varlen_attn with torch 2.13's documented semantics.

Written from varlen_attn's docstring and code (torch/nn/attention/varlen.py, torch 2.13) and FlashAttention 2's
varlen rules, not from attnbench.core.workload: packed (T, H, D) tokens; sequence i's queries are
query[cu_seq_q[i]:cu_seq_q[i+1]] and its keys key[cu_seq_k[i]:cu_seq_k[i+1]], or with block_table the first
seqused_k[i] tokens of its pages (pages, page_size, H, D) read in table order; causal is window_size == (-1, 0);
query r of a sequence with sq queries and sk keys keeps keys in [r + sk - sq - left, r + sk - sq + right]
(-1: unbounded); fewer KV heads need enable_gqa; offsets and tables are int32; fp16/bf16 only.
"""

from __future__ import annotations

import importlib
import inspect

import pytest
import torch

import attnbench.backends.packing as packing
import attnbench.backends.sdpa_varlen as adapter
from attnbench.backends.conformance import check_backend
from attnbench.backends.sdpa_varlen import SdpaVarlen, varlen_window
from attnbench.core import workload
from tests.helpers import Measured, Standin, band_keep, make_case, measure_one, on_cpu_too


def refuse_varlen_inputs(query, key, cu_seq_q, cu_seq_k, enable_gqa, seqused_k,
                         block_table) -> None:  # type: ignore[no-untyped-def]
    """varlen_attn's refusals before any arithmetic, and the int32 index tensors it reads as such."""
    if query.dtype not in (torch.float16, torch.bfloat16):
        raise RuntimeError("FlashAttention only support fp16 and bf16 data type")
    for t in (cu_seq_q, cu_seq_k, seqused_k, block_table):
        if t is not None and t.dtype != torch.int32:
            raise TypeError("cu_seqlens and block_table must have dtype int32")  # our bug, never a refusal
    if block_table is not None and seqused_k is None:
        raise TypeError("block_table requires seqused_k")
    hk = key.size(2) if block_table is not None else key.size(1)
    if not enable_gqa and query.size(1) != hk:
        raise ValueError("Expect query and key/value to have the same number of heads")


def sequence_kv(key, value, cu_seq_k, seqused_k, block_table, i):  # type: ignore[no-untyped-def]
    """Sequence i's keys and values: its pages of the pool (block_table), or its packed span cut to seqused_k."""
    if block_table is not None:
        n, size = int(seqused_k[i]), key.shape[1]
        pages = block_table[i, : -(-n // size)].tolist()
        k = torch.cat([key[p] for p in pages] or [key[0, :0]])[:n]  # seqused_k 0: no key
        v = torch.cat([value[p] for p in pages] or [value[0, :0]])[:n]
        return k, v
    ck = cu_seq_k.tolist()
    k, v = key[ck[i]:ck[i + 1]], value[ck[i]:ck[i + 1]]
    if seqused_k is not None:
        k, v = k[: int(seqused_k[i])], v[: int(seqused_k[i])]
    return k, v


def standin_varlen_attn(calls: list[dict] | None = None):  # type: ignore[no-untyped-def]
    def varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None,
                    window_size=(-1, -1), enable_gqa=False, seqused_k=None, block_table=None,
                    num_splits=None):  # type: ignore[no-untyped-def]
        if calls is not None:
            calls.append({"window_size": window_size, "enable_gqa": enable_gqa, "paged": block_table is not None})
        refuse_varlen_inputs(query, key, cu_seq_q, cu_seq_k, enable_gqa, seqused_k, block_table)
        hq = query.size(1)
        hk = key.size(2) if block_table is not None else key.size(1)
        left, right = window_size  # (-1, 0) is causal; a negative side is unbounded
        scale_ = query.shape[-1] ** -0.5 if scale is None else scale
        cq = cu_seq_q.tolist()
        outs = []
        for i in range(len(cq) - 1):
            q = query[cq[i]:cq[i + 1]]
            k, v = sequence_kv(key, value, cu_seq_k, seqused_k, block_table, i)
            sq, sk = q.shape[0], k.shape[0]
            if sq > max_q or sk > max_k:
                raise AssertionError("max_q/max_k smaller than a sequence: the kernel would skip rows")
            keep, _, _ = band_keep(sq, sk, left if left >= 0 else None, right if right >= 0 else None)
            kh = k.float().repeat_interleave(hq // hk, dim=1)
            vh = v.float().repeat_interleave(hq // hk, dim=1)
            s = torch.einsum("qhd,khd->hqk", q.float(), kh) * scale_
            p = torch.nan_to_num(s.masked_fill(~keep, float("-inf")).softmax(-1), nan=0.0)
            outs.append(torch.einsum("hqk,khd->qhd", p, vh).to(query.dtype))
        return torch.cat(outs)

    return varlen_attn


def install(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """The stand-in varlen_attn in place of torch's, and the adapter allowed onto the CPU; returns its calls."""
    calls: list[dict] = []
    module = importlib.import_module("torch.nn.attention.varlen")
    monkeypatch.setattr(module, "varlen_attn", standin_varlen_attn(calls))
    on_cpu_too(monkeypatch, SdpaVarlen)
    return calls


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    return install(monkeypatch)


def case(**overrides):  # type: ignore[no-untyped-def]
    fields = dict(dtype="bfloat16", seq_len=48, heads=4, kv_heads=4, head_dim=16, causal=True)
    fields.update(overrides)
    return make_case(**fields)


CASES = {
    "dense-causal": case(),
    "dense-batch-prefill-with-cache": case(batch=2, seq_len=12, kv_seq_len=40, heads=6, kv_heads=2),
    "documents": case(documents=3),
    "documents-random-window-gqa": case(documents=5, doc_lengths="random", window=6, heads=4, kv_heads=2),
    "documents-two-sided": case(causal=False, window=5, documents=4, doc_lengths="random", dtype="float16"),
    "documents-full-bwd": case(causal=False, documents=3, doc_lengths="random", mode="fwd_bwd"),
    "documents-causal-bwd": case(documents=4, batch=2, mode="bwd"),
    "ragged-kv": case(batch=3, seq_len=8, kv_seq_len=80, kv_lengths="random", heads=4, kv_heads=1),
    "ragged-decode-window": case(batch=4, seq_len=1, kv_seq_len=80, kv_lengths="random", window=9),
    "ragged-kv-bwd": case(batch=2, seq_len=6, kv_seq_len=50, kv_lengths="random", mode="fwd_bwd"),
    "paged-256": case(batch=2, seq_len=4, kv_seq_len=600, kv_lengths="random", page_size=256, heads=2, kv_heads=1),
    "paged-256-window-decode": case(batch=3, seq_len=1, kv_seq_len=700, kv_lengths="random", page_size=256,
                                    window=100, heads=2, kv_heads=2),
    # zero-length sequences, cu_seq_k != cu_seq_q, caches shorter than the queries (their first rows output zeros)
    "zero-length-documents": case(documents=4, doc_lengths="explicit", doc_lens=(0, 30, 0, 18)),
    "documents-prefix-bwd": case(kv_seq_len=80, documents=3, mode="fwd_bwd"),
    "documents-prefix-pairs": case(kv_seq_len=50, documents=4, doc_lengths="explicit", doc_lens=(20, 0, 16, 12),
                                   doc_kv_lens=(24, 6, 8, 12), window=5),
    "short-caches": case(batch=3, seq_len=8, kv_seq_len=24, kv_lengths="explicit", kv_lens=(4, 0, 24)),
    "short-caches-paged": case(batch=3, seq_len=8, kv_seq_len=600, kv_lengths="explicit", kv_lens=(5, 0, 513),
                               page_size=256),
}


def check(measured: Measured) -> None:
    """The gradients are checked where the case has them; the last call is paged and GQA exactly as the case is."""
    c, last = measured.case, measured.recorded[-1]
    assert measured.record.grad_checked == c.needs_grad
    assert last["paged"] == (c.page_size is not None)
    assert last["enable_gqa"] == (c.kv_heads != c.heads)
    assert isinstance(last["window_size"], tuple)  # varlen_attn compares it with a tuple


def test_window_spelling() -> None:
    assert varlen_window(case()) == (-1, 0)
    assert varlen_window(case(causal=False)) == (-1, -1)
    assert varlen_window(case(window=7)) == (7, 0)
    assert varlen_window(case(causal=False, window=7)) == (7, 7)


def test_varlen_sequences_are_the_shared_structures() -> None:
    docs = case(batch=2, documents=5, doc_lengths="random")
    seqs = packing.varlen(docs)
    assert seqs.cu_q == seqs.cu_k == workload.cu_seqlens(docs)
    assert seqs.max_q == seqs.max_k == max(docs.doc_lens) and seqs.sequences == 10
    ragged = case(batch=3, seq_len=4, kv_seq_len=30, kv_lengths="random")
    seqs = packing.varlen(ragged)
    assert seqs.cu_q == (0, 4, 8, 12)
    assert [b - a for a, b in zip(seqs.cu_k, seqs.cu_k[1:], strict=False)] == list(ragged.kv_lens)
    assert seqs.max_k == max(ragged.kv_lens)


def test_packed_keys_hold_only_each_requests_own() -> None:
    c = case(batch=2, seq_len=2, kv_seq_len=9, kv_lengths="random", heads=1, kv_heads=1, head_dim=1)
    k = torch.arange(2 * 9, dtype=torch.float32).reshape(2, 1, 9, 1)
    packed = packing.pack_kv(k, c)
    expected = [*range(c.kv_lens[0]), *range(9, 9 + c.kv_lens[1])]
    assert packed.flatten().tolist() == expected


def test_kernel_field(standin) -> None:
    record = measure_one(CASES["documents-random-window-gqa"], SdpaVarlen())
    assert record.kernel.endswith("varlen_attn(window_size=(6, 0), 5 sequences, native GQA 4/2)")
    record = measure_one(CASES["paged-256"], SdpaVarlen())
    assert "block_table over pages of 256" in record.kernel


# ---- the stand-in catches a wrong mapping -------------------------------------------------------------------
def _wrong_varlen(kind: str):  # type: ignore[no-untyped-def]
    real = packing.varlen

    def wrong(c):  # type: ignore[no-untyped-def]
        s = real(c)
        if kind == "document-off-by-one":
            cu = (s.cu_q[0], s.cu_q[1] + 1, *s.cu_q[2:])
            return packing.Varlen(cu, cu, s.max_q + 1, s.max_k + 1, s.kv_lens)
        if kind == "keys-as-queries":  # cu_seq_k built from the query offsets
            return packing.Varlen(s.cu_q, s.cu_q, s.max_q, s.max_q, s.kv_lens)
        if kind == "seqused-plus-one":
            return packing.Varlen(s.cu_q, s.cu_k, s.max_q, s.max_k + 1, tuple(n + 1 for n in s.kv_lens))
        raise AssertionError(kind)

    return wrong


SABOTAGES = {
    "document-boundary-off-by-one": (lambda mp: mp.setattr(packing, "varlen", _wrong_varlen("document-off-by-one")),
                                     CASES["documents"]),
    "cu-seq-k-from-queries": (lambda mp: mp.setattr(packing, "varlen", _wrong_varlen("keys-as-queries")),
                              case(batch=2, seq_len=8, kv_seq_len=40, kv_lengths="random")),
    "seqused-k-one-too-many": (lambda mp: mp.setattr(packing, "varlen", _wrong_varlen("seqused-plus-one")),
                               CASES["paged-256"]),
    "block-table-rows-swapped": (lambda mp: mp.setattr(  # each request reads another request's pages
        packing, "block_table", lambda layout, device, _real=packing.block_table: _real(layout, device).flip(0)),
        CASES["paged-256"]),
    "layout-not-transposed": (lambda mp: mp.setattr(packing, "pack_q", lambda t: t.reshape(-1, t.shape[1], t.shape[3])),
                              case(seq_len=8, heads=8, kv_heads=8, documents=2)),
    "window-as-causal": (lambda mp: mp.setattr(adapter, "varlen_window", lambda c: (-1, 0)),
                         CASES["documents-random-window-gqa"]),
}

STANDIN = Standin(name="sdpa-varlen", install=install, backends=(SdpaVarlen,), cases=CASES, sabotages=SABOTAGES,
                  check=check)


# ---- reasons and the installed signature ----------------------------------------------------------------------
@pytest.mark.parametrize("c, words", [
    (case(dtype="float32"), "float32 is not supported (varlen_attn runs FlashAttention: float16 or bfloat16)"),
    (case(softcap=2.0), "varlen_attn has no soft-capping"),
    (case(alibi=True), "varlen_attn has no ALiBi bias"),
    (case(documents=3, seq_len=512, page_size=256), "documents inside a paged cache would need a document mask"),
    (case(head_dim_v=8), "no head_dim_v"),
    (case(batch=2, seq_len=1, kv_seq_len=64, page_size=16), "multiple of 256 tokens (page_size 16)"),
    (case(batch=2, seq_len=4, kv_seq_len=600, page_size=256, mode="fwd_bwd"), "inference-only: no backward"),
])
def test_reasons(c, words: str) -> None:
    reason = SdpaVarlen().unsupported(c)
    assert reason is not None and words in reason


def test_paged_is_skipped_where_the_signature_has_no_block_table(monkeypatch: pytest.MonkeyPatch) -> None:
    def varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None,
                    window_size=(-1, -1), k_cache=None, v_cache=None, cache_seqlens=None, cache_batch_idx=None,
                    page_table=None, seqused_k=None):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    monkeypatch.setattr(importlib.import_module("torch.nn.attention.varlen"), "varlen_attn", varlen_attn)
    reason = SdpaVarlen().unsupported(CASES["paged-256"])
    assert reason.startswith("this torch's varlen_attn has no block_table")
    assert check_backend(SdpaVarlen()).state == "ok"  # its documents and ragged batches still run


def test_gqa_without_enable_gqa_in_the_signature_passes_fewer_heads_natively(monkeypatch: pytest.MonkeyPatch) -> None:
    inner = standin_varlen_attn()

    def varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None,
                    window_size=(-1, -1), seqused_k=None):  # type: ignore[no-untyped-def]
        return inner(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, scale=scale, window_size=window_size,
                     enable_gqa=True, seqused_k=seqused_k)

    monkeypatch.setattr(importlib.import_module("torch.nn.attention.varlen"), "varlen_attn", varlen_attn)
    on_cpu_too(monkeypatch, SdpaVarlen)
    record = measure_one(CASES["documents-random-window-gqa"], SdpaVarlen())
    assert record.status == "ok", record.reason


def test_installed_torch_signature() -> None:
    from torch.nn.attention import varlen

    params = inspect.signature(varlen.varlen_attn).parameters
    assert list(params)[:7] == ["query", "key", "value", "cu_seq_q", "cu_seq_k", "max_q", "max_k"]
    conformance = check_backend(SdpaVarlen())
    assert conformance.state == "ok", conformance.summary
    assert {"enable_gqa", "seqused_k", "block_table"} <= set(adapter.varlen_parameters())


def test_cpu_is_not_applicable_with_the_real_function() -> None:
    assert SdpaVarlen().availability("cpu") == (
        "needs CUDA (varlen_attn runs PyTorch's CUDA FlashAttention; no CPU kernel)")
