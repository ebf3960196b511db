"""Every adapter's calls held against the libraries' real signatures (attnbench.backends.conformance).

Three kinds of test: the declarations against the libraries installed here (torch, xformers); the
declarations against recorded copies of the signatures of libraries that do not install on a CPU
(tests/signatures/: flash-attn 2.8.3, FlashAttention 3, flash-attn-4 4.0.0b36, torch 2.11's flex), with
renamed and moved parameters that must be reported by name; and each adapter's real calls, recorded
through a spy, equal to its declaration, so that changing a call without its declaration fails here.
What a call returns is held too: torch 2.11's FA4 route unpacks two values from flash-attn-4's forward, which
returns two in 4.0.0b18 and five in 4.0.0b36 (both recorded from their wheels).
"""

from __future__ import annotations

import importlib
import inspect
import sys
import types

import pytest

import attnbench.backends.conformance as conformance_module
import attnbench.backends.flash as flash
import attnbench.backends.flex as flex
from attnbench.backends.conformance import (
    LibraryCall,
    Returns,
    Unpack,
    UnpackedCall,
    check_backend,
    check_call,
    check_signature,
    conformance_problem,
    installed_signatures,
    returns_of,
    unpacks_of,
)
from attnbench.backends.flash import FlashAttn2, FlashAttn3, FlashAttn4
from attnbench.backends.flex import (
    CREATE_BLOCK_MASK_CALL,
    FLEX_ATTENTION_CALL,
    FlexBackend,
)
from attnbench.backends.registry import default_registry
from attnbench.backends.sdpa import SDPA_CALL, SdpaAuto, SdpaFlashFa4, SdpaMath
from attnbench.backends.xformers_ops import (
    BIAS_CALLS,
    DISPATCH_CALLS,
    MEA_CALL,
    XformersBackend,
)
from attnbench.core.case import Case
from attnbench.verify.inputs import CaseData
from tests.helpers import make_case, measure_one, on_cpu_too


def recorded(name: str) -> types.ModuleType:
    """A module of tests/signatures/: functions with a library's recorded parameter list."""
    return importlib.import_module(f"tests.signatures.{name}")


def fake_module(name: str, **functions: object) -> types.ModuleType:
    module = types.ModuleType(name)
    for attr, fn in functions.items():
        setattr(module, attr, fn)
    return module


def problems_of(call: LibraryCall, fn: object) -> list[tuple[str, str]]:
    found, _ = check_signature(call, inspect.signature(fn))  # type: ignore[arg-type]
    return [(p.parameter, p.text) for p in found]


# --- the libraries installed here -------------------------------------------------------------------

def test_sdpa_call_matches_installed_torch_read_from_the_aten_schema() -> None:
    import torch.nn.functional as F

    with pytest.raises(ValueError):
        inspect.signature(F.scaled_dot_product_attention)  # a builtin: inspect cannot read it
    (sig, *_), source = installed_signatures(F.scaled_dot_product_attention)
    assert source == "aten schema aten::scaled_dot_product_attention"
    assert list(sig.parameters)[:6] == ["query", "key", "value", "attn_mask", "dropout_p", "is_causal"]
    assert sig.parameters["enable_gqa"].kind is inspect.Parameter.KEYWORD_ONLY  # as the Python binding enforces
    verdict = check_call(SDPA_CALL)
    assert verdict.state == "ok", verdict.detail
    for backend in (SdpaAuto(), SdpaMath()):
        conformance = check_backend(backend)
        assert conformance.state == "ok"
        assert conformance.summary.startswith(
            "ok: scaled_dot_product_attention(query, key, value, enable_gqa=, is_causal=, attn_mask=) matches")


