"""The cudnn adapter against a stand-in `cudnn` module that implements cuDNN's SDPA graph semantics on CPU.

The stand-in is written from nvidia-cudnn-frontend 1.32.0's sources, not from attnbench.core.workload:
- tensors are declared with dims (B, H, S, D) and explicit strides, and read from the bound buffer's memory at those
  strides (the buffer's own shape is ignored, as cuDNN reads a pointer); a ragged tensor's batch entry b starts at
  element ragged_offset[b] instead of b·stride[0];
- a paged K/V is a container (blocks, H, block_size, D) read through the table (B, 1, pages, 1) int32, sequence b's
  first seq_len_kv[b] tokens;
- scores are Q·Kᵀ times `attn_scale` (none when it is not given); query head h reads K/V head h // (H_q/H_k)
  (test/python/sdpa/fp16_ref.py expands K/V that way); `use_alibi_mask` adds slope_h·(j − i) with slopes from H_q
  (cudnn_frontend_utils.h get_alibi_slope);
- masks (utils/attn_score_modifiers.h sliding_window_mask, node/diagonal_band_mask.h): with `use_padding_mask`
  each sequence has seq_len_q[b] queries and seq_len_kv[b] keys; BOTTOM_RIGHT shifts the diagonal by
  s_kv − s_q per sequence, TOP_LEFT does not; `diagonal_band_right_bound` R keeps j ≤ i + shift + R, and
  `diagonal_band_left_bound` L keeps j > i + shift − L;
- Stats is the natural-log logsumexp of each row's masked, scaled scores, fp32; the backward recomputes
  P = exp(S − Stats) and takes D = rowsum(dO ∘ O) (flash attention's backward, as cuDNN's sdpa_backward does);
- what node/sdpa_support_surface.h refuses (ALiBi needs right bound 0 and top-left alignment, ragged needs the
  padding mask, head dims multiples of 8, fp16/bf16 only) raises cudnnGraphNotSupportedError at validate();
- create_execution_plans ranks one of the frontend's own Python engines before the backend's plan, as 1.32 may
  (engines/manifest.py's sdpa_fwd_prefill_sm90): an adapter that does not pin the backend runs the wrong kernel.
- `sdpa_fp8` (test/python/sdpa/fp8.py, fp8_ref.py and the 1.32 binding): Q, K, V FP8_E4M3 or FP8_E5M2, the factors
  descale_q/k/v/s, scale_s, scale_o read from (1, 1, 1, 1) FLOAT tensors; scores (Q·Kᵀ)·descale_q·descale_k·attn_scale,
  P = exp(s − max)·scale_s rounded to the input's FP8 type, O = (P·V)·descale_v·descale_s over the row sum of P,
  times scale_o in O's type; its bounds are `left_bound` / `right_bound`; Amax_S and Amax_O are written.
Computation is float64; nothing outside a sequence's lengths is written.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import sys
import types
from collections import OrderedDict
from typing import Any

import pytest
import torch

import attnbench.backends.cudnn as cudnn_adapter
import attnbench.backends.cudnn_graph as cudnn_graph
import attnbench.backends.cudnn_layout as cudnn_layout
import attnbench.backends.packing as packing
from attnbench.backends.conformance import check_backend, docstring_signatures
from attnbench.backends.cudnn import SDPA_BACKWARD_KEYWORDS, SDPA_KEYWORDS, CudnnBackend
from attnbench.backends.cudnn_layout import route
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
    Sabotage,
    Standin,
    make_case,
    measure_one,
    on_cpu_too,
)

FIXTURE = "tests.signatures.cudnn_frontend_1_32_0"


def binding_keywords(doc: str) -> set[str]:
    """The keyword names the real 1.32 binding takes (its docstring's signature, vendored)."""
    (signature,) = docstring_signatures(doc, doc.split("(", 1)[0])
    return set(signature.parameters) - {"self"}


class Member:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


def enum(*names: str) -> types.SimpleNamespace:
    return types.SimpleNamespace(**{n: Member(n) for n in names})


class NotSupported(Exception):
    pass


NotSupported.__name__ = "cudnnGraphNotSupportedError"
TORCH = {"HALF": torch.float16, "BFLOAT16": torch.bfloat16, "FLOAT": torch.float32, "INT32": torch.int32,
         "INT64": torch.int64, "FP8_E4M3": torch.float8_e4m3fn, "FP8_E5M2": torch.float8_e5m2}
FP8_IO = ("FP8_E4M3", "FP8_E5M2")
FP8_BOUNDS = {"left_bound": "diagonal_band_left_bound", "right_bound": "diagonal_band_right_bound"}


class IR:
    """A declared tensor."""

    def __init__(self, dims, stride, data_type, name) -> None:  # type: ignore[no-untyped-def]
        self.dims, self.strides, self.data_type, self.name = list(dims or []), list(stride or []), data_type, name
        self.output, self.ragged = False, None

    def set_output(self, value):  # type: ignore[no-untyped-def]
        self.output = value
        return self

    def set_dim(self, dim):  # type: ignore[no-untyped-def]
        self.dims = list(dim)
        return self

    def set_stride(self, stride):  # type: ignore[no-untyped-def]
        self.strides = list(stride)
        return self

    def set_data_type(self, dtype):  # type: ignore[no-untyped-def]
        self.data_type = dtype
        return self

    def set_ragged_offset(self, ragged_offset):  # type: ignore[no-untyped-def]
        self.ragged = ragged_offset
        return self


def cudnn_slopes(heads: int) -> torch.Tensor:
    """get_alibi_slope(n_heads): n = the power of two <= heads; 2^(-8·s/n) for s = 1..n, then s = 0.5, 1.5, ..."""
    n = 1 << int(math.log2(heads))
    s = [i + 1.0 for i in range(n)] + [(i + 1) * 0.5 for i in range(0, 2 * (heads - n), 2)]
    return torch.tensor([2.0 ** (-8.0 * x / n) for x in s], dtype=torch.float64)


class StandinState:
    """What the stand-in saw: builds, executes (with the plan that ran and the phase), the keywords passed."""

    def __init__(self, phases: Phases | None = None, backend_declines: bool = False) -> None:
        self.phases = phases
        self.backend_declines = backend_declines
        self.log: list[tuple[str, str]] = []
        self.keywords: dict[str, set[str]] = {"sdpa": set(), "sdpa_backward": set(), "sdpa_fp8": set()}

    def note(self, what: str) -> None:
        self.log.append((what, self.phases.phase if self.phases else "?"))


class FrontendEngine:
    """The frontend's own Python engine that create_execution_plans ranks first (engines/manifest.py)."""

    name = "sdpa_fwd_prefill_sm90"


def refuse_types(op: str, io: Member, inputs: list[IR]) -> None:
    """The data types sdpa and sdpa_fp8 accept: fp16/bf16, or FP8 Q, K, V with (1, 1, 1, 1) FLOAT factors."""
    if op != "sdpa_fp8":
        if io.name not in ("HALF", "BFLOAT16"):
            raise NotSupported("Unsupported mma core mode")
        return
    if io.name not in FP8_IO or any(t.data_type.name not in FP8_IO for t in inputs[:3]):
        raise NotSupported("sdpa_fp8 needs FP8 Q, K and V")
    if any(t.dims != [1, 1, 1, 1] or t.data_type.name != "FLOAT" for t in inputs[3:]):
        raise NotSupported("sdpa_fp8's descale and scale tensors are (1, 1, 1, 1) FLOAT")


def refuse_shapes(q: IR, k: IR, v: IR) -> None:
    if q.dims[1] % k.dims[1] or q.dims[1] % v.dims[1]:
        raise NotSupported("For group-query attention, number of heads for key and query must be a factor")
    if q.dims[3] % 8 or v.dims[3] % 8:
        raise NotSupported("hidden_dim should be multiple of 8")


def refuse_masks(kw: dict[str, Any], inputs: list[IR], top_left: Member) -> None:
    """ALiBi needs right bound 0 and top-left alignment; ragged and paged tensors need the padding mask."""
    right = kw.get("diagonal_band_right_bound")
    if kw.get("use_alibi_mask"):
        if right != 0:
            raise NotSupported("When alibi mask is used, diagonal_band_right_bound needs to be set to 0.")
        if kw.get("diagonal_alignment", top_left).name == "BOTTOM_RIGHT":
            raise NotSupported("Bottom right causal mask is only supported with is_bias=False, "
                               "is_alibi=False, is_dropout=False.")
    ragged = any(t.ragged is not None for t in inputs)
    if ragged and not kw.get("use_padding_mask"):
        raise NotSupported("Ragged offsets are only supported with padding mask.")
    if kw.get("paged_attention_k_table") is not None and not kw.get("use_padding_mask"):
        raise NotSupported("Paged caches can only be used in combination with padding mask")
    if right is not None and right < 0:
        raise RuntimeError("Right bound needs to be larger than or equal to zero")


class StandinGraph:
    """cudnn.pygraph: one SDPA node declared, validated as node/sdpa_support_surface.h refuses, built and run.
    make_cudnn subclasses it with the stand-in's `state`, `allowed` keywords and `module`."""

    state: StandinState
    allowed: dict[str, set[str]]
    module: types.ModuleType

    def __init__(self, name="test_graph", io_data_type=None,  # type: ignore[no-untyped-def]
                 intermediate_data_type=None, compute_data_type=None, handle=None, **kw):
        self.io = io_data_type
        self.node: tuple[str, list[IR], dict[str, Any]] | None = None
        self.plans: list[str] = []
        self.index, self.built, self.validated = 0, False, False
        self.state.note("pygraph")

    def tensor(self, dim, stride=None, data_type=None, name="", **kw):  # type: ignore[no-untyped-def]
        return IR(dim, stride, data_type, name)

    def _node(self, op, inputs, kw, outputs):  # type: ignore[no-untyped-def]
        unknown = set(kw) - self.allowed[op]
        if unknown:
            raise TypeError(f"{op}() got unexpected keyword arguments {sorted(unknown)}")
        self.state.keywords[op] |= set(kw)
        self.node = (op, list(inputs), dict(kw), outputs)
        return outputs

    def sdpa(self, q, k, v, name="", **kw):  # type: ignore[no-untyped-def]
        o = IR(None, None, self.io, "O")
        stats = IR(None, None, None, "Stats") if kw.get("generate_stats") else None
        return self._node("sdpa", (q, k, v), kw, [o, stats])

    def sdpa_backward(self, q, k, v, o, dO, stats, name="", **kw):  # type: ignore[no-untyped-def]
        return self._node("sdpa_backward", (q, k, v, o, dO, stats), kw,
                          [IR(None, None, self.io, n) for n in ("dQ", "dK", "dV")])

    def sdpa_fp8(self, q, k, v, descale_q, descale_k, descale_v, descale_s, scale_s, scale_o, name="",
                 **kw):  # type: ignore[no-untyped-def]
        o = IR(None, None, self.io, "O")
        stats = IR(None, None, None, "Stats") if kw.get("generate_stats") else None
        amax = [IR(None, None, self.module.data_type.FLOAT, n) for n in ("Amax_S", "Amax_O")]
        return self._node("sdpa_fp8", (q, k, v, descale_q, descale_k, descale_v, descale_s, scale_s, scale_o), kw,
                          [o, stats, *amax])

    def validate(self) -> None:
        self.state.note("validate")
        op, inputs, kw, _ = self.node
        if op == "sdpa_fp8":
            kw = {FP8_BOUNDS.get(key, key): value for key, value in kw.items()}
        refuse_types(op, self.io, inputs)
        refuse_shapes(*inputs[:3])
        refuse_masks(kw, inputs, self.module.diagonal_alignment.TOP_LEFT)
        self.validated = True

    def build_operation_graph(self) -> None:
        assert self.validated

    def create_execution_plans(self, heuristics=None):  # type: ignore[no-untyped-def]
        assert [m.name for m in heuristics] == ["A", "FALLBACK"]
        self.plans = ["sdpa_fwd_prefill_sm90"] + ([] if self.state.backend_declines else ["eng7_k2=1_k3=0"])

    def get_execution_plan_count(self) -> int:
        return len(self.plans)

    def select_plan(self, index):  # type: ignore[no-untyped-def]
        self.index = index
        return self

    @property
    def selected_engine(self):  # type: ignore[no-untyped-def]
        return FrontendEngine() if self.plans[self.index].startswith("sdpa_") else None

    def get_plan_name_at_index(self, index):  # type: ignore[no-untyped-def]
        return self.plans[index]

    def check_support(self) -> None:
        pass

    def build_plans(self, *args, **kw):  # type: ignore[no-untyped-def]
        self.state.note(f"build:{self.plans[self.index]}")
        self.built = True

    def get_workspace_size(self, *args, **kw):  # type: ignore[no-untyped-def]
        return 256

    def execute(self, tensor_dict, workspace=None, handle=None, **kw):  # type: ignore[no-untyped-def]
        assert self.built, "execute before build"
        self.state.note(f"execute:{self.plans[self.index]}")
        op, inputs, params, outputs = self.node
        used = [*inputs, *(t for t in outputs if t is not None)]
        used += [t.ragged for t in used if t.ragged is not None]
        used += [params[p] for p in ("seq_len_q", "seq_len_kv", "paged_attention_k_table",
                                     "paged_attention_v_table") if params.get(p) is not None]
        for t in used:
            if t not in tensor_dict:
                raise RuntimeError(f"variant pack misses {t.name}")
            buf = tensor_dict[t]
            if buf.dtype != TORCH[t.data_type.name]:
                raise TypeError(f"{t.name}: declared {t.data_type.name}, bound {buf.dtype}")
        run = {"sdpa": run_forward, "sdpa_backward": run_backward, "sdpa_fp8": run_forward_fp8}[op]
        run(tensor_dict, inputs, params, outputs)


def seq_lengths(pack, params, b, sq, skv):  # type: ignore[no-untyped-def]
    if not params.get("use_padding_mask"):
        return sq, skv
    return (int(read(pack, params["seq_len_q"], b).flatten()[0]),
            int(read(pack, params["seq_len_kv"], b).flatten()[0]))


def read(pack, t, b, rows=None):  # type: ignore[no-untyped-def]
    """Batch entry b of tensor t (its first `rows` rows), as cuDNN reads the bound buffer's memory at the
    declared strides: a read past the buffer raises."""
    buf = pack[t]
    start = buf.storage_offset()
    start += int(read_offsets(pack, t)[b]) if t.ragged is not None else b * t.strides[0]
    dims = list(t.dims[1:])
    if rows is not None:
        dims[1] = rows
    return torch.as_strided(buf, dims, t.strides[1:], start)


def read_offsets(pack, t):  # type: ignore[no-untyped-def]
    off = t.ragged
    return torch.as_strided(pack[off], (off.dims[0],), (off.strides[0],), pack[off].storage_offset())


def read_keys(pack, t, params, b, n):  # type: ignore[no-untyped-def]
    """Sequence b's first n keys (or values), (H, n, D): through the page table when paged."""
    table = params.get("paged_attention_k_table" if t.name.startswith("k") else "paged_attention_v_table")
    if table is None:
        return read(pack, t, b, n)
    block = t.dims[2]
    row = read(pack, table, b).flatten()
    buf = pack[t]
    pages = [torch.as_strided(buf, t.dims[1:], t.strides[1:], buf.storage_offset() + int(p) * t.strides[0])
             for p in row[: -(-n // block)]]
    return torch.cat(pages, dim=1)[:, :n]


def masked_scores(q, k, params, hq):  # type: ignore[no-untyped-def]
    """(Hq, sq, skv) masked scaled scores of one sequence, and its keep mask."""
    group = hq // k.shape[0]
    kh = k.repeat_interleave(group, dim=0)
    s = q @ kh.transpose(-1, -2)
    if params.get("attn_scale") is not None:
        s = s * params["attn_scale"]
    sq, skv = q.shape[1], k.shape[1]
    i = torch.arange(sq)[:, None]
    j = torch.arange(skv)[None, :]
    if params.get("use_alibi_mask"):
        s = s + cudnn_slopes(hq)[:, None, None] * (j - i).double()
    shift = skv - sq if params.get("diagonal_alignment").name == "BOTTOM_RIGHT" else 0
    keep = torch.ones(sq, skv, dtype=torch.bool)
    if params.get("diagonal_band_right_bound") is not None:
        keep &= j <= i + shift + params["diagonal_band_right_bound"]
    if params.get("diagonal_band_left_bound") is not None:
        keep &= j > i + shift - params["diagonal_band_left_bound"]
    return s.masked_fill(~keep, float("-inf")), keep


def run_forward(pack, inputs, params, outputs):  # type: ignore[no-untyped-def]
    q_t, k_t, v_t = inputs
    o_t, stats_t = outputs
    batches, hq, sq_max, _ = q_t.dims
    skv_max = params.get("paged_attention_max_seq_len_kv") or k_t.dims[2]
    for b in range(batches):
        sq, skv = seq_lengths(pack, params, b, sq_max, skv_max)
        q = read(pack, q_t, b, sq).double()
        k, v = (read_keys(pack, t, params, b, skv).double() for t in (k_t, v_t))
        s, keep = masked_scores(q, k, params, hq)
        p = torch.nan_to_num(torch.softmax(s, -1), nan=0.0)
        out = p @ v.repeat_interleave(hq // v.shape[0], dim=0)
        read(pack, o_t, b, sq).copy_(out)
        if stats_t is not None:
            read(pack, stats_t, b, sq).copy_(torch.logsumexp(s, -1, keepdim=True))


def run_forward_fp8(pack, inputs, params, outputs):  # type: ignore[no-untyped-def]
    q_t, k_t, v_t = inputs[:3]
    dq, dk, dv, ds, ss, so = (float(pack[t].flatten()[0]) for t in inputs[3:])
    o_t, stats_t, amax_s_t, amax_o_t = outputs
    params = {FP8_BOUNDS.get(key, key): value for key, value in params.items()}
    itype = TORCH[q_t.data_type.name]
    batches, hq, sq_max, _ = q_t.dims
    skv_max = params.get("paged_attention_max_seq_len_kv") or k_t.dims[2]
    amax_o = 0.0
    for b in range(batches):
        sq, skv = seq_lengths(pack, params, b, sq_max, skv_max)
        q = read(pack, q_t, b, sq).double() * (dq * dk)
        k, v = (read_keys(pack, t, params, b, skv).double() for t in (k_t, v_t))
        s, keep = masked_scores(q, k, params, hq)
        p = torch.nan_to_num(torch.exp(s - s.amax(-1, keepdim=True)), nan=0.0)
        p8 = (p * ss).float().to(itype).double()
        out = (p8 @ v.repeat_interleave(hq // v.shape[0], dim=0)) * (dv * ds) / p.sum(-1, keepdim=True)
        out = torch.nan_to_num(out, nan=0.0) * so
        read(pack, o_t, b, sq).copy_(out)
        amax_o = max(amax_o, float(out.abs().max()) if out.numel() else 0.0)
    pack[amax_s_t].fill_(1.0)
    pack[amax_o_t].fill_(amax_o)


def run_backward(pack, inputs, params, outputs):  # type: ignore[no-untyped-def]
    q_t, k_t, v_t, o_t, do_t, stats_t = inputs
    dq_t, dk_t, dv_t = outputs
    batches, hq, sq_max, _ = q_t.dims
    for b in range(batches):
        sq, skv = seq_lengths(pack, params, b, sq_max, k_t.dims[2])
        q, o, do, stats = (read(pack, t, b, sq).double() for t in (q_t, o_t, do_t, stats_t))
        k, v = (read(pack, t, b, skv).double() for t in (k_t, v_t))
        group = hq // k.shape[0]
        s, keep = masked_scores(q, k, params, hq)
        p = torch.exp(s - stats).masked_fill(~keep, 0.0)  # the forward's softmax, from its stats
        vh, kh = v.repeat_interleave(group, dim=0), k.repeat_interleave(group, dim=0)
        dp = do @ vh.transpose(-1, -2)
        ds = p * (dp - (do * o).sum(-1, keepdim=True))
        scale = params.get("attn_scale") or 1.0
        dq = scale * ds @ kh
        dk = (scale * ds.transpose(-1, -2) @ q).unflatten(0, (-1, group)).sum(1)
        dv = (p.transpose(-1, -2) @ do).unflatten(0, (-1, group)).sum(1)
        read(pack, dq_t, b, sq).copy_(dq)
        read(pack, dk_t, b, skv).copy_(dk)
        read(pack, dv_t, b, skv).copy_(dv)


def make_cudnn(state: StandinState) -> types.ModuleType:
    """The stand-in `cudnn` module: the 1.32 enums and version calls, and pygraph recording into `state`."""
    fixture = importlib.import_module(FIXTURE)
    allowed = {"sdpa": binding_keywords(fixture.SDPA_DOC), "sdpa_backward": binding_keywords(fixture.SDPA_BACKWARD_DOC),
               "sdpa_fp8": binding_keywords(fixture.SDPA_FP8_DOC)}
    module = types.ModuleType("cudnn")
    module.__version__ = "1.32.0"
    module.data_type = enum("HALF", "BFLOAT16", "FLOAT", "INT32", "INT64", "NOT_SET", *FP8_IO)
    module.diagonal_alignment = enum("TOP_LEFT", "BOTTOM_RIGHT")
    module.heur_mode = enum("A", "B", "FALLBACK")
    module.cudnnGraphNotSupportedError = NotSupported
    module.backend_version = lambda: 91900
    module.backend_version_string = lambda: "9.19.0"
    module.create_handle = lambda: object()
    module.set_stream = lambda handle, stream: None
    module.pygraph = type("pygraph", (StandinGraph,), {"state": state, "allowed": allowed, "module": module})
    module.Tensor = IR
    return module


def install(monkeypatch: pytest.MonkeyPatch) -> StandinState:
    """The stand-in `cudnn` in place and the adapter allowed onto the CPU; returns what the stand-in saw. The graph
    cache is an empty one of this test's (monkeypatch puts the real one back), so no graph built on another `cudnn`
    module is found here, and none built here outlives the test."""
    state = StandinState()
    monkeypatch.setitem(sys.modules, "cudnn", make_cudnn(state))
    on_cpu_too(monkeypatch, CudnnBackend)
    monkeypatch.setattr(cudnn_graph, "_CACHE", OrderedDict())
    return state


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> StandinState:
    return install(monkeypatch)


def case(**overrides: Any):  # type: ignore[no-untyped-def]
    fields: dict[str, Any] = dict(dtype="bfloat16", causal=True, heads=4, kv_heads=4, head_dim=16, seq_len=48)
    fields.update(overrides)
    return make_case(**fields)


CASES = {
    "dense-causal": (case(), "dense"),
    "dense-full-fp16": (case(causal=False, dtype="float16"), "dense"),
    "gqa-bottom-right-fwd-bwd": (case(seq_len=20, kv_seq_len=70, heads=4, kv_heads=1, mode="fwd_bwd"), "dense"),
    "window": (case(window=5, seq_len=40, kv_seq_len=64, heads=6, kv_heads=2), "dense"),
    "window-0-bwd": (case(window=0, seq_len=30, kv_seq_len=50, mode="bwd"), "dense"),
    "two-sided-fwd-bwd": (case(causal=False, window=6, seq_len=30, kv_seq_len=45, heads=4, kv_heads=2,
                               mode="fwd_bwd"), "dense"),
    "decode-window": (case(window=3, seq_len=1, kv_seq_len=64, heads=8, kv_heads=2), "dense"),
    "batch-bwd": (case(batch=3, seq_len=24, mode="bwd"), "dense"),
    "documents-fwd-bwd": (case(documents=3, batch=2, mode="fwd_bwd"), "ragged"),
    "documents-random-window-gqa": (case(window=6, documents=5, doc_lengths="random", seq_len=64, heads=4,
                                         kv_heads=2), "ragged"),
    "documents-two-sided-bwd": (case(causal=False, window=5, documents=4, doc_lengths="random", mode="bwd"), "ragged"),
    "ragged-kv-fwd-bwd": (case(batch=3, seq_len=8, kv_seq_len=80, kv_lengths="random", kv_heads=1,
                               mode="fwd_bwd"), "padded"),
    "ragged-decode-window": (case(window=9, batch=4, seq_len=1, kv_seq_len=80, kv_lengths="random"), "padded"),
    "paged": (case(batch=2, seq_len=8, kv_seq_len=80, kv_lengths="random", page_size=16), "paged"),
    "paged-decode-window-gqa": (case(window=9, batch=3, seq_len=1, kv_seq_len=70, kv_lengths="random", page_size=8,
                                     heads=8, kv_heads=2), "paged"),
    "paged-full-last-page": (case(batch=2, seq_len=4, kv_seq_len=32, page_size=16), "paged"),
    "alibi-six-heads-bwd": (case(alibi=True, heads=6, kv_heads=3, mode="fwd_bwd"), "dense"),
    "alibi-documents-window": (case(alibi=True, documents=3, window=7, heads=8, kv_heads=8), "ragged"),
    "head-dim-v-fwd-bwd": (case(head_dim=32, head_dim_v=16, heads=4, kv_heads=2, mode="fwd_bwd"), "dense"),
    "head-dim-v-documents": (case(head_dim=32, head_dim_v=16, documents=3), "ragged"),
}


def check(measured: Measured) -> None:
    """The case takes the route its table names, K/V keep their heads, the gradients are checked where the case has
    them, and only cuDNN's backend plan ran, its planning and compile times each their own part of the setup."""
    c, record = measured.case, measured.record
    assert route(c) == CASES[measured.name][1]
    assert record.kv_expanded is False  # native GQA
    assert record.grad_checked == c.needs_grad
    ran = {what for what, _ in measured.recorded.log if what.startswith("execute:")}
    assert ran == {"execute:eng7_k2=1_k3=0"}  # cuDNN's backend plan, never the frontend's engine ranked first
    assert record.extra["cudnn_plan"] == "eng7_k2=1_k3=0"
    assert record.extra["setup_parts"]["plan"] == record.extra["plan_ms"]
    assert record.extra["setup_parts"]["compile"] == pytest.approx(record.extra["compile_s"] * 1e3)


def test_every_mapped_axis_runs_ok_through_the_standin() -> None:
    """Each workload axis the adapter declares is run (and checked) by a case above."""
    covered = {axis for c, _ in CASES.values() for axis in c.workload_axes}
    assert covered == set(CudnnBackend.capabilities.workload_axes)
    assert {mode for c, _ in CASES.values() for mode in [c.mode]} == {"fwd", "bwd", "fwd_bwd"}


def test_kernel_names_the_versions_the_mask_the_layout_and_the_plan(standin: StandinState) -> None:
    record = measure_one(CASES["paged-decode-window-gqa"][0], CudnnBackend())
    assert record.kernel == ("cudnn-frontend 1.32.0 / cuDNN 9.19.0 sdpa (bottom-right causal, window (left_bound=10, "
                             "right_bound=0), paged K/V, pages of 8, native GQA 8/2, plan eng7_k2=1_k3=0)")
    record = measure_one(CASES["documents-two-sided-bwd"][0], CudnnBackend())
    assert record.kernel.startswith("cudnn-frontend 1.32.0 / cuDNN 9.19.0 sdpa + sdpa_backward (bottom-right "
                                    "two-sided, window (left_bound=6, right_bound=5), ragged, 4 sequences")
    assert record.kernel.endswith("plan eng7_k2=1_k3=0, backward plan eng7_k2=1_k3=0)")
    record = measure_one(CASES["alibi-six-heads-bwd"][0], CudnnBackend())
    assert "(top-left causal, alibi, native GQA 6/3" in record.kernel


@pytest.mark.slow
def test_the_keywords_passed_are_the_declared_ones(standin: StandinState) -> None:
    """Every keyword the adapter passes sdpa / sdpa_backward is in its LibraryCall declaration (the stand-in has
    already refused any the real 1.32 binding lacks)."""
    for c, _ in CASES.values():
        measure_one(c, CudnnBackend())
    assert standin.keywords["sdpa"] <= set(SDPA_KEYWORDS) - {"name"}
    assert standin.keywords["sdpa_backward"] <= set(SDPA_BACKWARD_KEYWORDS) - {"name"}
    assert "paged_attention_k_table" in standin.keywords["sdpa"] and "use_alibi_mask" in standin.keywords["sdpa"]
    assert "max_total_seq_len_q" in standin.keywords["sdpa_backward"]


def test_a_deterministic_run_asks_cudnn_for_its_deterministic_backward(standin: StandinState) -> None:
    """Under `deterministic: true` (PyTorch's mode around the measurement) the backward graph is built with
    use_deterministic_algorithm=True, a graph of its own; without it the option is not passed."""
    from attnbench.verify.determinism import deterministic_mode

    case = CASES["documents-two-sided-bwd"][0]
    assert measure_one(case, CudnnBackend()).status == "ok"
    assert "use_deterministic_algorithm" not in standin.keywords["sdpa_backward"]
    with deterministic_mode(True):
        assert measure_one(case, CudnnBackend()).status == "ok"
    assert "use_deterministic_algorithm" in standin.keywords["sdpa_backward"]


@pytest.mark.parametrize("mode", ["fwd", "bwd", "fwd_bwd"])
def test_graphs_are_built_in_prepare_and_only_execute_is_timed(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    phases = Phases()
    state = StandinState(phases)
    monkeypatch.setitem(sys.modules, "cudnn", make_cudnn(state))
    on_cpu_too(monkeypatch, CudnnBackend)
    monkeypatch.setattr(CudnnBackend, "prepare", phases.during_prepare(CudnnBackend.prepare))
    cudnn_graph.clear_cache()
    settings = TimingSettings(warmup_ms=0, budget_ms=0, min_samples=3, max_samples=3)
    c = case(window=4, documents=2, mode=mode)
    record = measure(CaseData(c), CudnnBackend(), PhaseTimer(phases), Settings(RunInfo("c", "t"), settings))
    assert record.status == "ok", record.reason
    builds = [phase for what, phase in state.log if what.startswith(("pygraph", "validate", "build:"))]
    assert set(builds) == {"prepare"} and len([w for w, _ in state.log if w.startswith("build:")]) == (
        1 if mode == "fwd" else 2)
    executes = [phase for what, phase in state.log if what.startswith("execute:")]
    # "after": the one profiled call after the samples (attnbench.run.profiled), never timed
    assert set(executes) <= {"prepare", "check", "timed", "after"} and "timed" in executes
    assert executes[0] == "prepare"  # the warm call
    assert record.extra["graph_cache"] == "built"
    again = measure(CaseData(c), CudnnBackend(), PhaseTimer(phases), Settings(RunInfo("c", "t"), settings))
    assert again.status == "ok" and again.extra["graph_cache"] == "hit" and again.extra["plan_ms"] == 0
    assert len([w for w, _ in state.log if w.startswith("build:")]) == (1 if mode == "fwd" else 2)  # none again
    cudnn_graph.clear_cache()


def test_a_graph_only_the_frontends_engines_take_is_skipped_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    state = StandinState(backend_declines=True)
    monkeypatch.setitem(sys.modules, "cudnn", make_cudnn(state))
    on_cpu_too(monkeypatch, CudnnBackend)
    cudnn_graph.clear_cache()
    record = measure_one(case(), CudnnBackend())
    assert record.status == "skipped"
    assert record.reason.startswith("cuDNN's backend has no plan for this graph; only the frontend's own engines "
                                    "offered one (sdpa_fwd_prefill_sm90)")
    assert not [w for w, _ in state.log if w.startswith(("execute:", "build:"))]  # it never ran
    cudnn_graph.clear_cache()


def test_cudnns_refusal_at_validate_is_the_skip_reason(standin: StandinState) -> None:
    record = measure_one(case(head_dim=12), CudnnBackend())
    assert (record.status, record.reason) == ("skipped", "cuDNN refused: hidden_dim should be multiple of 8")
    backend = CudnnBackend()
    assert backend.skip_reason(RuntimeError("CUDNN_STATUS_EXECUTION_FAILED"), []) is None


# ---- the stand-in catches a wrong mapping -------------------------------------------------------------------------
def _patch_keywords(**changes: Any):  # type: ignore[no-untyped-def]
    real = cudnn_layout.mask_arguments

    def wrong(c):  # type: ignore[no-untyped-def]
        args = real(c)
        for key, change in changes.items():
            if key in args:
                args[key] = change(args[key]) if callable(change) else change
        return args
    return wrong


def _patch_layout(edit):  # type: ignore[no-untyped-def]
    real = cudnn_layout.layout

    def wrong(c, q, k, v):  # type: ignore[no-untyped-def]
        lay = real(c, q, k, v)
        edit(lay, c)
        return lay
    return wrong


def _shift_offsets(lay, c):  # type: ignore[no-untyped-def]
    """The first document one token longer, the second one shorter: their boundary a token late."""
    for role in ("q", "k", "v", "o", "stats"):
        per_token = lay.spec.operand(role).dims[1] * lay.spec.operand(role).dims[3]
        shifted = lay.runtime[f"{role}_offset"].clone()
        shifted[1] += per_token
        lay.runtime[f"{role}_offset"] = shifted
    for role in ("seq_len_q", "seq_len_kv"):
        lens = lay.runtime[role].clone()
        lens[0] += 1
        lens[1] -= 1
        lay.runtime[role] = lens


def _offsets_in_tokens(lay, c):  # type: ignore[no-untyped-def]
    for role in ("q", "k", "v", "o", "stats"):
        per_token = lay.spec.operand(role).dims[1] * lay.spec.operand(role).dims[3]
        lay.runtime[f"{role}_offset"] = lay.runtime[f"{role}_offset"] // per_token


def _table_not_shuffled(lay, c):  # type: ignore[no-untyped-def]
    for role in ("k_table", "v_table"):
        t = lay.runtime[role]
        lay.runtime[role] = torch.arange(t.numel(), dtype=torch.int32).view_as(t)


def _kv_lens_ignored(lay, c):  # type: ignore[no-untyped-def]
    lay.runtime["seq_len_kv"] = torch.full_like(lay.runtime["seq_len_kv"], c.kv_seq_len)


def _replace_keywords(lay, **changes):  # type: ignore[no-untyped-def]
    keywords = dict(lay.spec.keywords)
    keywords.update(changes)
    lay.spec = dataclasses.replace(lay.spec, keywords=tuple(keywords.items()))


def _head_major_strides(dims):  # type: ignore[no-untyped-def]
    b, h, s, d = dims
    return (h * s * d, s * d, d, 1)


def _kv_heads_reversed(real):  # type: ignore[no-untyped-def]
    calls = []

    def wrong(t):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(t.flip(1) if len(calls) in (2, 3) else t)  # K and V: their heads in the wrong order
    return wrong


def _backward_without_window(real):  # type: ignore[no-untyped-def]
    def wrong(cudnn, spec, backward, handle):  # type: ignore[no-untyped-def]
        if backward:
            spec = dataclasses.replace(spec, keywords=tuple((k, v) for k, v in spec.keywords
                                                            if k != "diagonal_band_left_bound"))
        return real(cudnn, spec, backward, handle)
    return wrong


WRONG_MAPPINGS = {
    # the token-major buffers declared with head-major strides: S == H so only the values tell
    "layout-strides": (lambda mp: mp.setattr(cudnn_layout, "token_major_strides", _head_major_strides),
                       case(seq_len=8, heads=8, kv_heads=8)),
    "top-left-instead-of-bottom-right": (
        lambda mp: mp.setattr(cudnn_layout, "mask_arguments", _patch_keywords(diagonal_alignment="TOP_LEFT")),
        case(seq_len=20, kv_seq_len=50)),
    "left-bound-is-the-window": (
        lambda mp: mp.setattr(cudnn_layout, "mask_arguments",
                              _patch_keywords(diagonal_band_left_bound=lambda left: left - 1)),
        case(window=5, seq_len=40)),
    "right-bound-off-by-one": (
        lambda mp: mp.setattr(cudnn_layout, "mask_arguments",
                              _patch_keywords(diagonal_band_right_bound=lambda right: right + 1)),
        case(causal=False, window=5, seq_len=40)),
    "ragged-offsets-in-tokens": (lambda mp: mp.setattr(cudnn_adapter, "layout", _patch_layout(_offsets_in_tokens)),
                                 case(documents=3)),
    "document-boundary-off-by-one": (lambda mp: mp.setattr(cudnn_adapter, "layout", _patch_layout(_shift_offsets)),
                                     case(documents=3)),
    "page-table-ignored": (lambda mp: mp.setattr(cudnn_adapter, "layout", _patch_layout(_table_not_shuffled)),
                           CASES["paged"][0]),
    "kv-lengths-ignored": (lambda mp: mp.setattr(cudnn_adapter, "layout", _patch_layout(_kv_lens_ignored)),
                           CASES["ragged-kv-fwd-bwd"][0]),
    "scale-not-passed": (lambda mp: mp.setattr(cudnn_adapter, "layout", _patch_layout(
        lambda lay, c: _replace_keywords(lay, attn_scale=None))), case()),
    "scale-1-over-d": (lambda mp: mp.setattr(cudnn_adapter, "layout", _patch_layout(
        lambda lay, c: _replace_keywords(lay, attn_scale=1 / c.head_dim))), case()),
    "gqa-head-order": (lambda mp: mp.setattr(cudnn_layout, "to_token_major",
                                             _kv_heads_reversed(cudnn_layout.to_token_major)),
                       case(heads=8, kv_heads=2)),
    "backward-without-the-window": (lambda mp: mp.setattr(cudnn_graph, "build_graph",
                                                          _backward_without_window(cudnn_graph.build_graph)),
                                    case(window=4, seq_len=40, mode="bwd")),
}



def _and_forget(sabotage: Sabotage) -> Sabotage:
    """The sabotage, then the graphs built so far forgotten: the sabotaged mapping builds its own."""
    def sabotage_and_forget(mp: pytest.MonkeyPatch) -> None:
        sabotage(mp)
        cudnn_graph.clear_cache()
    return sabotage_and_forget


SABOTAGES = {name: (_and_forget(sabotage), c) for name, (sabotage, c) in WRONG_MAPPINGS.items()}
STANDIN = Standin(name="cudnn", install=install, backends=(CudnnBackend,),
                  cases={name: c for name, (c, _) in CASES.items()}, sabotages=SABOTAGES, check=check)


def test_the_full_last_page_case_has_one() -> None:
    """paged-full-last-page really fills its requests' last pages (a table read one page short would show)."""
    c = CASES["paged-full-last-page"][0]
    assert all(n % c.page_size == 0 for n in workload.request_kv_lens(c))
    assert packing.block_table(workload.pages(c), "cpu").shape == (2, 2)


# ---- refusals ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("c, words", [
    (case(dtype="float32"), "float32 is not supported (cuDNN's SDPA takes float16 or bfloat16)"),
    (case(softcap=30.0), "cuDNN's SDPA graph has no soft-cap"),
    (case(documents=3, batch=2, page_size=16), "documents inside a paged cache would need a document mask"),
    (case(batch=2, seq_len=1, kv_seq_len=64, page_size=16, mode="fwd_bwd"), "sdpa_backward takes no page tables"),
    (case(alibi=True, heads=2, kv_heads=1, tp=4), "needs the whole model's slopes"),
    (case(alibi=True, causal=False), "cuDNN takes ALiBi only with a causal mask"),
    (case(alibi=True, seq_len=16, kv_seq_len=64), "cuDNN refuses ALiBi with bottom-right alignment"),
    (case(alibi=True, batch=2, seq_len=4, kv_seq_len=64, kv_lengths="random"),
     "cuDNN refuses ALiBi with bottom-right alignment"),
])
def test_reasons(c, words: str) -> None:  # type: ignore[no-untyped-def]
    from attnbench.backends.base import refusal

    reason = refusal(CudnnBackend(), c)
    assert reason is not None and words in reason, reason


def test_kv_shared_is_not_mapped_by_name() -> None:
    from attnbench.backends.base import refusal

    c = case(batch=2, seq_len=1, kv_seq_len=64, heads=4, kv_heads=1, head_dim=48, head_dim_v=32, kv_shared=True)
    assert refusal(CudnnBackend(), c) == "attnbench does not map kv_shared onto cudnn yet"


@pytest.mark.parametrize("c", [case(alibi=True, seq_len=16, kv_seq_len=64),
                               case(alibi=True, batch=2, seq_len=4, kv_seq_len=64, kv_lengths="random"),
                               case(alibi=True, heads=2, kv_heads=1, tp=4)],
                         ids=["sq-less-than-sk", "ragged-kv", "tp"])
def test_the_alibi_refusals_are_real_differences(standin: StandinState, monkeypatch: pytest.MonkeyPatch,
                                                 c) -> None:  # type: ignore[no-untyped-def]
    """Each ALiBi case the adapter refuses would be answered wrongly by cuDNN's top-left ALiBi graph: let one
    through and the stand-in (cuDNN's semantics) disagrees with the reference."""
    monkeypatch.setattr(CudnnBackend, "unsupported", lambda self, case: None)
    record = measure_one(c, CudnnBackend())
    assert record.status == "mismatch", (record.status, record.reason)


def test_two_sided_alibi_is_cudnns_own_refusal_too(standin: StandinState, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(CudnnBackend, "unsupported", lambda self, case: None)
    record = measure_one(case(alibi=True, causal=False, window=4), CudnnBackend())
    assert record.status == "skipped"
    assert record.reason == ("cuDNN refused: When alibi mask is used, diagonal_band_right_bound needs to be set "
                             "to 0.")


def test_slopes_agree_with_the_conventions_for_the_graphs_heads() -> None:
    for heads in (1, 4, 6, 8, 12, 16):
        assert torch.allclose(cudnn_slopes(heads), torch.tensor(workload.alibi_slopes(heads), dtype=torch.float64))


# ---- availability ------------------------------------------------------------------------------------------------
def test_availability_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cudnn", None)  # import raises ImportError
    assert CudnnBackend().availability("cuda").startswith("nvidia-cudnn-frontend is not installed")
    old = make_cudnn(StandinState())
    old.__version__ = "1.23.0"
    monkeypatch.setitem(sys.modules, "cudnn", old)
    assert CudnnBackend().availability("cuda") == ("nvidia-cudnn-frontend 1.23.0 is older than 1.32, whose graph API "
                                                   "attnbench maps")
    monkeypatch.setitem(sys.modules, "cudnn", make_cudnn(StandinState()))
    assert CudnnBackend().availability("cpu") == "needs CUDA (cuDNN's SDPA has no CPU engine)"
    on_cpu_too(monkeypatch, CudnnBackend)

    def no_library() -> int:
        raise RuntimeError("Unable to find symbol cudnnGetVersion")

    sys.modules["cudnn"].backend_version = no_library
    assert CudnnBackend().availability("cpu") == ("the cuDNN library does not load for the frontend (Unable to find "
                                                  "symbol cudnnGetVersion)")
    sys.modules["cudnn"].backend_version = lambda: 90500
    assert CudnnBackend().availability("cpu") == ("cuDNN 9.5.0 is older than 9.6.0 (bottom-right causal masks at "
                                                  "any length)")


def test_registered_and_listed() -> None:
    assert "cudnn" in default_registry().names()
    assert CudnnBackend.cost.cuda.efficiency_fwd == 0.6


# ---- conformance against nvidia-cudnn-frontend 1.32.0's real signatures -------------------------------------------
def install_fixture(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    fixture = importlib.import_module(FIXTURE)
    monkeypatch.setitem(sys.modules, "cudnn", fixture)
    monkeypatch.setitem(sys.modules, "cudnn._compiled_module", fixture._compiled_module)
    return fixture


def test_calls_match_cudnn_frontend_1_32_0(monkeypatch: pytest.MonkeyPatch) -> None:
    install_fixture(monkeypatch)
    conformance = check_backend(CudnnBackend())
    assert conformance.state == "ok", conformance.summary
    by_name = {v.function: v for v in conformance.verdicts}
    binding = by_name["cudnn._compiled_module.backend_graph.sdpa"]
    assert binding.state == "ok" and binding.signature_source == "docstring"
    assert "(signature from the docstring)" in conformance.summary
    capture = by_name["cudnn.pygraph.sdpa"]
    assert any("keyword 'diagonal_band_left_bound' goes to **kwargs" in n for n in capture.notes)


def test_a_renamed_binding_keyword_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    fixture = install_fixture(monkeypatch)
    renamed = fixture.SDPA_DOC.replace("diagonal_band_left_bound:", "left_bound:")
    monkeypatch.setattr(fixture.backend_graph, "sdpa", fixture._Binding("sdpa", renamed))
    conformance = check_backend(CudnnBackend())
    assert conformance.state == "mismatch"
    assert conformance.problem.parameter == "diagonal_band_left_bound"
    assert conformance.problem.function == "cudnn._compiled_module.backend_graph.sdpa"


# ---- the real frontend, where it is installed (it imports without a GPU or libcudnn) ------------------------------
REAL_CASES = ["gqa-bottom-right-fwd-bwd", "two-sided-fwd-bwd", "documents-fwd-bwd", "ragged-kv-fwd-bwd", "paged",
              "alibi-six-heads-bwd", "head-dim-v-fwd-bwd"]


@pytest.fixture
def real_cudnn() -> types.ModuleType:
    cudnn = pytest.importorskip("cudnn")
    if cudnn_adapter.version_tuple(cudnn.__version__) < cudnn_adapter.MIN_FRONTEND:
        pytest.skip(f"nvidia-cudnn-frontend {cudnn.__version__} is older than the one mapped")
    return cudnn


@pytest.mark.parametrize("name", REAL_CASES)
def test_the_installed_frontend_validates_the_graphs_attnbench_declares(  # type: ignore[no-untyped-def]
        real_cudnn, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The real frontend's own validator (cudnn._sdpa_validate, Python: it runs without a GPU) accepts each graph the
    adapter builds, forward and backward; planning needs the GPU and is not reached here."""
    from attnbench.verify.inputs import make_inputs

    validated = []
    monkeypatch.setattr(cudnn_graph, "pin_backend", lambda cudnn, graph: (graph.validate(), validated.append(1),
                                                                             ("-", 0.0, 0.0))[2])
    c = CASES[name][0]
    inputs = make_inputs(c)
    lay = cudnn_layout.layout(c, inputs.q, inputs.k, inputs.v)
    for backward in ([False, True] if c.needs_grad else [False]):
        cudnn_graph.build_graph(real_cudnn, lay.spec, backward, None)
    assert len(validated) == (2 if c.needs_grad else 1)


def test_the_installed_frontend_refuses_what_the_adapter_refuses(  # type: ignore[no-untyped-def]
        real_cudnn, monkeypatch: pytest.MonkeyPatch) -> None:
    """ALiBi with bottom-right alignment and a two-sided ALiBi window are cuDNN's own refusals, not attnbench's."""
    from attnbench.verify.inputs import make_inputs

    monkeypatch.setattr(cudnn_graph, "pin_backend", lambda cudnn, graph: (graph.validate(), ("-", 0.0, 0.0))[1])
    c = case(alibi=True, head_dim=64)
    inputs = make_inputs(c)
    lay = cudnn_layout.layout(c, inputs.q, inputs.k, inputs.v)
    for change, words in (({"diagonal_alignment": "BOTTOM_RIGHT"}, "Bottom right causal mask is only supported"),
                          ({"diagonal_band_right_bound": 3}, "diagonal_band_right_bound needs to be set to 0")):
        keywords = dict(lay.spec.keywords) | change
        spec = dataclasses.replace(lay.spec, keywords=tuple(keywords.items()))
        with pytest.raises(real_cudnn.cudnnGraphNotSupportedError, match=words) as refused:
            cudnn_graph.build_graph(real_cudnn, spec, False, None)
        assert CudnnBackend().skip_reason(refused.value, []).startswith("cuDNN refused: ")


def test_doctor_holds_the_calls_against_the_installed_frontend(real_cudnn) -> None:  # type: ignore[no-untyped-def]
    conformance = check_backend(CudnnBackend())
    assert conformance.state == "ok", conformance.summary
