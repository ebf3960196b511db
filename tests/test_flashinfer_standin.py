"""The FlashInfer adapter against a stand-in `flashinfer` module that implements FlashInfer's documented semantics.

The stand-in is written from FlashInfer's docstrings and kernels (flashinfer-python 0.7.4: prefill.py, decode.py,
include/flashinfer/attention/variants.cuh), not from attnbench.core.workload: per request, queries are the last qo_len
of kv_len positions; causal masks kv_idx + qo_len > kv_len + qo_idx; window_left keeps kv_idx + qo_len + window_left >=
kv_len + qo_idx; logits_soft_cap is c·tanh(s·sm_scale/c); request b's keys are its pages
kv_indices[kv_indptr[b]:kv_indptr[b+1]] read in order, (pages - 1)·page_size + kv_last_page_len[b] tokens; a paged
cache is a (k, v) tuple in NHD (pages, page_size, H, D) or HND (pages, H, page_size, D); index tensors are int32;
plan's q_data_type must be run's query dtype, and its kv_data_type (when given) the cache's; an FP8 cache's k_scale
multiplies sm_scale and v_scale the output, after the kernel, in the output dtype (decode.py / prefill.py run());
pos_encoding_mode="ALIBI" adds slope_h·(kv_idx − qo_idx) to the
scaled logits with FlashInfer's own slopes (utils.get_alibi_slopes) and, with a soft-cap, scales again before the
tanh (variants.cuh). Every page a request does not own, and the tail of its last page,
holds attnbench.core.workload.JUNK, so reading one token too many or a wrong page is loud.
mla.BatchMLAPagedAttentionWrapper (absorbed MLA; mla/_batch_mla/_wrapper.py, include/flashinfer/attention/mla.cuh):
plan takes qo_indptr, the CSR page table kv_indptr/kv_indices, kv_len_arr (each request's length), num_heads,
head_dim_ckv, head_dim_kpe, page_size, causal, sm_scale and the dtypes; run(q_nope (tokens, H, ckv), q_pe (tokens,
H, kpe), ckv_cache (pages, page_size, ckv), kpe_cache (pages, page_size, kpe)) scores (q_nope·ckv + q_pe·kpe)·sm_scale
over request b's first kv_len_arr[b] tokens of its pages, causal masks kv_idx + qo_len > kv_len + q_idx, a row with
nothing left outputs zeros, and the output is P·ckv (tokens, H, ckv).
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

import attnbench.backends.flashinfer as fi_adapter
import attnbench.backends.packing as packing
from attnbench.backends.conformance import check_backend
from attnbench.backends.flashinfer import FlashInferBackend, route
from attnbench.backends.registry import default_registry
from attnbench.core import workload
from attnbench.run.measure import Settings, measure
from attnbench.run.recording import RunInfo
from attnbench.timing.timers import TimingSettings
from attnbench.verify.inputs import CaseData
from tests.helpers import (
    Measured,
    Phases,
    PhaseTimer,
    Standin,
    make_case,
    measure_one,
    on_cpu_too,
)


def flashinfer_alibi_slopes(n: int) -> torch.Tensor:
    """FlashInfer's get_alibi_slopes(n): 2^(-8i/m) for i in 1..m (m the power of two <= n), then 2^(-4i/m) for odd i."""
    import math

    m = 2 ** math.floor(math.log2(n))
    slopes = [2.0 ** (-8.0 * i / m) for i in range(1, m + 1)]
    slopes += [2.0 ** (-4.0 * i / m) for i in range(1, 2 * (n - m), 2)]
    return torch.tensor(slopes)


def attend(q, k, v, causal, window_left, cap, scale, alibi=False, k_scale=None, v_scale=None):  # type: ignore[no-untyped-def]
    """One request: q (qo_len, Hq, D), k (kv_len, Hkv, D), v (kv_len, Hkv, Dv) → (qo_len, Hq, Dv)."""
    if k_scale is not None:
        scale = scale * k_scale  # run(): sm_scale *= k_scale
    out = _attend(q, k, v, causal, window_left, cap, scale, alibi)
    return out if v_scale is None else out * v_scale  # out *= v_scale, in the output dtype