def test_sdpa_docstring_is_the_fallback_and_agrees_on_our_call(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.nn.functional as F

    import attnbench.backends.conformance as conformance

    monkeypatch.setattr(conformance, "_aten_schema_signature", lambda obj: None)
    (sig, *_), source = installed_signatures(F.scaled_dot_product_attention)
    assert source == "docstring"
    assert list(sig.parameters) == ["query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
                                    "enable_gqa"]
    assert check_signature(SDPA_CALL, sig) == ([], [])


def test_flex_calls_match_installed_torch() -> None:
    conformance = check_backend(FlexBackend())
    assert conformance.state == "ok", conformance.summary
    assert [v.function for v in conformance.verdicts] == [
        "torch.nn.attention.flex_attention.flex_attention", "torch.nn.attention.flex_attention.create_block_mask",
        "torch.nn.attention.experimental._paged_attention.PagedAttention"]
    assert all(v.signature_source == "inspect.signature" for v in conformance.verdicts)


def test_xformers_calls_match_installed_xformers() -> None:
    pytest.importorskip("xformers.ops")
    conformance = check_backend(XformersBackend())
    states = {v.function.rsplit(".", 1)[-1]: v.state for v in conformance.verdicts}
    assert states == {"memory_efficient_attention": "ok", "LowerTriangularFromBottomRightMask": "ok",
                      "LowerTriangularFromBottomRightLocalAttentionMask": "ok",
                      "LocalAttentionFromBottomRightMask": "ok", "Inputs": "ok", "_dispatch_fw": "ok",
                      "_dispatch_bw": "ok", "from_seqlens": "ok", "make_causal_from_bottomright": "ok",
                      "make_local_attention_from_bottomright": "ok", "make_local_attention": "ok",
                      "from_seqlens_local": "ok"}
    assert conformance.state == "ok"
    window = next(v for v in conformance.verdicts if v.function.endswith("LocalAttentionMask"))
    assert window.signature == "LowerTriangularFromBottomRightLocalAttentionMask(_window_size)"


def test_libraries_that_are_not_installed_are_not_applicable() -> None:
    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash_attn is installed here")
    conformance = check_backend(FlashAttn2())
    assert conformance.state == "n/a" and conformance.summary == "n/a: flash-attn not installed"
    assert conformance.problem is None


# --- recorded signatures of libraries that do not install on a CPU ----------------------------------

BUNDLED_CUTE = "flash-attn 2.8.3's bundled cute 0.1.0"
FLASH = {"flash-attn 2.8.3": (FlashAttn2, "flash_attn", "flash_attn_2_8_3"),
         "FA3 hopper HEAD": (FlashAttn3, "flash_attn_interface", "flash_attn_interface_hopper"),
         "FA3 at v2.8.3": (FlashAttn3, "flash_attn_interface", "flash_attn_interface_v2_8_3"),
         "flash-attn-4 4.0.0b36": (FlashAttn4, "flash_attn.cute", "flash_attn_cute_4_0_0b36"),
         BUNDLED_CUTE: (FlashAttn4, "flash_attn.cute", "flash_attn_cute_bundled_0_1_0")}


@pytest.mark.parametrize("label", [label for label in FLASH if label != BUNDLED_CUTE])
def test_flash_adapters_match_the_recorded_signatures(monkeypatch: pytest.MonkeyPatch, label: str) -> None:
    backend_class, module, fixture = FLASH[label]
    monkeypatch.setitem(sys.modules, module, recorded(fixture))
    conformance = check_backend(backend_class())
    assert conformance.state == "ok", conformance.summary
    dense = backend_class().library_calls()[0]
    assert conformance.summary.startswith(f"ok: {dense.spelled()}")
    assert dense.keywords[:3] == ("causal", "window_size", "softmax_scale")  # the dense call, as before the axes
    # The varlen and paged entry points were recorded where the fixture has them; elsewhere they are optional.
    checked = {v.function.rsplit(".", 1)[1] for v in conformance.verdicts if v.state == "ok"}
    assert checked == FLASH_ENTRY_POINTS.get(label, {"flash_attn_func"})


def test_flash_attn_4s_qv_call_does_not_fit_the_prototype_flash_attn_2_bundles(monkeypatch: pytest.MonkeyPatch) -> None:
    """flash-attn 2.8.3's own flash_attn/cute 0.1.0 has no qv (absorbed MLA): the mismatch names it. (That prototype is
    never run as FlashAttention 4 anyway: availability refuses a flash_attn.cute that flash-attn-4 did not install.)"""
    backend_class, module, fixture = FLASH[BUNDLED_CUTE]
    monkeypatch.setitem(sys.modules, module, recorded(fixture))
    conformance = check_backend(backend_class())
    assert conformance.state == "mismatch" and conformance.problem.parameter == "qv"


FLASH_ENTRY_POINTS = {
    "flash-attn 2.8.3": {"flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache"},
    "FA3 hopper HEAD": {"flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache"},
}


def test_flex_calls_match_torch_2_11_as_recorded_on_the_h200() -> None:
    fixture = recorded("torch_2_11_flex_attention")
    for call in (FLEX_ATTENTION_CALL, CREATE_BLOCK_MASK_CALL):
        assert problems_of(call, getattr(fixture, call.qualname)) == []


def test_a_renamed_keyword_is_reported_with_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window=(-1, -1), softcap=0.0,
                        alibi_slopes=None, deterministic=False):
        raise NotImplementedError

    monkeypatch.setitem(sys.modules, "flash_attn", fake_module("flash_attn", flash_attn_func=flash_attn_func))
    conformance = check_backend(FlashAttn2())
    assert conformance.state == "mismatch"
    assert conformance.problem is not None and conformance.problem.parameter == "window_size"
    assert conformance.summary == ("MISMATCH: keyword 'window_size' is not a parameter of the installed "
                                   "flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window, softcap, "
                                   "alibi_slopes, deterministic)")


def test_a_moved_positional_parameter_is_reported_with_its_name() -> None:
    def create_block_mask(mask_mod, B, H, KV_LEN, Q_LEN, device=None, BLOCK_SIZE=128):
        raise NotImplementedError

    (parameter, text), *rest = problems_of(CREATE_BLOCK_MASK_CALL, create_block_mask)
    assert parameter == "Q_LEN"
    assert text == ("positional argument 4 ('Q_LEN') moved: the installed create_block_mask(mask_mod, B, H, KV_LEN, "
                    "Q_LEN, device, BLOCK_SIZE) has 'KV_LEN' there, and 'Q_LEN' at position 5")
    assert [p for p, _ in rest] == ["KV_LEN"]