def _attend(q, k, v, causal, window_left, cap, scale, alibi):  # type: ignore[no-untyped-def]
    qo_len, hq, _ = q.shape
    kv_len, hkv, _ = k.shape
    refuse_short_causal(qo_len, kv_len, causal)
    if hq % hkv:
        raise ValueError("num_qo_heads must be a multiple of num_kv_heads")
    qi = torch.arange(qo_len)[:, None]
    kj = torch.arange(kv_len)[None, :]
    keep = torch.ones(qo_len, kv_len, dtype=torch.bool)
    if causal:
        keep &= kj + qo_len <= kv_len + qi
    if window_left >= 0:
        keep &= kj + qo_len + window_left >= kv_len + qi
    kh = k.float().repeat_interleave(hq // hkv, dim=1)
    vh = v.float().repeat_interleave(hq // hkv, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.float(), kh)
    if alibi:
        s = s * scale + flashinfer_alibi_slopes(hq)[:, None, None] * (kj - qi).float()
        if cap:
            s = cap * torch.tanh(s * scale / cap)
    else:
        s = s * scale
        if cap:
            s = cap * torch.tanh(s / cap)
    p = torch.nan_to_num(s.masked_fill(~keep, float("-inf")).softmax(-1), nan=0.0)
    return torch.einsum("hqk,khd->qhd", p, vh).to(q.dtype)


def refuse_short_causal(qo_len: int, kv_len: int, causal: bool) -> None:
    """FlashInfer's single prefill raises where a causal request has keys but fewer than its queries
    (prefill.cuh); its batch and MLA kernels give wrong rows there (uint32 tile bounds wrap) and its tests skip it:
    the stand-in raises for all, so an adapter that maps the case fails loudly."""
    if causal and 0 < kv_len < qo_len:
        raise ValueError(f"kv_len must be greater than or equal to qo_len, got {kv_len} and {qo_len}")


def need_int32(*tensors) -> None:  # type: ignore[no-untyped-def]
    for t in tensors:
        if t.dtype != torch.int32:
            raise TypeError(f"index tensors must be int32, got {t.dtype}")  # not a refusal: our bug


class Planned:
    """What every wrapper's plan() keeps: the mask arguments and the dtypes run() must match."""

    def __init__(self, log: list[tuple[str, str]], phases: Phases | None, kind: str) -> None:
        self.log, self.phases, self.kind = log, phases, kind
        self.args: dict | None = None

    def note(self, what: str) -> None:
        self.log.append((f"{self.kind}.{what}", self.phases.phase if self.phases else "?"))

    def mask(self, causal=False, window_left=-1, logits_soft_cap=None, sm_scale=None, q_data_type="float16",
             kv_data_type=None, head_dim=None, pos_encoding_mode="NONE", **unused):  # type: ignore[no-untyped-def]
        self.args = dict(causal=causal, window_left=window_left, cap=logits_soft_cap,
                         scale=head_dim ** -0.5 if sm_scale is None else sm_scale, q_dtype=q_data_type,
                         alibi=pos_encoding_mode == "ALIBI")
        self.kv_dtype = kv_data_type

    def check_run(self, q: torch.Tensor, k: torch.Tensor | None = None, k_scale=None, v_scale=None) -> dict:  # type: ignore[no-untyped-def]
        self.note("run")
        if self.args is None:
            raise RuntimeError("plan() must be called before run()")
        if q.dtype != self.args["q_dtype"]:
            raise ValueError(f"The dtype of q {q.dtype} does not match the q_data_type {self.args['q_dtype']} "
                             "specified in plan function.")
        if k is not None and self.kv_dtype is not None and k.dtype != self.kv_dtype:
            raise TypeError(f"planned kv_data_type {self.kv_dtype}, ran {k.dtype}")  # our bug: the kernel would misread
        for scale in (k_scale, v_scale):
            if scale is not None and not isinstance(scale, float):
                raise TypeError(f"k_scale / v_scale are floats, got {type(scale).__name__}")
        return {**self.args, "k_scale": k_scale, "v_scale": v_scale}


def paged_rows(pool: torch.Tensor, kv_layout: str, pages: list[int], last: int) -> torch.Tensor:
    """A request's keys from its pages, in order: (tokens, H, D)."""
    if kv_layout == "HND":
        chunks = [pool[p].transpose(0, 1) for p in pages]
        page_size = pool.shape[2]
    else:
        chunks = [pool[p] for p in pages]
        page_size = pool.shape[1]
    return torch.cat(chunks)[: (len(pages) - 1) * page_size + last]


class Logged:
    """A stand-in class that notes its calls: make_flashinfer subclasses it with the stand-in's `log` and `phases`."""

    log: list[tuple[str, str]]
    phases: Phases | None

    def phase(self) -> str:
        return self.phases.phase if self.phases else "?"


def single_prefill(q, k, v, causal, kv_layout, pos_encoding_mode, sm_scale, window_left, logits_soft_cap, k_scale,
                  v_scale):  # type: ignore[no-untyped-def]
    """single_prefill_with_kv_cache's arithmetic (the stand-in's own signature is the library's)."""
    if q.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError("Unsupported dtype")
    if kv_layout == "HND":
        k, v = k.transpose(0, 1), v.transpose(0, 1)
    scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
    return attend(q, k, v, causal, window_left, logits_soft_cap, scale, pos_encoding_mode == "ALIBI", k_scale,
                  v_scale)


class RaggedWrapper(Logged):
    def __init__(self, float_workspace_buffer, kv_layout="NHD", **kw):  # type: ignore[no-untyped-def]
        self.planned, self.kv_layout = Planned(self.log, self.phases, "ragged"), kv_layout

    def plan(self, qo_indptr, kv_indptr, num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo=None,
             **kw):  # type: ignore[no-untyped-def]
        self.planned.note("plan")
        need_int32(qo_indptr, kv_indptr)
        self.qo, self.kv = qo_indptr.tolist(), kv_indptr.tolist()
        self.planned.mask(head_dim=head_dim_qk, **kw)

    def run(self, q, k, v, *args, k_scale=None, v_scale=None, **kw):  # type: ignore[no-untyped-def]
        a = self.planned.check_run(q, k, k_scale, v_scale)
        outs = [attend(q[self.qo[b]:self.qo[b + 1]], k[self.kv[b]:self.kv[b + 1]], v[self.kv[b]:self.kv[b + 1]],
                       a["causal"], a["window_left"], a["cap"], a["scale"], a["alibi"], k_scale, v_scale)
                for b in range(len(self.qo) - 1)]
        return torch.cat(outs)


class PagedWrapper(Logged):
    kind = "paged"

    def __init__(self, float_workspace_buffer, kv_layout="NHD", **kw):  # type: ignore[no-untyped-def]
        self.planned, self.kv_layout = Planned(self.log, self.phases, self.kind), kv_layout

    def keep_pages(self, indptr, indices, last_page_len, page_size):  # type: ignore[no-untyped-def]
        need_int32(indptr, indices, last_page_len)
        self.indptr, self.indices, self.last = indptr.tolist(), indices.tolist(), last_page_len.tolist()
        self.page_size = page_size

    def request_kv(self, cache, b):  # type: ignore[no-untyped-def]
        k_pool, v_pool = cache
        size = k_pool.shape[2] if self.kv_layout == "HND" else k_pool.shape[1]
        if size != self.page_size:
            raise ValueError(f"page_size {self.page_size} does not match the cache's {size}")
        pages = self.indices[self.indptr[b]:self.indptr[b + 1]]
        return (paged_rows(k_pool, self.kv_layout, pages, self.last[b]),
                paged_rows(v_pool, self.kv_layout, pages, self.last[b]))


class PagedPrefillWrapper(PagedWrapper):
    kind = "paged-prefill"

    def plan(self, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, num_qo_heads,
             num_kv_heads, head_dim_qk, page_size, head_dim_vo=None, **kw):  # type: ignore[no-untyped-def]
        self.planned.note("plan")
        need_int32(qo_indptr)
        self.qo = qo_indptr.tolist()
        self.keep_pages(paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, page_size)
        self.planned.mask(head_dim=head_dim_qk, **kw)

    def run(self, q, paged_kv_cache, *args, k_scale=None, v_scale=None, **kw):  # type: ignore[no-untyped-def]
        a = self.planned.check_run(q, paged_kv_cache[0], k_scale, v_scale)
        outs = []
        for b in range(len(self.qo) - 1):
            k, v = self.request_kv(paged_kv_cache, b)
            outs.append(attend(q[self.qo[b]:self.qo[b + 1]], k, v, a["causal"], a["window_left"], a["cap"],
                               a["scale"], a["alibi"], k_scale, v_scale))
        return torch.cat(outs)


class PagedDecodeWrapper(PagedWrapper):
    kind = "decode"

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
             *deprecated, **kw):  # type: ignore[no-untyped-def]
        self.planned.note("plan")
        if deprecated:
            raise AssertionError("the adapter passed plan's options by position")
        self.keep_pages(indptr, indices, last_page_len, page_size)
        self.planned.mask(head_dim=head_dim, **kw)

    def run(self, q, paged_kv_cache, *args, k_scale=None, v_scale=None, **kw):  # type: ignore[no-untyped-def]
        a = self.planned.check_run(q, paged_kv_cache[0], k_scale, v_scale)
        outs = []
        for b in range(len(self.indptr) - 1):
            k, v = self.request_kv(paged_kv_cache, b)
            outs.append(attend(q[b:b + 1], k, v, False, a["window_left"], a["cap"], a["scale"], a["alibi"],
                               k_scale, v_scale))
        return torch.cat(outs)  # (B, H, D)


class MLAWrapper(Logged):
    def __init__(self, float_workspace_buffer, use_cuda_graph=False, **kw):  # type: ignore[no-untyped-def]
        self.args: dict | None = None

    def plan(self, qo_indptr=None, kv_indptr=None, kv_indices=None, kv_len_arr=None, num_heads=None,
             head_dim_ckv=None, head_dim_kpe=None, page_size=None, causal=None, sm_scale=None, q_data_type=None,
             kv_data_type=None, use_profiler=False, **kw):  # type: ignore[no-untyped-def]
        self.log.append(("mla.plan", self.phase()))
        need_int32(qo_indptr, kv_indptr, kv_indices, kv_len_arr)
        self.args = dict(qo=qo_indptr.tolist(), indptr=kv_indptr.tolist(), indices=kv_indices.tolist(),
                         lens=kv_len_arr.tolist(), heads=num_heads, widths=(head_dim_ckv, head_dim_kpe),
                         page=page_size, causal=causal, scale=sm_scale, q_dtype=q_data_type)

    def check_run(self, q_nope, q_pe, ckv_cache, kpe_cache) -> dict:  # type: ignore[no-untyped-def]
        """run()'s refusals: before plan(), a dtype or the split widths other than planned, a wrong cache layout."""
        a = self.args
        if a is None:
            raise RuntimeError("plan() must be called before run()")
        if q_nope.dtype != a["q_dtype"]:
            raise ValueError(f"q_nope.dtype={q_nope.dtype} does not match the planned q_data_type")
        if (q_nope.shape[-1], q_pe.shape[-1]) != a["widths"] or (ckv_cache.shape[-1], kpe_cache.shape[-1]) != a[
                "widths"]:
            raise ValueError("split query last dimensions do not match planned widths.")
        if ckv_cache.dim() != 3 or ckv_cache.shape[1] != a["page"] or q_nope.shape[1] != a["heads"]:
            raise ValueError("ckv_cache must be (pages, page_size, head_dim_ckv) and q (tokens, num_heads, ...)")
        return a

    def run(self, q_nope=None, q_pe=None, ckv_cache=None, kpe_cache=None, out=None, lse=None,
            return_lse=False, **kw):  # type: ignore[no-untyped-def]
        self.log.append(("mla.run", self.phase()))
        a = self.check_run(q_nope, q_pe, ckv_cache, kpe_cache)
        outs = []
        for b in range(len(a["qo"]) - 1):
            qn, qp = (t[a["qo"][b]:a["qo"][b + 1]].float() for t in (q_nope, q_pe))
            pages, n = a["indices"][a["indptr"][b]:a["indptr"][b + 1]], a["lens"][b]
            ckv, kpe = (torch.cat([t[p] for p in pages])[:n].float() for t in (ckv_cache, kpe_cache))
            s = (torch.einsum("qhd,kd->hqk", qn, ckv) + torch.einsum("qhd,kd->hqk", qp, kpe)) * a["scale"]
            qo_len = qn.shape[0]
            refuse_short_causal(qo_len, n, a["causal"])
            if a["causal"]:
                q_idx, kv_idx = torch.arange(qo_len)[:, None], torch.arange(n)[None, :]
                s = s.masked_fill(kv_idx + qo_len > n + q_idx, float("-inf"))
            p_ = torch.nan_to_num(s.softmax(-1), nan=0.0)
            outs.append(torch.einsum("hqk,kd->qhd", p_, ckv).to(q_nope.dtype))
        return torch.cat(outs)


def make_flashinfer(log: list[tuple[str, str]], phases: Phases | None = None) -> types.ModuleType:
    """The stand-in `flashinfer` module; every call it takes is noted in `log` with the phase it came in."""
    module = types.ModuleType("flashinfer")
    bound = {"log": log, "phases": phases}

    def single_prefill_with_kv_cache(q, k, v, scale_q=None, scale_k=None, scale_v=None, o_dtype=None,
                                     custom_mask=None, packed_custom_mask=None, causal=False, kv_layout="NHD",
                                     pos_encoding_mode="NONE", use_fp16_qk_reduction=False, sm_scale=None,
                                     window_left=-1, logits_soft_cap=None, k_scale=None, v_scale=None,
                                     **kw):  # type: ignore[no-untyped-def]
        log.append(("single", phases.phase if phases else "?"))
        return single_prefill(q, k, v, causal, kv_layout, pos_encoding_mode, sm_scale, window_left, logits_soft_cap,
                              k_scale, v_scale)

    mla = type("BatchMLAPagedAttentionWrapper", (MLAWrapper,), bound)
    module.mla = types.SimpleNamespace(BatchMLAPagedAttentionWrapper=mla)
    module.single_prefill_with_kv_cache = single_prefill_with_kv_cache
    module.BatchPrefillWithRaggedKVCacheWrapper = type("BatchPrefillWithRaggedKVCacheWrapper", (RaggedWrapper,), bound)
    module.BatchPrefillWithPagedKVCacheWrapper = type("BatchPrefillWithPagedKVCacheWrapper", (PagedPrefillWrapper,),
                                                      bound)
    module.BatchDecodeWithPagedKVCacheWrapper = type("BatchDecodeWithPagedKVCacheWrapper", (PagedDecodeWrapper,), bound)
    return module


def install(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Install the stand-in `flashinfer` and let the adapter run on CPU; returns the log of its calls."""
    log: list[tuple[str, str]] = []
    monkeypatch.setitem(sys.modules, "flashinfer", make_flashinfer(log))
    on_cpu_too(monkeypatch, FlashInferBackend)
    monkeypatch.setattr(fi_adapter, "WORKSPACE_BYTES", 1024)
    return log


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    return install(monkeypatch)


def case(**overrides):  # type: ignore[no-untyped-def]
    fields = dict(dtype="bfloat16", seq_len=48, heads=4, kv_heads=4, head_dim=16, causal=True)
    fields.update(overrides)
    return make_case(**fields)


CASES = {
    "single-causal": (case(), "single"),
    "single-full-gqa": (case(causal=False, heads=8, kv_heads=2), "single"),
    "single-window-prefill-with-cache": (case(window=5, seq_len=20, kv_seq_len=70, dtype="float16"), "single"),
    "single-softcap": (case(softcap=2.0), "single"),
    "single-head-dim-v": (case(head_dim_v=8, heads=4, kv_heads=2), "single"),
    "batch-dense": (case(batch=3, seq_len=12, kv_seq_len=40, heads=4, kv_heads=1), "ragged"),
    "documents": (case(documents=3), "ragged"),
    "documents-random-window": (case(documents=5, doc_lengths="random", window=6, heads=4, kv_heads=2), "ragged"),
    "documents-full": (case(causal=False, documents=4, doc_lengths="random"), "ragged"),
    "ragged-kv": (case(batch=3, seq_len=8, kv_seq_len=80, kv_lengths="random", heads=4, kv_heads=1), "ragged"),
    "ragged-kv-softcap-dv": (case(batch=2, seq_len=8, kv_seq_len=60, kv_lengths="random", softcap=3.0,
                                  head_dim_v=8), "ragged"),
    "paged-prefill": (case(batch=2, seq_len=8, kv_seq_len=80, kv_lengths="random", page_size=16), "paged-prefill"),
    "paged-prefill-window-gqa": (case(batch=3, seq_len=6, kv_seq_len=50, kv_lengths="random", page_size=7,
                                      window=9, heads=6, kv_heads=2), "paged-prefill"),
    "paged-prefill-dense-lengths": (case(batch=2, seq_len=8, kv_seq_len=48, page_size=16), "paged-prefill"),
    "decode": (case(batch=4, seq_len=1, kv_seq_len=80, kv_lengths="random", page_size=16), "decode"),
    "decode-window-softcap-gqa": (case(batch=4, seq_len=1, kv_seq_len=90, kv_lengths="random", page_size=5,
                                       window=9, softcap=4.0, heads=8, kv_heads=2), "decode"),
    "decode-two-sided-window": (case(batch=3, seq_len=1, kv_seq_len=64, kv_lengths="random", page_size=8,
                                     causal=False, window=7), "decode"),
    "paged-full-last-page": (case(batch=2, seq_len=4, kv_seq_len=32, page_size=16), "paged-prefill"),
    "decode-single-token-last-page": (case(batch=2, seq_len=1, kv_seq_len=33, page_size=16), "decode"),
    "alibi-single": (case(alibi=True, heads=6, kv_heads=3), "single"),
    "alibi-documents": (case(alibi=True, documents=3, doc_lengths="random"), "ragged"),
    "alibi-ragged-prefill-with-cache": (case(alibi=True, batch=2, seq_len=8, kv_seq_len=60, kv_lengths="random",
                                             window=20), "ragged"),
    "alibi-paged-prefill": (case(alibi=True, batch=2, seq_len=8, kv_seq_len=80, kv_lengths="random", page_size=16),
                            "paged-prefill"),
    "alibi-decode-full": (case(alibi=True, causal=False, batch=3, seq_len=1, kv_seq_len=64, kv_lengths="random",
                               page_size=8, heads=8, kv_heads=2), "decode"),
    "decode-page-of-one": (case(batch=2, seq_len=1, kv_seq_len=20, kv_lengths="random", page_size=1), "decode"),
    # zero-length documents, documents over a cached prefix (qo_indptr != kv_indptr), caches shorter than the queries
    "zero-length-documents": (case(documents=4, doc_lengths="explicit", doc_lens=(0, 30, 0, 18)), "ragged"),
    "documents-prefix": (case(kv_seq_len=80, documents=3, heads=4, kv_heads=2), "ragged"),
    "documents-prefix-pairs-window": (case(kv_seq_len=50, documents=4, doc_lengths="explicit",
                                           doc_lens=(20, 0, 16, 12), doc_kv_lens=(24, 6, 20, 0), window=5), "ragged"),
    "empty-cache-causal": (case(batch=3, seq_len=8, kv_seq_len=24, kv_lengths="explicit", kv_lens=(8, 0, 24)),
                           "ragged"),
    "short-caches-full": (case(causal=False, batch=3, seq_len=8, kv_seq_len=24, kv_lengths="explicit",
                               kv_lens=(4, 0, 24)), "ragged"),
}


def check(measured: Measured) -> None:
    """The case takes the route its table names and that entry point alone ran, with K/V's own heads; plan()'s time
    is its own part of the setup."""
    record, expected_route = measured.record, CASES[measured.name][1]
    assert route(measured.case) == expected_route
    assert record.kv_expanded is False  # native GQA
    called = {what.split(".")[0] for what, _ in measured.recorded}
    assert called == {expected_route}  # the entry point the route names is the one that ran
    if expected_route != "single":  # plan() is setup, outside the timed call, and its own part of it
        assert record.extra["plan_ms"] >= 0 and record.extra["setup_parts"]["plan"] == record.extra["plan_ms"]
    assert record.extra["setup_ms"] >= record.extra.get("plan_ms", 0)


@pytest.mark.parametrize("name", ["paged-prefill", "paged-prefill-window-gqa", "decode", "decode-window-softcap-gqa"])
def test_hnd_pages_give_the_same_answer(standin, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setattr(FlashInferBackend, "kv_layout", "HND")
    record = measure_one(CASES[name][0], FlashInferBackend())
    assert record.status == "ok", record.reason
    assert "HND pages of" in record.kernel


def test_kernel_field_names_the_entry_point_and_its_mask(standin) -> None:
    record = measure_one(CASES["decode-window-softcap-gqa"][0], FlashInferBackend())
    assert record.kernel.endswith("BatchDecodeWithPagedKVCacheWrapper(causal=True, window_left=9, "
                                  "logits_soft_cap=4, NHD pages of 5, native GQA 8/2)")
    record = measure_one(CASES["single-causal"][0], FlashInferBackend())
    assert record.kernel.endswith("single_prefill_with_kv_cache(causal=True, window_left=-1)")


@pytest.mark.parametrize("how", ["decode", "paged-prefill", "ragged"])
def test_plan_runs_in_prepare_and_only_run_is_timed(monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    phases, log = Phases(), []
    monkeypatch.setitem(sys.modules, "flashinfer", make_flashinfer(log, phases))
    on_cpu_too(monkeypatch, FlashInferBackend)
    monkeypatch.setattr(fi_adapter, "WORKSPACE_BYTES", 1024)
    monkeypatch.setattr(FlashInferBackend, "prepare", phases.during_prepare(FlashInferBackend.prepare))
    c = {"decode": CASES["decode"][0], "paged-prefill": CASES["paged-prefill"][0], "ragged": CASES["documents"][0]}[how]
    settings = TimingSettings(warmup_ms=0, budget_ms=0, min_samples=3, max_samples=3)
    record = measure(CaseData(c), FlashInferBackend(), PhaseTimer(phases), Settings(RunInfo("f", "t"), settings))
    assert record.status == "ok", record.reason
    plans = [phase for what, phase in log if what.endswith(".plan")]
    assert plans == ["prepare"]  # planned once, before anything is timed
    runs = [phase for what, phase in log if what.endswith(".run")]
    assert runs[0] == "prepare"  # the warm (JIT-compiling) call
    sampled_check = int(record.extra.get("check_sampled", False))  # the checked call may join the samples
    assert runs.count("timed") == 3 - sampled_check + record.extra["warmup_calls"]
    assert set(runs) <= {"prepare", "check", "timed", "after"}  # after: the profiled call (attnbench.run.profiled)
    assert record.extra["plan_ms"] >= 0 and record.extra["compile_s"] >= 0


# ---- the stand-in catches a wrong mapping -----------------------------------------------------------------
def _wrong_indices(kind: str):  # type: ignore[no-untyped-def]
    real = packing.flashinfer_page_indices

    def wrong(layout):  # type: ignore[no-untyped-def]
        indptr, indices, last = real(layout)
        if kind == "indptr":  # one request's pages counted into its neighbour's
            indptr = (indptr[0], indptr[1] + 1, *indptr[2:])
        elif kind == "last-modulo":  # kv_len % page_size: 0 where the last page is exactly full
            last = tuple(n % layout.page_size for n in layout.kv_lens)
        elif kind == "last-plus-one":
            last = tuple(n + 1 for n in last)
        elif kind == "table-not-shuffled":  # logical page p read from physical page p
            indices = tuple(range(len(indices)))
        return indptr, indices, last

    return wrong


def _wrong_window(real):  # type: ignore[no-untyped-def]
    def wrong(c):  # type: ignore[no-untyped-def]
        args = real(c)
        return {**args, "window_left": args["window_left"] - 1} if args["window_left"] > 0 else args
    return wrong


def _wrong_varlen(real):  # type: ignore[no-untyped-def]
    def wrong(c):  # type: ignore[no-untyped-def]
        seqs = real(c)
        cu = (seqs.cu_q[0], seqs.cu_q[1] + 1, *seqs.cu_q[2:])  # the first document one token too long
        return packing.Varlen(cu, cu, seqs.max_q + 1, seqs.max_k + 1, seqs.kv_lens)
    return wrong


# A full last page (kv_len a multiple of page_size) for the modulo bug: two requests of 32 keys at page 16.
FULL_LAST_PAGE = case(batch=2, seq_len=4, kv_seq_len=32, page_size=16)
SABOTAGES = {
    "indptr-shifted": (lambda mp: mp.setattr(packing, "flashinfer_page_indices", _wrong_indices("indptr")),
                       CASES["decode"][0]),
    "last-page-len-modulo": (lambda mp: mp.setattr(packing, "flashinfer_page_indices", _wrong_indices("last-modulo")),
                             FULL_LAST_PAGE),
    "last-page-len-plus-one": (lambda mp: mp.setattr(packing, "flashinfer_page_indices",
                                                     _wrong_indices("last-plus-one")), CASES["paged-prefill"][0]),
    "page-table-ignored": (lambda mp: mp.setattr(packing, "flashinfer_page_indices",
                                                 _wrong_indices("table-not-shuffled")), CASES["decode"][0]),
    "hnd-not-transposed": (lambda mp: (mp.setattr(FlashInferBackend, "kv_layout", "HND"),
                                       mp.setattr(packing, "nhd_to_hnd", lambda pool: pool)),
                           case(batch=2, seq_len=1, kv_seq_len=40, kv_lengths="random", page_size=4, heads=4,
                                kv_heads=4)),
    "window-off-by-one": (lambda mp: mp.setattr(fi_adapter, "window_arguments",
                                                _wrong_window(fi_adapter.window_arguments)),
                          CASES["documents-random-window"][0]),
    "document-boundary-off-by-one": (lambda mp: mp.setattr(packing, "varlen", _wrong_varlen(packing.varlen)),
                                     CASES["documents"][0]),
    "softcap-dropped": (
        lambda mp: mp.setattr(FlashInferBackend, "prepare", _without_softcap(FlashInferBackend.prepare)),
        case(softcap=0.5)),
}


def _without_softcap(prepare):  # type: ignore[no-untyped-def]
    from dataclasses import replace

    def wrong(self, c, q, k, v):  # type: ignore[no-untyped-def]
        return prepare(self, replace(c, softcap=None), q, k, v)
    return wrong

STANDIN = Standin(name="flashinfer", install=install, backends=(FlashInferBackend,),
                  cases={name: c for name, (c, _) in CASES.items()}, sabotages=SABOTAGES, check=check)


def test_the_full_last_page_case_has_one() -> None:
    """FULL_LAST_PAGE really has a request whose cache fills its last page (else the modulo sabotage proves nothing)."""
    _, _, last = packing.flashinfer_page_indices(workload.pages(FULL_LAST_PAGE))
    assert last == (16, 16)
    _, _, last = packing.flashinfer_page_indices(workload.pages(CASES["decode-single-token-last-page"][0]))
    assert last == (1, 1)


# ---- the page-table mapping, by hand ----------------------------------------------------------------------
def test_page_indices_by_hand_with_a_full_last_page_and_a_single_token_one() -> None:
    layout = workload.Pages(page_size=4, num_pages=8, table=((5, 2, -1), (0, 7, 3), (6, -1, -1)), kv_lens=(8, 9, 1))
    indptr, indices, last = packing.flashinfer_page_indices(layout)
    assert indptr == (0, 2, 5, 6)
    assert indices == (5, 2, 0, 7, 3, 6)
    assert last == (4, 1, 1)  # 8 tokens fill two pages exactly; 9 leave one token on the third; 1 is one token


def test_page_indices_agree_with_the_shared_table_for_every_request() -> None:
    c = case(batch=5, seq_len=2, kv_seq_len=70, kv_lengths="random", page_size=8)
    layout = workload.pages(c)
    indptr, indices, last = packing.flashinfer_page_indices(layout)
    for b, n in enumerate(c.kv_lens):
        pages = indices[indptr[b]:indptr[b + 1]]
        assert pages == layout.table[b][: len(pages)]
        assert (len(pages) - 1) * 8 + last[b] == n and 1 <= last[b] <= 8


def test_hnd_is_the_pool_with_heads_before_tokens() -> None:
    pool = torch.arange(3 * 4 * 2 * 5).reshape(3, 4, 2, 5)  # (pages, page_size, KVH, D)
    hnd = packing.nhd_to_hnd(pool)
    assert hnd.shape == (3, 2, 4, 5) and hnd.is_contiguous()
    assert torch.equal(hnd[1, 1, 3], pool[1, 3, 1])


# ---- reasons ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("c, words", [
    (case(dtype="float32"), "float32 is not supported (FlashInfer's attention takes float16 or bfloat16)"),
    (case(mode="fwd_bwd"), "FlashInfer's attention is forward-only (no backward kernel)"),
    (case(alibi=True, softcap=2.0), "applies sm_scale twice"),
    (case(alibi=True, heads=2, kv_heads=1, tp=4), "needs the whole model's slopes"),
    (case(alibi=True, causal=False), "FlashInfer's ALiBi bias is signed"),
    (case(causal=False, window=5), "FlashInfer has no right window bound (window_left only)"),
    (case(documents=3, batch=2, page_size=16), "documents inside a paged cache would need a document mask"),
    (case(causal=False, window=5, documents=3), "FlashInfer has no right window bound (window_left only)"),
    (case(batch=2, seq_len=1, kv_seq_len=64, page_size=16, head_dim_v=8), "paged decode takes one head_dim"),
    (case(batch=2, seq_len=1, kv_seq_len=64, page_size=16, kv_lengths="explicit", kv_lens=(0, 9)),
     "a request with an empty cache is not mapped"),
    # a causal sequence with keys but fewer than its queries, in every form that reaches FlashInfer
    (case(seq_len=48, kv_seq_len=20), "(48 queries over 20 keys)"),
    (case(batch=3, seq_len=8, kv_seq_len=24, kv_lengths="explicit", kv_lens=(4, 0, 24)), "(8 queries over 4 keys)"),
    (case(kv_seq_len=50, documents=4, doc_lengths="explicit", doc_lens=(20, 0, 16, 12), doc_kv_lens=(24, 6, 8, 12)),
     "(16 queries over 8 keys)"),
    (case(batch=2, seq_len=8, kv_seq_len=48, page_size=16, kv_lengths="explicit", kv_lens=(5, 30)),
     "(8 queries over 5 keys)"),
    (case(batch=2, seq_len=8, kv_seq_len=48, page_size=16, kv_lengths="explicit", kv_lens=(5, 30), head_dim=24,
          head_dim_v=16, kv_shared=True, kv_heads=1), "(8 queries over 5 keys)"),
])
def test_reasons(c, words: str) -> None:
    reason = FlashInferBackend().unsupported(c)
    assert reason is not None and words in reason


def test_availability_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # import raises ImportError
    assert FlashInferBackend().availability("cuda").startswith("flashinfer-python is not installed")
    monkeypatch.setitem(sys.modules, "flashinfer", make_flashinfer([]))
    assert FlashInferBackend().availability("cpu") == "needs CUDA (FlashInfer has no CPU kernels)"


def test_a_crashing_import_is_a_reason_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(name: str):  # type: ignore[no-untyped-def]
        raise RuntimeError("Found no NVIDIA driver on your system")

    monkeypatch.setattr(fi_adapter, "flashinfer_module", lambda: boom("flashinfer"))
    assert FlashInferBackend().availability("cuda") == (
        "flashinfer does not import here (RuntimeError: Found no NVIDIA driver on your system)")


def test_library_refusal_becomes_the_skip_reason() -> None:
    backend = FlashInferBackend()
    assert backend.skip_reason(ValueError("The dtype of q torch.float32 is not supported"), []) == (
        "flashinfer refused: The dtype of q torch.float32 is not supported")
    assert backend.skip_reason(RuntimeError("CUDA error: an illegal memory access was encountered"), []) is None
    assert backend.skip_reason(TypeError("index tensors must be int32"), []) is None


def test_registered_and_listed() -> None:
    assert "flashinfer" in default_registry().names()


# ---- conformance against flashinfer-python 0.7.4's real signatures ------------------------------------------
def test_calls_match_flashinfer_0_7_4(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    monkeypatch.setitem(sys.modules, "flashinfer", importlib.import_module("tests.signatures.flashinfer_0_7_4"))
    conformance = check_backend(FlashInferBackend())
    assert conformance.state == "ok", conformance.summary
    assert {v.function.split(".", 1)[1] for v in conformance.verdicts} == {
        "single_prefill_with_kv_cache", "BatchPrefillWithRaggedKVCacheWrapper",
        "BatchPrefillWithRaggedKVCacheWrapper.plan", "BatchPrefillWithRaggedKVCacheWrapper.run",
        "BatchPrefillWithPagedKVCacheWrapper", "BatchPrefillWithPagedKVCacheWrapper.plan",
        "BatchPrefillWithPagedKVCacheWrapper.run", "BatchDecodeWithPagedKVCacheWrapper",
        "BatchDecodeWithPagedKVCacheWrapper.plan", "BatchDecodeWithPagedKVCacheWrapper._plan_impl",
        "BatchDecodeWithPagedKVCacheWrapper.run", "mla.BatchMLAPagedAttentionWrapper",
        "mla.BatchMLAPagedAttentionWrapper.plan", "mla.BatchMLAPagedAttentionWrapper.run"}
    decode_plan = next(v for v in conformance.verdicts if v.function.endswith("Decode" "WithPagedKVCacheWrapper.plan"))
    assert any("goes to **kwargs" in note for note in decode_plan.notes)  # held against _plan_impl instead


def test_a_moved_plan_parameter_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    real = importlib.import_module("tests.signatures.flashinfer_0_7_4")
    fake = types.ModuleType("flashinfer")
    fake.__dict__.update({k: v for k, v in vars(real).items() if not k.startswith("__")})

    class BatchPrefillWithRaggedKVCacheWrapper(real.BatchPrefillWithRaggedKVCacheWrapper):
        def plan(self, qo_indptr, kv_indptr, num_kv_heads, num_qo_heads, head_dim_qk, head_dim_vo=None, causal=False,
                 window_left=-1, logits_soft_cap=None, sm_scale=None, q_data_type="float16", kv_data_type=None):
            raise NotImplementedError

    fake.BatchPrefillWithRaggedKVCacheWrapper = BatchPrefillWithRaggedKVCacheWrapper
    monkeypatch.setitem(sys.modules, "flashinfer", fake)
    conformance = check_backend(FlashInferBackend())
    assert conformance.state == "mismatch" and conformance.problem.parameter == "num_qo_heads"



@pytest.mark.parametrize("c", [case(alibi=True, causal=False), case(alibi=True, softcap=2.0),
                               case(alibi=True, heads=2, kv_heads=1, tp=4)], ids=["two-sided", "softcap", "tp"])
def test_the_alibi_refusals_are_real_differences(standin, monkeypatch: pytest.MonkeyPatch, c) -> None:  # type: ignore[no-untyped-def]
    """Each ALiBi case the adapter refuses would be answered wrongly by FlashInfer's ALiBi: let one through and the
    stand-in (FlashInfer's semantics) disagrees with the reference."""
    monkeypatch.setattr(FlashInferBackend, "unsupported", lambda self, case: None)
    record = measure_one(c, FlashInferBackend())
    assert record.status == "mismatch", (record.status, record.reason)



def test_documents_in_pages_would_be_wrong_if_let_through(standin, monkeypatch: pytest.MonkeyPatch) -> None:
    """The refusal is needed: FlashInfer's paged prefill would attend across the documents of a request."""
    monkeypatch.setattr(FlashInferBackend, "unsupported", lambda self, c: None)
    record = measure_one(case(documents=3, batch=2, seq_len=32, page_size=8), FlashInferBackend())
    assert record.status in ("mismatch", "error"), (record.status, record.reason)


def test_flashinfers_jit_cache_goes_under_the_runs_cache_dir(  # type: ignore[no-untyped-def]
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """FlashInfer keeps its nvcc-compiled kernels under $FLASHINFER_WORKSPACE_BASE/.cache/flashinfer (its jit/env.py,
    read at import): --cache-dir points it there; without one, a user's own setting stands."""
    from attnbench.run import compile_cache

    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", "/somewhere/the/user/chose")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "unused"))
    compile_cache.use(tmp_path / "run-cache")
    chosen = tmp_path / "run-cache" / "flashinfer"
    assert compile_cache.os.environ["FLASHINFER_WORKSPACE_BASE"] == str(chosen.resolve())
    assert (tmp_path / "run-cache" / "flashinfer").is_dir()
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", "/somewhere/the/user/chose")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    compile_cache.use(None)
    assert compile_cache.os.environ["FLASHINFER_WORKSPACE_BASE"] == "/somewhere/the/user/chose"
    monkeypatch.delenv("FLASHINFER_WORKSPACE_BASE")
    compile_cache.use(None)
    default = tmp_path / "xdg" / "attnbench" / "flashinfer"
    assert compile_cache.os.environ["FLASHINFER_WORKSPACE_BASE"] == str(default.resolve())


# ---- absorbed MLA (kv_shared) through mla.BatchMLAPagedAttentionWrapper ---------------------------------------------
def mla(**overrides):  # type: ignore[no-untyped-def]
    """DeepSeek's absorbed decode, CPU-sized: one latent KV head of 512 + 64 channels, V its first 512."""
    fields = dict(heads=4, kv_heads=1, head_dim=576, head_dim_v=512, kv_shared=True, page_size=16)
    fields.update(overrides)
    return case(**fields)


MLA_CASES = {
    "decode-ragged": mla(batch=3, seq_len=1, kv_seq_len=60, kv_lengths="random"),
    "decode-full-last-page": mla(batch=2, seq_len=1, kv_seq_len=32),
    "prefill-with-cache-causal": mla(batch=2, seq_len=6, kv_seq_len=40, kv_lengths="random"),
    "cache-as-long-as-queries-causal": mla(batch=3, seq_len=4, kv_seq_len=40, kv_lengths="explicit",
                                           kv_lens=(4, 17, 40)),
    "short-caches-full": mla(batch=3, seq_len=4, kv_seq_len=40, kv_lengths="explicit", kv_lens=(2, 17, 40),
                             causal=False),
    "prefill-full": mla(batch=2, seq_len=5, kv_seq_len=30, kv_lengths="random", causal=False, page_size=7),
}


def test_a_short_cache_causal_through_the_mla_wrapper_is_refused_by_name(standin) -> None:
    c = mla(batch=3, seq_len=4, kv_seq_len=40, kv_lengths="explicit", kv_lens=(2, 17, 40))
    record = measure_one(c, FlashInferBackend())
    assert record.status == "skipped" and "(4 queries over 2 keys)" in record.reason
    assert standin == []  # never planned nor run


def check_mla(measured: Measured) -> None:
    """kv_shared goes through the MLA wrapper alone, planned and run, and the kernel names its widths."""
    record = measured.record
    assert route(measured.case) == "mla"
    assert {what for what, _ in measured.recorded} == {"mla.plan", "mla.run"}
    assert "mla.BatchMLAPagedAttentionWrapper(causal=" in record.kernel and "ckv 512 + kpe 64" in record.kernel
    assert record.extra["plan_ms"] >= 0


@pytest.mark.parametrize("c, words", [
    (mla(seq_len=1, batch=2, kv_seq_len=32, page_size=None), "reads a paged ckv/kpe cache"),
    (mla(seq_len=1, batch=2, kv_seq_len=32, heads=4, kv_heads=2), "one latent KV head (kv_heads 2)"),
    (mla(seq_len=4, batch=2, kv_seq_len=32, window=8), "no window, soft-cap or ALiBi"),
    (mla(seq_len=1, batch=2, kv_seq_len=32, softcap=5.0), "no window, soft-cap or ALiBi"),
    (mla(seq_len=1, batch=2, kv_seq_len=32, mode="fwd_bwd"), "forward-only"),
])
def test_mla_reasons(c, words: str) -> None:  # type: ignore[no-untyped-def]
    reason = FlashInferBackend().unsupported(c)
    assert reason is not None and words in reason


def _mla_plan(kind: str):  # type: ignore[no-untyped-def]
    real = fi_adapter.mla_plan_arguments

    def wrong(c, device, q_dtype, kv_dtype):  # type: ignore[no-untyped-def]
        args = real(c, device, q_dtype, kv_dtype)
        if kind == "scale-of-the-latent":  # 1/sqrt(head_dim_ckv): the scale of q_nope alone
            args["sm_scale"] = c.v_dim ** -0.5
        elif kind == "lengths-one-short":
            args["kv_len_arr"] = args["kv_len_arr"] - 1
        elif kind == "causal-dropped":
            args["causal"] = False
        return args
    return wrong


def _mla_split(c, q, k):  # type: ignore[no-untyped-def]
    """q_pe taken from the first channels and q_nope from the rest: the latent/rope order reversed (same widths)."""
    rope = c.head_dim - c.v_dim
    return q[..., :rope], k[..., c.v_dim:], q[..., rope:]


MLA_SABOTAGES = {
    "scale-of-the-latent": (lambda mp: mp.setattr(fi_adapter, "mla_plan_arguments", _mla_plan("scale-of-the-latent")),
                            MLA_CASES["decode-ragged"]),
    "lengths-one-short": (lambda mp: mp.setattr(fi_adapter, "mla_plan_arguments", _mla_plan("lengths-one-short")),
                          MLA_CASES["decode-ragged"]),
    "causal-dropped": (lambda mp: mp.setattr(fi_adapter, "mla_plan_arguments", _mla_plan("causal-dropped")),
                       MLA_CASES["prefill-with-cache-causal"]),
    "latent-and-rope-swapped": (lambda mp: mp.setattr(fi_adapter, "qv_split", _mla_split),
                                MLA_CASES["decode-ragged"]),
    "page-table-ignored": (lambda mp: mp.setattr(packing, "flashinfer_page_indices",
                                                 _wrong_indices("table-not-shuffled")), MLA_CASES["decode-ragged"]),
}

MLA_STANDIN = Standin(name="flashinfer-mla", install=install, backends=(FlashInferBackend,), cases=MLA_CASES,
                      sabotages=MLA_SABOTAGES, check=check_mla)


def test_mla_calls_pass_exactly_what_they_declare(standin, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_conformance import Spy

    cls = sys.modules["flashinfer"].mla.BatchMLAPagedAttentionWrapper
    spies = {"BatchMLAPagedAttentionWrapper": Spy(cls.__init__)}
    for name in ("__init__", "plan", "run"):
        spy = Spy(getattr(cls, name))
        spies["BatchMLAPagedAttentionWrapper" if name == "__init__" else name] = spy
        monkeypatch.setattr(cls, name, lambda self, *a, _spy=spy, **kw: _spy(self, *a, **kw))
    for c in MLA_CASES.values():
        assert measure_one(c, FlashInferBackend()).status == "ok"
    for call in fi_adapter.MLA_CALLS:  # the constructor's spy sees `self` too
        spy = spies[call.name]
        if call.name == "BatchMLAPagedAttentionWrapper":
            spy.positional = {n - 1 for n in spy.positional}
        spy.assert_declared(call)


# ---- an FP8 K/V cache under bf16 queries (k_scale, v_scale) -------------------------------------------------------
def fp8_kv(**overrides):  # type: ignore[no-untyped-def]
    return case(**{"kv_dtype": "float8_e4m3fn", **overrides})


FP8_CASES = {
    "single": (fp8_kv(seq_len=20, kv_seq_len=64), "single"),
    "ragged-e5m2-gqa": (fp8_kv(kv_dtype="float8_e5m2", batch=3, seq_len=8, kv_seq_len=80, kv_lengths="random",
                               heads=4, kv_heads=1), "ragged"),
    "paged-prefill": (fp8_kv(batch=2, seq_len=8, kv_seq_len=80, kv_lengths="random", page_size=16), "paged-prefill"),
    "decode": (fp8_kv(batch=4, seq_len=1, kv_seq_len=80, kv_lengths="random", page_size=16, heads=8, kv_heads=2),
               "decode"),
    "decode-window-fp16": (fp8_kv(dtype="float16", batch=3, seq_len=1, kv_seq_len=90, kv_lengths="random",
                                  page_size=5, window=9), "decode"),
}


def install_fp8(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """The stand-in, with a distinct scale for each tensor; returns the log of its calls."""
    from tests.fp8_inputs import distinct_scales

    log = install(monkeypatch)
    distinct_scales(monkeypatch)
    return log


@pytest.fixture
def fp8_standin(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    return install_fp8(monkeypatch)


def check_fp8(measured: Measured) -> None:
    """The case takes the route its table names and that entry point alone ran; the kernel and the bound name the
    FP8 cache's scales, and the output keeps the queries' dtype."""
    c, record, expected_route = measured.case, measured.record, FP8_CASES[measured.name][1]
    assert route(c) == expected_route
    assert {what.split(".")[0] for what, _ in measured.recorded} == {expected_route}
    assert f"with {c.kv_dtype} K/V, k_scale" in record.kernel
    source = record.extra["bound_source"]
    assert source.startswith("emulation of FlashInfer's FP8 K/V cache") and "times V's descale" in source
    assert ("P rounded to" in source) == (expected_route != "decode")  # tensor-core prefill rounds P, decode does not
    assert record.extra["out_dtype"] == c.dtype


@pytest.mark.parametrize("name", ["decode", "paged-prefill"])
def test_an_fp8_kv_cache_in_hnd_pages(fp8_standin, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setattr(FlashInferBackend, "kv_layout", "HND")
    assert measure_one(FP8_CASES[name][0], FlashInferBackend()).status == "ok"


@pytest.mark.parametrize("c,words", [
    (fp8_kv(seq_len=1, kv_seq_len=64, quant="head"), "one float each"),
    (case(dtype="float8_e4m3fn"), "FP8-query prefill"),
])
def test_what_flashinfer_does_not_take_is_skipped_by_name(c, words: str) -> None:  # type: ignore[no-untyped-def]
    from attnbench.backends.base import refusal

    assert words in refusal(FlashInferBackend(), c)


def _scales(change):  # type: ignore[no-untyped-def]
    import attnbench.backends.fp8 as fp8

    real = fp8.per_tensor

    def wrong(scales, name):  # type: ignore[no-untyped-def]
        return change(real, scales, name)
    return lambda mp: mp.setattr(fp8, "per_tensor", wrong)


FP8_SABOTAGES = {
    "k-and-v-scales-swapped": (_scales(lambda real, s, n: real(s, {"k": "v", "v": "k"}[n])), "decode"),
    "v-scale-dropped": (_scales(lambda real, s, n: 1.0 if n == "v" else real(s, n)), "paged-prefill"),
    "k-scale-applied-twice": (_scales(lambda real, s, n: real(s, n) ** 2 if n == "k" else real(s, n)), "single"),
    "scale-not-descale": (_scales(lambda real, s, n: 1.0 / real(s, n)), "ragged-e5m2-gqa"),
}

FP8_STANDIN = Standin(name="flashinfer-fp8", install=install_fp8, backends=(FlashInferBackend,),
                      cases={name: c for name, (c, _) in FP8_CASES.items()},
                      sabotages={name: (sabotage, FP8_CASES[which][0])
                                 for name, (sabotage, which) in FP8_SABOTAGES.items()},
                      check=check_fp8)