def test_a_parameter_inserted_before_ours_moves_it() -> None:
    bias = BIAS_CALLS[1]  # LowerTriangularFromBottomRightLocalAttentionMask(W + 1), passed by position

    class LowerTriangularFromBottomRightLocalAttentionMask:
        def __init__(self, window_left: int, _window_size: int) -> None: ...

    assert problems_of(bias, LowerTriangularFromBottomRightLocalAttentionMask) == [(
        "_window_size", "positional argument 1 ('_window_size') moved: the installed "
        "LowerTriangularFromBottomRightLocalAttentionMask(window_left, _window_size) has 'window_left' there, "
        "and '_window_size' at position 2")]


def test_a_positional_parameter_that_became_keyword_only_or_vanished() -> None:
    call = LibraryCall("m", "f", positional=("q", "k", "v", "scale"))

    def keyword_only(q, k, v, *, scale=None): ...

    def gone(q, k, v): ...

    assert problems_of(call, keyword_only) == [("scale", "positional argument 4 ('scale') moved: the installed "
                                                "f(q, k, v, *, scale) takes 3 positional arguments, and 'scale' "
                                                "is keyword-only")]
    assert problems_of(call, gone)[0][1].endswith("takes 3 positional arguments, and no parameter 'scale'")


def test_keywords_against_positional_only_required_and_var_keyword_parameters() -> None:
    call = LibraryCall("m", "f", positional=("q",), keywords=("scale",))

    def positional_only(q, scale=None, /): ...

    def new_required(q, scale=None, *, layout): ...

    def var_keyword(q, **kwargs): ...

    assert problems_of(call, positional_only) == [("scale", "keyword 'scale' is positional-only in the installed "
                                                   "f(q, scale, /)")]
    assert problems_of(call, new_required) == [("layout", "the installed f(q, scale, *, layout) requires 'layout', "
                                                "which attnbench does not pass")]
    problems, notes = check_signature(call, inspect.signature(var_keyword))
    assert problems == [] and notes == ["keyword 'scale' goes to **kwargs"]


def test_a_missing_function_is_a_mismatch_unless_the_adapter_does_without_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fake_library", fake_module("fake_library"))
    missing = check_call(LibraryCall("fake_library", "flash_attn_func"))
    assert (missing.state, missing.parameter) == ("mismatch", "flash_attn_func")
    assert missing.detail == "the installed fake_library has no flash_attn_func"
    assert check_call(LibraryCall("fake_library", "_dispatch_fw", optional=True)).state == "n/a"


class _NoSignature:
    """A callable inspect.signature cannot read, with no schema and no signature in its docstring."""

    __signature__ = "not a signature"  # inspect.signature raises TypeError on anything but a Signature
    __doc__ = "no text signature here"

    def __call__(self) -> None: ...


def test_an_unreadable_signature_is_unchecked_not_a_crash() -> None:
    verdict = check_call(LibraryCall("m", "f", positional=("q",)), resolve=lambda call: _NoSignature())
    assert verdict.state == "unchecked" and verdict.detail.startswith("m.f: no signature to read (")


# --- a mismatch in a run is a skip, before any tensor exists ----------------------------------------

def test_runner_skips_a_backend_whose_library_renamed_a_keyword(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window=(-1, -1), softcap=0.0,
                        alibi_slopes=None, deterministic=False):
        calls.append(1)
        raise AssertionError("must not be called")

    monkeypatch.setitem(sys.modules, "flash_attn", fake_module("flash_attn", flash_attn_func=flash_attn_func))
    on_cpu_too(monkeypatch, FlashAttn2)
    data = CaseData(make_case(dtype="bfloat16", causal=True, window=8))
    record = measure_one(data.case, FlashAttn2(), data)
    assert record.status == "skipped"
    assert record.reason.startswith("adapter does not match the installed flash-attn: keyword 'window_size' is "
                                    "not a parameter of the installed flash_attn_func(")
    assert ("attnbench calls flash_attn_func(q, k, v, causal=, window_size=, softmax_scale=, softcap=, alibi_slopes=, "
            "deterministic=)" in record.reason)
    assert calls == [] and "inputs" not in vars(data)  # judged before any tensor was made


def test_runner_skips_sdpa_when_torch_renames_a_keyword(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.nn.functional as F

    def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, causal=False, *,
                                     scale=None, enable_gqa=False):
        raise AssertionError("must not be called")

    monkeypatch.setattr(F, "scaled_dot_product_attention", scaled_dot_product_attention)
    record = measure_one(make_case(causal=True), SdpaMath())
    assert record.status == "skipped"
    assert "keyword 'is_causal' is not a parameter of the installed scaled_dot_product_attention(" in record.reason


def test_runner_skips_xformers_when_a_bias_class_moves_the_parameter_we_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_xformers import _standin_module

    class LowerTriangularFromBottomRightLocalAttentionMask:
        def __init__(self, window_left: int, _window_size: int) -> None:
            raise AssertionError("must not be called")

    ops = _standin_module()
    moved = LowerTriangularFromBottomRightLocalAttentionMask
    ops.fmha.attn_bias.LowerTriangularFromBottomRightLocalAttentionMask = moved
    monkeypatch.setitem(sys.modules, "xformers.ops", ops)
    on_cpu_too(monkeypatch, XformersBackend)
    record = measure_one(make_case(causal=False), XformersBackend())  # even a case that needs no window
    assert record.status == "skipped"
    assert "positional argument 1 ('_window_size') moved" in record.reason


# --- each declaration equals what its adapter really passes -----------------------------------------

class Spy:
    """Wraps a callable; remembers how many positional arguments and which keywords each outermost call
    passed (a library calling itself through its module, as create_block_mask(_compile=True) does, is not us)."""

    def __init__(self, fn: object) -> None:
        self.fn, self.positional, self.keywords, self.depth = fn, set(), set(), 0

    def __call__(self, *args: object, **kwargs: object) -> object:
        if self.depth == 0:
            self.positional.add(len(args))
            self.keywords |= set(kwargs)
        self.depth += 1
        try:
            return self.fn(*args, **kwargs)  # type: ignore[operator]
        finally:
            self.depth -= 1

    def assert_declared(self, call: LibraryCall) -> None:
        assert self.positional == {len(call.positional)}, call.target
        assert self.keywords == set(call.keywords), call.target


SDPA_CASES = [make_case(), make_case(causal=True), make_case(causal=True, seq_len=16, kv_seq_len=40),
              make_case(heads=4, kv_heads=2, window=4)]


def test_sdpa_passes_exactly_what_it_declares(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.nn.functional as F

    spy = Spy(F.scaled_dot_product_attention)
    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    for c in SDPA_CASES:
        assert measure_one(c, SdpaMath()).status == "ok"
    spy.assert_declared(SDPA_CALL)


@pytest.mark.slow
def test_flex_passes_exactly_what_it_declares(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.nn.attention.flex_attention as fa

    attention, block_mask = Spy(fa.flex_attention), Spy(fa.create_block_mask)
    monkeypatch.setattr(fa, "create_block_mask", block_mask)
    # eager: tiny cases, no compile
    monkeypatch.setattr(flex, "compiled_flex_attention", lambda dynamic=False: attention)
    for c in (make_case(seq_len=32, heads=2, kv_heads=1, causal=True, window=4),
              make_case(seq_len=32, heads=2, kv_heads=2),
              make_case(seq_len=32, heads=2, kv_heads=2, causal=True, documents=2, softcap=5.0),  # score_mod
              make_case(batch=2, seq_len=1, kv_seq_len=64, heads=2, kv_heads=1, causal=True, page_size=16)):  # paged
        record = measure_one(c, FlexBackend())
        # eager flex (no compile, for tiny cases) is not the generated kernel, and the profiler says so
        assert record.status in ("ok", "wrong_kernel"), record.reason
    attention.assert_declared(FLEX_ATTENTION_CALL)
    block_mask.assert_declared(CREATE_BLOCK_MASK_CALL)


def flash_standin_spies(backend: flash._Flash, module: str, none_unbounded: bool, qv: str | None,
                        monkeypatch: pytest.MonkeyPatch) -> dict[str, Spy]:
    """Install the flash stand-ins as `module`'s entry points that `backend` calls, each behind a spy."""
    from tests.test_flash_fp8_standin import make_fa3
    from tests.test_flash_standin import (
        standin_flash_attn_func,
        standin_kvcache_func,
        standin_varlen_func,
    )

    functions = {"flash_attn_func": standin_flash_attn_func(none_unbounded, returns_lse=none_unbounded, qv_rule=qv),
                 "flash_attn_varlen_func": standin_varlen_func(none_unbounded, none_unbounded, qv_rule=qv)}
    if backend.spec.page_table_keyword is not None:
        functions["flash_attn_with_kvcache"] = standin_kvcache_func(backend.spec.page_table_keyword,
                                                                    backend.spec.page_multiple, qv_rule=qv)
    if backend.spec.fp8_numerics is not None:  # FP8 inputs go to the FP8 stand-in (tests/test_flash_fp8_standin.py)
        fp8_module = make_fa3()
        functions = {name: either(fn, getattr(fp8_module, name)) for name, fn in functions.items()}
    spies = {f"{module}.{name}": Spy(fn) for name, fn in functions.items()}
    monkeypatch.setitem(sys.modules, module, fake_module(module, **{name: spies[f"{module}.{name}"]
                                                                    for name in functions}))
    return spies


def flash_cases(backend: flash._Flash) -> list[Case]:
    """Each entry point `backend` has, with every score modifier it maps: dense, packed documents, a paged cache,
    absorbed MLA (qv) and FP8 where it takes them."""
    base = dict(dtype="bfloat16", causal=True, heads=2, kv_heads=2, head_dim=16)
    scores = {"softcap": 2.0, **({"alibi": True} if "alibi" in backend.capabilities.workload_axes else {})}
    cases = [make_case(dtype="bfloat16", causal=True, window=4), make_case(dtype="bfloat16"),
             make_case(**base, seq_len=32, **scores), make_case(**base, seq_len=32, documents=3, **scores)]
    if backend.spec.page_table_keyword is not None or backend.spec.varlen_pages:
        cases.append(make_case(**base, batch=2, seq_len=2, kv_seq_len=300, kv_lengths="random",
                               page_size=backend.spec.page_multiple * 16 if backend.spec.page_multiple == 1
                               else backend.spec.page_multiple, **scores))
    if backend.spec.takes_qv:  # absorbed MLA through each entry point: dense, packed documents, a paged cache
        latent = 512 if isinstance(backend, FlashAttn4) else 256
        mla = dict(dtype="bfloat16", causal=True, heads=2, kv_heads=1, head_dim=latent + 64, head_dim_v=latent,
                   kv_shared=True)
        cases += [make_case(**mla, seq_len=8), make_case(**mla, seq_len=12, documents=2),
                  make_case(**mla, batch=2, seq_len=1, kv_seq_len=40, kv_lengths="random", page_size=16)]
    if backend.spec.fp8_numerics is not None:
        fp8 = {**base, "dtype": "float8_e4m3fn", "quant": "head"}
        cases += [make_case(**fp8, seq_len=32), make_case(**fp8, seq_len=32, documents=3),
                  make_case(**fp8, batch=2, seq_len=2, kv_seq_len=300, kv_lengths="random", page_size=16)]
    return cases


@pytest.mark.slow
def test_flash_adapters_pass_exactly_what_they_declare(monkeypatch: pytest.MonkeyPatch) -> None:
    spies: dict[str, Spy] = {}
    for backend, module, none_unbounded, qv in ((FlashAttn2(), "flash_attn", False, None),
                                                (FlashAttn3(), "flash_attn_interface", False, "fa3"),
                                                (FlashAttn4(), "flash_attn.cute", True, "fa4")):
        spies |= flash_standin_spies(backend, module, none_unbounded, qv, monkeypatch)
    on_cpu_too(monkeypatch, FlashAttn2, FlashAttn3, FlashAttn4)
    for backend in (FlashAttn2(), FlashAttn3(), FlashAttn4()):
        for c in flash_cases(backend):
            record = measure_one(c, backend)
            assert record.status == "ok", (backend.name, c.case_id, record.reason)
        for call in backend.library_calls():
            spies[call.target].assert_declared(call)


def either(plain, quantized):  # type: ignore[no-untyped-def]
    """A library function that hands FP8 inputs to `quantized` and the rest to `plain`."""
    def call(q, *args, **kwargs):  # type: ignore[no-untyped-def]
        return (quantized if str(q.dtype) == "torch.float8_e4m3fn" else plain)(q, *args, **kwargs)
    return call


def test_xformers_passes_exactly_what_it_declares(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_xformers import _standin_module

    ops = _standin_module()
    spies = {"memory_efficient_attention": Spy(ops.memory_efficient_attention)}
    ops.memory_efficient_attention = spies["memory_efficient_attention"]
    for name in ("LowerTriangularFromBottomRightMask", "LowerTriangularFromBottomRightLocalAttentionMask",
                 "LocalAttentionFromBottomRightMask"):
        spies[name] = Spy(getattr(ops.fmha.attn_bias, name))
        setattr(ops.fmha.attn_bias, name, spies[name])
    spies["Inputs"], spies["_dispatch_fw"] = Spy(ops.fmha.Inputs), Spy(ops.fmha._dispatch_fw)
    ops.fmha.Inputs, ops.fmha._dispatch_fw = spies["Inputs"], spies["_dispatch_fw"]

    def _dispatch_bw(inp: object, varlen_lse_packed: object) -> object:
        return type("StandinBwOp", (), {"NAME": "standinB"})

    spies["_dispatch_bw"] = Spy(_dispatch_bw)
    ops.fmha._dispatch_bw = spies["_dispatch_bw"]
    monkeypatch.setitem(sys.modules, "xformers.ops", ops)
    on_cpu_too(monkeypatch, XformersBackend)
    monkeypatch.setattr(XformersBackend, "availability", lambda self, device: None)
    for c in (make_case(causal=True), make_case(causal=True, window=4), make_case(window=4), make_case(),
              make_case(causal=True, mode="fwd_bwd")):
        assert measure_one(c, XformersBackend()).status == "ok"
    for call in (MEA_CALL, *BIAS_CALLS, *DISPATCH_CALLS):
        spies[call.name].assert_declared(call)


# --- doctor -----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_doctor_has_a_conformance_line_per_backend_and_says_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.nn.functional as F

    import attnbench.cli.doctor as doctor
    import attnbench.run.env as env

    monkeypatch.setattr(env, "collect_env", lambda device, **_: {"device": device})
    diagnosis = doctor.diagnose("cpu")
    lines = doctor.format_text(diagnosis)
    conformance = [line.split("conformance", 1)[1].strip() for line in lines if "  conformance  " in line]
    assert len(conformance) == len(diagnosis.backends)
    by_name = {b.name: b for b in diagnosis.backends}
    assert by_name["sdpa"].conformance["state"] == "ok"
    sdpa_call = by_name["sdpa"].conformance["calls"][0]
    assert sdpa_call["signature_source"] == "aten schema aten::scaled_dot_product_attention"
    assert by_name["naive"].conformance["summary"].startswith("n/a:")

    def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, causal=False, *,
                                     scale=None, enable_gqa=False):
        raise AssertionError("must not be called")

    monkeypatch.setattr(F, "scaled_dot_product_attention", scaled_dot_product_attention)
    diagnosis = doctor.diagnose("cpu")
    sdpa = next(b for b in diagnosis.backends if b.name == "sdpa")
    assert sdpa.state == "mismatch" and sdpa.conformance["calls"][0]["parameter"] == "is_causal"
    assert not diagnosis.healthy and "sdpa" in {b.name for b in diagnosis.problems}
    assert any(line.strip().startswith("conformance  MISMATCH: keyword 'is_causal'")
               for line in doctor.format_text(diagnosis))



# --- signatures read from a binding's docstring (nanobind and pybind11 write them differently) ------------------

PYBIND11_OVERLOADED = """sdpa(*args, **kwargs)
Overloaded function.

1. sdpa(self: cudnn._compiled_module.pygraph, q: cudnn._compiled_module.tensor, k: cudnn._compiled_module.tensor, \
v: cudnn._compiled_module.tensor, is_inference: Optional[bool] = None, attn_scale: Optional[Union[float, \
cudnn._compiled_module.tensor]] = None, diagonal_alignment: cudnn._compiled_module.diagonal_alignment = \
<diagonal_alignment.TOP_LEFT: 0>, diagonal_band_left_bound: Optional[int] = None, name: str = '') -> \
list[cudnn._compiled_module.tensor]

2. sdpa(self: cudnn._compiled_module.pygraph, q: cudnn._compiled_module.tensor, k: cudnn._compiled_module.tensor, \
v: cudnn._compiled_module.tensor, window: tuple[int, int] = (-1, -1), name: str = '') -> \
list[cudnn._compiled_module.tensor]

        Perform scaled dot product attention.
"""


class _Builtin:
    """A C++ method as bindings expose it: no signature inspect can read, a docstring that states it."""

    __signature__ = "not a signature"

    def __init__(self, name: str, doc: str) -> None:
        self.__name__, self.__doc__ = name, doc

    def __call__(self, *args: object, **kwargs: object) -> None: ...


def test_pybind11_docstrings_with_repr_defaults_and_overloads_are_read() -> None:
    from attnbench.backends.conformance import installed_signatures

    signatures, source = installed_signatures(_Builtin("sdpa", PYBIND11_OVERLOADED))
    assert source == "docstring" and len(signatures) == 2  # the catch-all (*args, **kwargs) line is not one
    first, second = signatures
    assert list(first.parameters) == ["self", "q", "k", "v", "is_inference", "attn_scale", "diagonal_alignment",
                                      "diagonal_band_left_bound", "name"]
    assert first.parameters["diagonal_alignment"].default is not inspect.Parameter.empty  # <enum: 0> is a default
    assert first.parameters["q"].default is inspect.Parameter.empty
    assert list(second.parameters) == ["self", "q", "k", "v", "window", "name"]


def test_an_overloaded_binding_fits_when_one_overload_does() -> None:
    binding = _Builtin("sdpa", PYBIND11_OVERLOADED)
    fits_second = LibraryCall("m", "sdpa", positional=("self", "q", "k", "v"), keywords=("window",))
    verdict = check_call(fits_second, resolve=lambda call: binding)
    assert verdict.state == "ok", verdict.detail
    fits_none = LibraryCall("m", "sdpa", positional=("self", "q", "k", "v"), keywords=("sliding_window_length",))
    verdict = check_call(fits_none, resolve=lambda call: binding)
    assert (verdict.state, verdict.parameter) == ("mismatch", "sliding_window_length")


def test_nanobind_overloads_one_per_line_and_positional_only_markers() -> None:
    from attnbench.backends.conformance import docstring_signatures

    doc = ("build(self, arg: collections.abc.Sequence[cudnn._compiled_module.heur_mode], /) -> None\n"
           "build(self) -> None")
    first, second = docstring_signatures(doc, "build")
    assert [p.kind for p in first.parameters.values()] == [inspect.Parameter.POSITIONAL_ONLY] * 2
    assert list(second.parameters) == ["self"]
    assert problems_of_signature(LibraryCall("m", "build", positional=("self",), keywords=("arg",)), first) == [
        ("arg", "keyword 'arg' is positional-only in the installed build(self, arg, /)")]


def problems_of_signature(call: LibraryCall, sig: inspect.Signature) -> list[tuple[str, str]]:
    found, _ = check_signature(call, sig)
    return [(p.parameter, p.text) for p in found]


def test_a_docstring_that_states_no_signature_is_none() -> None:
    from attnbench.backends.conformance import docstring_signatures

    assert docstring_signatures("Perform scaled dot product attention.", "sdpa") == []
    assert docstring_signatures("sdpa(self, q, k, v", "sdpa") == []  # never closes
    assert docstring_signatures("sdpa(self, 1q)", "sdpa") == []  # not a parameter name


# --- the runtimes beyond PyTorch: their installed signatures, and the recorded ones ------------------------------
RUNTIME_CALLS = {"jax": ("jax.nn", "dot_product_attention"),
                 "openvino": ("openvino.opset13", "scaled_dot_product_attention"),
                 "onnxruntime": ("onnx.helper", "make_node")}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(RUNTIME_CALLS))
def test_the_installed_runtimes_signatures_are_the_recorded_ones(name: str) -> None:
    """The recorded copy is what the installed version states (parameter names, kinds and which have defaults)."""
    import inspect

    from attnbench.backends.conformance import parameter_list

    module, function = RUNTIME_CALLS[name]
    installed = pytest.importorskip(module)
    assert check_backend(default_registry().get(name)).state == "ok"
    got = parameter_list(inspect.signature(getattr(installed, function)))
    assert got == parameter_list(inspect.signature(getattr(recorded("runtimes_cpu"), function)))


def test_a_runtime_signature_without_a_keyword_attnbench_passes_is_a_mismatch_naming_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    def dot_product_attention(query, key, value, bias=None, mask=None, *, scale=None, is_causal=False):  # type: ignore[no-untyped-def]
        raise NotImplementedError  # an older JAX: no local_window_size, no implementation

    monkeypatch.setitem(sys.modules, "jax.nn", types.SimpleNamespace(dot_product_attention=dot_product_attention))
    conformance = check_backend(default_registry().get("jax"))
    assert conformance.state == "mismatch" and conformance.problem.parameter == "local_window_size"


# --- what a call returns: its return statements (else its annotation) against how its caller unpacks it -------------

FA4_RECORDED = "flash_attn_cute_4_0_0b36"
ROUTE_MODULE = "torch.nn.attention._fa4"


def fa4_fwd_b19(q, k, v, softmax_scale=None, causal=False, window_size_left=None, window_size_right=None,
                return_lse=False, cu_seqlens_q=None, cu_seqlens_k=None, seqused_k=None, out=None):  # type: ignore[no-untyped-def]
    return out, lse, p, row_max  # noqa: F821 - 4.0.0b19 to b27: four values under a two-value annotation


fa4_fwd_b19.__annotations__["return"] = "Tuple[torch.Tensor, torch.Tensor]"


def with_route(monkeypatch: pytest.MonkeyPatch, fwd: object, fa4: str = FA4_RECORDED) -> None:
    """flash-attn-4's interface with `fwd` as `_flash_attn_fwd` (the recorded `fa4`'s `_flash_attn_bwd`), called by
    torch 2.11.0's route as recorded."""
    bwd = recorded(fa4)._flash_attn_bwd
    module = fake_module("flash_attn.cute.interface", _flash_attn_fwd=fwd, _flash_attn_bwd=bwd)
    monkeypatch.setitem(sys.modules, "flash_attn.cute.interface", module)
    monkeypatch.setitem(sys.modules, ROUTE_MODULE, recorded("torch_2_11_fa4"))
    monkeypatch.setattr(conformance_module, "installed_as",
                        {ROUTE_MODULE: "torch 2.11.0+cu130", "flash_attn.cute.interface": "flash-attn-4"}.get)


def test_torch_2_11s_fa4_route_does_not_fit_flash_attn_4_0_0b36_as_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    with_route(monkeypatch, recorded(FA4_RECORDED)._flash_attn_fwd)
    conformance = check_backend(SdpaFlashFa4())
    assert conformance.state == "mismatch"
    fwd, bwd = conformance.verdicts[-2:]
    assert (fwd.state, fwd.parameter, fwd.caller) == ("mismatch", "return", f"{ROUTE_MODULE}._fa4_run_forward")
    assert fwd.detail == (
        "torch 2.11.0+cu130's torch.nn.attention._fa4._fa4_run_forward unpacks 2 values from "
        "flash_attn.cute.interface._flash_attn_fwd, which returns 5 in flash-attn-4 (return (out, lse, None, None, "
        "None); return (out, lse, p, row_max, o_lo))")
    # the backward fits: three values, or four with a learnable sink, which torch never passes
    assert bwd.state == "ok" and bwd.notes == ("what it returns: ok: returns 3 or 4, unpacked into 3 values",)
    assert conformance_problem(SdpaFlashFa4()) == (
        f"the installed libraries do not fit each other: {fwd.detail}; install versions that agree")


def test_conformance_fails_when_a_librarys_return_arity_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """flash-attn-4 4.0.0b18 returned (out, lse), as torch 2.11 unpacks it; 4.0.0b19 returned four values while still
    annotating two (the return statements are read first)."""
    b18 = recorded("flash_attn_cute_4_0_0b18")
    with_route(monkeypatch, b18._flash_attn_fwd, "flash_attn_cute_4_0_0b18")
    conformance = check_backend(SdpaFlashFa4())
    assert conformance.state == "ok", conformance.summary
    assert [v.notes for v in conformance.verdicts[-2:]] == [("what it returns: ok: returns 2, unpacked into 2 values",),
                                                            ("what it returns: ok: returns 3, unpacked into 3 values",)]
    with_route(monkeypatch, fa4_fwd_b19, "flash_attn_cute_4_0_0b18")
    conformance = check_backend(SdpaFlashFa4())
    assert conformance.state == "mismatch"
    assert "which returns 4 in flash-attn-4 (return (out, lse, p, row_max))" in conformance.summary


def test_a_value_count_attnbench_unpacks_is_held_like_a_callers() -> None:
    def f(q):  # type: ignore[no-untyped-def]
        return q, q, q

    verdict = check_call(UnpackedCall("m", "f", positional=("q",), unpacks=2), resolve=lambda call: f)
    assert (verdict.state, verdict.caller) == ("mismatch", None)
    assert verdict.detail == ("attnbench unpacks 2 values from m.f, which returns 3 in the installed m "
                              "(return (q, q, q))")
    assert check_call(UnpackedCall("m", "f", positional=("q",), unpacks=3), resolve=lambda call: f).state == "ok"


def returning(annotation: object) -> object:
    """A function whose only word on what it returns is its return annotation."""
    def f(x):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    f.__annotations__["return"] = annotation
    return f


def test_what_a_function_returns_is_read_from_its_statements_then_its_annotation() -> None:
    import typing

    assert returns_of(returning("Tuple[torch.Tensor, torch.Tensor]")) == Returns(
        frozenset({2}), True, "annotated -> Tuple[torch.Tensor, torch.Tensor]")
    evaluated = typing.Tuple[int, int, int]  # noqa: UP006 - flash-attn-4's own spelling, evaluated at its import
    assert returns_of(returning(evaluated)).counts == {3}
    assert returns_of(returning("tuple[torch.Tensor, ...]")) is None
    assert returns_of(returning("Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]")).counts == {1, 2}
    assert returns_of(returning(typing.Optional[tuple[int, int]])).counts == {1, 2}  # noqa: UP045 - likewise
    assert returns_of(returning("tuple[int, int] | None")).counts == {1, 2}
    assert returns_of(returning("list[torch.Tensor]")) is None

    def opaque(x):  # type: ignore[no-untyped-def]
        return helper(x)  # noqa: F821

    def partly(x):  # type: ignore[no-untyped-def]
        if x:
            return x, x

        def inner():  # type: ignore[no-untyped-def]
            return x, x, x, x  # not partly's own

        return helper(inner)  # noqa: F821

    assert returns_of(opaque) is None
    assert returns_of(partly) == Returns(frozenset({2}), False, "return (x, x)")  # one return unread
    verdict = check_call(UnpackedCall("m", "partly", positional=("x",), unpacks=3), resolve=lambda call: partly)
    assert verdict.state == "ok" and verdict.notes[0].startswith("what it returns: unchecked: attnbench unpacks 3")


def test_a_caller_that_unpacks_with_a_star_does_not_unpack_or_is_absent_fits() -> None:
    def five(q):  # type: ignore[no-untyped-def]
        return q, q, q, q, q

    def starred(q):  # type: ignore[no-untyped-def]
        out, lse, *rest = lib.five(q)  # noqa: F821
        return out

    def whole(q):  # type: ignore[no-untyped-def]
        result = lib.five(q)  # noqa: F821
        return result[0]

    assert unpacks_of(starred, "five") == [Unpack(2, starred=True)] and unpacks_of(whole, "five") == []
    for caller, note in ((starred, "ok: returns 5, unpacked into at least 2 values"),
                         (whole, "ok: m.caller does not unpack what five returns"),
                         (None, "n/a: absent.caller is absent (ModuleNotFoundError): nothing here makes this call")):
        declared = LibraryCall("absent" if caller is None else "m", "caller")
        call = UnpackedCall("m", "five", positional=("q",), unpacks=2, caller=declared)
        with pytest.MonkeyPatch.context() as patch:
            patch.setitem(sys.modules, "m", fake_module("m", caller=caller, five=five))
            verdict = check_call(call)
        assert (verdict.state, verdict.notes) == ("ok", (f"what it returns: {note}",))


def test_the_installed_torch_still_unpacks_two_values_from_flash_attn_4() -> None:
    route = pytest.importorskip(ROUTE_MODULE)
    assert unpacks_of(route._fa4_run_forward, "_flash_attn_fwd") == [Unpack(2)]
    assert unpacks_of(route._fa4_run_backward, "_flash_attn_bwd") == [Unpack(3)]


def test_the_recorder_keeps_parameters_annotations_returns_and_unpacking() -> None:
    from tests.signatures.record import record

    source = ("import functools\n\n@functools.cache\ndef f(q: Tensor, k=None, *, flag: bool = False) -> Tuple[A, B]:\n"
              "    '''doc'''\n    a, b = lib.g(q)\n    c = lib.g(k)\n    if flag:\n        return a, b\n"
              "    def h():\n        return 1, 2, 3\n    return (a, b) if c else (a, b, c)\n\n"
              "def f(q):\n    return q\n")
    assert record(source, "f") == "def f(q):\n    raise NotImplementedError('recorded signature only')\n" \
                                  "    return q  # line 15\n"  # the last definition, as Python binds it
    first = source.split("\ndef f(q):")[0]
    assert record(first, "f", frozenset({"g"})) == (
        "def f(q: Tensor, k=None, *, flag: bool=False) -> Tuple[A, B]:\n"
        "    raise NotImplementedError('recorded signature only')\n"
        "    a, b = lib.g(q)  # line 6\n"
        "    return (a, b)  # line 9\n"
        "    return (a, b) if c else (a, b, c)  # line 12\n")
