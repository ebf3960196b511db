"""JAX, ONNX Runtime and OpenVINO, the real runtimes on this CPU: ok against the float64 reference on each mapped
axis, skipped by name where the runtime cannot express a case, and a mismatch for each plausible wrong mapping."""

from __future__ import annotations

import dataclasses

import pytest

from attnbench.backends.registry import default_registry
from tests.helpers import make_case, measure_one

RUNTIMES = ("jax", "onnxruntime", "onnxruntime-mha", "onnxruntime-gqa", "openvino")
CASES = {
    "causal-gqa": dict(causal=True, heads=4, kv_heads=2),
    "full-gqa": dict(causal=False, heads=4, kv_heads=2),
    "kv-longer-causal": dict(causal=True, seq_len=48, kv_seq_len=80, heads=4, kv_heads=2),
    "window-causal": dict(causal=True, window=7, heads=4, kv_heads=2),
    "window-two-sided": dict(causal=False, window=5, heads=4, kv_heads=1),
}
# What each runtime cannot express, and the words of its reason.
SKIPS = {("onnxruntime-gqa", "window-two-sided"): "local_window_size must be -1 when causal is 0"}


def _installed(name: str) -> None:
    module = {"jax": "jax", "openvino": "openvino"}.get(name, "onnxruntime")
    pytest.importorskip(module)


@pytest.mark.slow
@pytest.mark.parametrize("shape", list(CASES))
@pytest.mark.parametrize("name", RUNTIMES)
def test_each_runtime_matches_the_reference(name: str, shape: str) -> None:
    _installed(name)
    record = measure_one(make_case(**CASES[shape]), default_registry().get(name))
    skip = SKIPS.get((name, shape))
    if skip:
        assert record.status == "skipped" and skip in record.reason
        return
    assert record.status == "ok", (record.status, record.reason)
    assert record.extra["threads"] >= 1, record.extra
    assert record.memory_method.startswith("process peak RSS") and record.peak_memory_bytes is not None
    # What ran is the record's one `kernels` field, from the runtime's own profiler (torch.profiler sees no op).
    assert record.kernels and record.kernels_source and "torch" not in record.kernels_source, record.kernels_reason
    assert "kernels" not in record.extra and "kernels_source" not in record.extra
    assert record.attention_share is not None and 0 < record.attention_share <= 1
    assert [k["time_ms"] for k in record.kernels] == sorted((k["time_ms"] for k in record.kernels), reverse=True)
    assert abs(sum(k["share"] for k in record.kernels) - 1) < 0.01
    if name.startswith("onnxruntime"):  # the op's share is of the whole session run, its time outside nodes listed
        from attnbench.backends.onnx_runtime import SESSION_REST

        assert SESSION_REST in {k["name"] for k in record.kernels}, record.kernels


@pytest.mark.slow
@pytest.mark.parametrize("name", RUNTIMES)
def test_the_top_kernel_is_the_runtimes_attention_op(name: str) -> None:
    """On a case large enough for the attention to outweigh the layout work, the profile's top kernel is the one the
    backend declares (ORT's op node, OpenVINO's SDPA node). XLA's CPU executable has no one attention op (its
    largest fusion may be a transposing copy, by a margin timing noise decides), so for JAX its two dots ran."""
    from attnbench.timing.profile import matches

    _installed(name)
    backend = default_registry().get(name)
    # 1K tokens: at 512 OpenVINO's separate scaling Multiply took 54% of one profiled call on a busy 2-core VM
    record = measure_one(make_case(causal=True, seq_len=1024, heads=8, kv_heads=2, head_dim=64), backend)
    assert record.status == "ok", record.reason
    declared = backend.capabilities.attention_kernels("cpu", "fwd")
    if name == "jax":
        assert sum(k["name"].endswith("(dot)") for k in record.kernels) == 2, record.kernels
        return
    assert matches(record.kernels[0]["name"], declared), record.kernels
    assert record.attention_share > max((k["share"] for k in record.kernels[1:]), default=0), record.kernels


# Each runtime backend planted to declare a kernel its profile lacks (another op's), and the op that really runs.
PLANTED = {"onnxruntime": ("GroupQueryAttention", "Attention (CPUExecutionProvider)"),
           "onnxruntime-mha": ("GroupQueryAttention", "MultiHeadAttention (CPUExecutionProvider)"),
           "onnxruntime-gqa": ("MultiHeadAttention", "GroupQueryAttention (CPUExecutionProvider)"),
           "openvino": ("PagedAttention", "(ScaledDotProductAttention)"),
           "jax": ("custom-call __cudnn", "fusion")}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PLANTED))
def test_a_runtime_that_lacks_its_declared_kernel_is_wrong_kernel(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(name)
    backend = default_registry().get(name)
    declared, ran = PLANTED[name]
    monkeypatch.setattr(type(backend), "capabilities",
                        dataclasses.replace(backend.capabilities, kernel_names={"cpu": (declared,)}))
    record = measure_one(make_case(causal=True, heads=4, kv_heads=2), backend)
    assert record.status == "wrong_kernel", (record.status, record.reason)
    assert f"none of {name}'s declared kernels ran" in record.reason and ran in record.reason, record.reason


@pytest.mark.parametrize("name", ["onnxruntime", "onnxruntime-mha", "onnxruntime-gqa", "openvino"])
def test_float32_only_runtimes_skip_bfloat16_by_name(name: str) -> None:
    record = measure_one(make_case(dtype="bfloat16", causal=True), default_registry().get(name))
    assert record.status == "skipped" and "float32" in record.reason and "only" in record.reason, record.reason


def test_jax_runs_bfloat16() -> None:
    _installed("jax")
    record = measure_one(make_case(dtype="bfloat16", causal=True, heads=4, kv_heads=2), default_registry().get("jax"))
    assert record.status == "ok", record.reason


def test_the_timed_call_is_forward_only_and_says_so() -> None:
    for name in RUNTIMES:
        reason = default_registry().get(name).unsupported(make_case(mode="bwd", causal=True))
        assert reason is not None and "forward only" in reason


def test_jax_cudnn_is_not_applicable_on_a_cpu() -> None:
    assert "does not run on cpu" in default_registry().get("jax-cudnn").availability("cpu")


# ---- planted wrong mappings are each a mismatch ---------------------------------------------------------------
def _top_left(self, case):  # type: ignore[no-untyped-def]
    """The runtime's own causal flag used as if it were the conventions' (docs/conventions.md) when Sq != Sk (the
    top-left bug)."""
    return True


def test_top_left_causal_is_a_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    from attnbench.backends import runtimes

    monkeypatch.setattr(runtimes, "native_causal", lambda case: True)
    case = make_case(**CASES["kv-longer-causal"])
    for name in ("jax", "onnxruntime", "openvino"):
        _installed(name)
        record = measure_one(case, default_registry().get(name))
        assert record.status == "mismatch", (name, record.status, record.reason)


def test_kv_heads_in_the_wrong_order_are_a_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Query head h reads KV head h // group; repeating K/V heads tiled (h % kv_heads) is the plausible bug."""
    import attnbench.backends.onnx_runtime as ort_mod
    import attnbench.backends.openvino_sdpa as ov_mod

    tiled = lambda t, case: t.repeat(1, case.group_size, 1, 1)  # noqa: E731
    monkeypatch.setattr(ort_mod, "expand_kv", tiled, raising=False)
    monkeypatch.setattr(ov_mod, "expand_kv", tiled)
    import attnbench.backends.base as base

    monkeypatch.setattr(base, "expand_kv", tiled)  # onnxruntime-mha imports it inside prepare
    case = make_case(causal=True, heads=4, kv_heads=2)
    for name in ("onnxruntime-mha", "openvino"):
        _installed(name)
        record = measure_one(case, default_registry().get(name))
        assert record.status == "mismatch", (name, record.status, record.reason)


def test_a_window_off_by_one_is_a_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    from attnbench.backends.jax_attention import JaxXla
    from attnbench.backends.onnx_runtime import OrtGroupQueryAttention

    monkeypatch.setattr(OrtGroupQueryAttention, "window_of", lambda self, window: window)
    monkeypatch.setattr(JaxXla, "window_of", lambda self, case: (case.window + 1, 0))
    case = make_case(**CASES["window-causal"])
    for name in ("onnxruntime-gqa", "jax"):
        _installed(name)
        record = measure_one(case, default_registry().get(name))
        assert record.status == "mismatch", (name, record.status, record.reason)


# ---- each library's own rules, refused before running and in its words ------------------------------------------
# (backend, case, the library's words): the case is skipped with them, and the library itself, asked anyway (the
# refusal bypassed), refuses it with the same words, so a rule the library drops or rewords fails here.
LIBRARY_RULES = {
    "gqa-head-dim": ("onnxruntime-gqa", dict(causal=True, head_dim=36, heads=4, kv_heads=2),
                     "head_size must be a multiple of 8"),
    "gqa-window-without-causal": ("onnxruntime-gqa", dict(causal=False, window=5, heads=4, kv_heads=2),
                                  "local_window_size must be -1 when causal is 0"),
    "jax-float16-on-cpu": ("jax", dict(causal=True, dtype="float16", heads=4, kv_heads=2),
                           "The precision 'F16_F16_F32' is not supported by dot_general on CPU"),
}


def _asked_anyway(name: str, words: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend's refusal taken away (its override, its declared limit): the library is called with what it
    refuses."""
    backend = type(default_registry().get(name))
    monkeypatch.setattr(backend, "unsupported", backend.__mro__[1].unsupported)
    monkeypatch.setattr(backend, "spec", dataclasses.replace(backend.spec, limits=tuple(
        limit for limit in backend.spec.limits if words not in limit.reason)))


@pytest.mark.slow
@pytest.mark.parametrize("rule", list(LIBRARY_RULES))
def test_a_case_the_library_refuses_is_skipped_in_its_words(rule: str, monkeypatch: pytest.MonkeyPatch) -> None:
    name, shape, words = LIBRARY_RULES[rule]
    _installed(name)
    case = make_case(**shape)
    record = measure_one(case, default_registry().get(name))
    assert record.status == "skipped" and words in record.reason, (record.status, record.reason)
    _asked_anyway(name, words, monkeypatch)
    asked = measure_one(case, default_registry().get(name))
    assert asked.status in ("error", "skipped") and words in asked.reason, (asked.status, asked.reason)


# The shape: two requests of 192 queries after a 128-key prefix, as ONNX Runtime's GroupQueryAttention refuses
# it without query_seqlens ("batch_size must be 1 when sequence_length > 1 and past context is given").
BATCHED_CHUNK = dict(batch=2, seq_len=192, kv_seq_len=320, causal=True, heads=4, kv_heads=2, head_dim=64)


@pytest.mark.parametrize("window", [None, 64])
def test_gqa_runs_a_batched_chunk_through_query_seqlens(window: int | None) -> None:
    """Where the installed op has query_seqlens (its batched chunks), batch 2 with a cached prefix runs as one call
    and matches the reference; the kernel says how it was given."""
    from attnbench.backends.onnx_runtime import contrib_schema

    _installed("onnxruntime-gqa")
    if "query_seqlens" not in contrib_schema("GroupQueryAttention").inputs:
        pytest.skip("the installed onnxruntime's GroupQueryAttention has no query_seqlens input")
    record = measure_one(make_case(**BATCHED_CHUNK, window=window), default_registry().get("onnxruntime-gqa"))
    assert record.status == "ok", (record.status, record.reason)
    assert "query_seqlens 192 per entry" in record.kernel and "128 keys as past K/V" in record.kernel, record.kernel


@pytest.mark.slow
def test_gqa_without_query_seqlens_skips_a_batched_chunk_with_onnx_runtimes_rule(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A release whose op has no query_seqlens input (onnxruntime < 1.32) refuses the batched chunk: skipped with
    its rule, which the installed op states itself when the chunk is given without query_seqlens."""
    import attnbench.backends.onnx_runtime as ort_mod

    _installed("onnxruntime-gqa")
    real = ort_mod.contrib_schema("GroupQueryAttention")
    older = ort_mod.OpSchema("1.22.0", tuple(i for i in real.inputs if i != "query_seqlens"), real.attributes)
    monkeypatch.setattr(ort_mod, "contrib_schema", lambda op: older)
    case = make_case(**BATCHED_CHUNK)
    record = measure_one(case, default_registry().get("onnxruntime-gqa"))
    assert record.status == "skipped" and ort_mod.BATCH_RULE in record.reason, (record.status, record.reason)
    monkeypatch.setattr(ort_mod.OrtGroupQueryAttention, "unsupported", ort_mod._Ort.unsupported)
    asked = measure_one(case, default_registry().get("onnxruntime-gqa"))
    assert asked.status == "error" and ort_mod.BATCH_RULE in asked.reason, (asked.status, asked.reason)


def test_gqa_non_causal_with_a_prefix_in_a_batch_is_refused_by_its_rule() -> None:
    """query_seqlens requires causal: a non-causal batched chunk stays under the batch rule."""
    from attnbench.backends.onnx_runtime import BATCH_RULE

    _installed("onnxruntime-gqa")
    record = measure_one(make_case(**{**BATCHED_CHUNK, "causal": False}), default_registry().get("onnxruntime-gqa"))
    assert record.status == "skipped" and BATCH_RULE in record.reason and "requires causal" in record.reason


def test_gqa_of_a_release_without_a_causal_attribute_skips_non_causal(monkeypatch: pytest.MonkeyPatch) -> None:
    import attnbench.backends.onnx_runtime as ort_mod

    _installed("onnxruntime-gqa")
    real = ort_mod.contrib_schema("GroupQueryAttention")
    monkeypatch.setattr(ort_mod, "contrib_schema",
                        lambda op: ort_mod.OpSchema("1.22.0", real.inputs, real.attributes - {"causal"}))
    record = measure_one(make_case(**CASES["full-gqa"]), default_registry().get("onnxruntime-gqa"))
    assert record.status == "skipped" and "always causal" in record.reason, record.reason


def test_openvino_broadcasts_one_kv_head_and_repeats_a_group() -> None:
    """The op broadcasts K/V's leading dimensions NumPy's way: one KV head runs unrepeated (and right), two KV heads
    under four query heads do not broadcast, so they are repeated; the op refuses them unrepeated."""
    _installed("openvino")
    backend = default_registry().get("openvino")
    mqa = measure_one(make_case(causal=True, heads=4, kv_heads=1), backend)
    assert mqa.status == "ok" and mqa.kv_expanded is False and "one KV head broadcast" in mqa.kernel, mqa.reason
    from attnbench.core.counting import memory_estimate

    repeated = memory_estimate(make_case(causal=True, heads=4, kv_heads=1), type(backend).cost.memory)
    assert mqa.memory_estimate_bytes < repeated  # no repeated K/V in its estimate either
    gqa = measure_one(make_case(causal=True, heads=4, kv_heads=2), backend)
    assert gqa.status == "ok" and gqa.kv_expanded is True, gqa.reason


@pytest.mark.slow
def test_openvino_refuses_unbroadcastable_kv_heads(monkeypatch: pytest.MonkeyPatch) -> None:
    import attnbench.backends.openvino_sdpa as ov_mod

    _installed("openvino")
    monkeypatch.setattr(ov_mod, "broadcast_refused", lambda case: False)
    record = measure_one(make_case(causal=True, heads=4, kv_heads=2), default_registry().get("openvino"))
    assert record.status == "skipped" and "'key_input_correctness' failed" in record.reason, record.reason


# jax-cudnn's rules from JAX's source (its adapter runs on CUDA only: the rules are asked directly).
CUDNN_RULES = {
    "float32": (dict(dtype="float32", device="cuda"), "Q must be fp16/bf16"),
    "head-dim-not-a-multiple-of-8": (dict(dtype="bfloat16", head_dim=36, device="cuda"), "multiple of 8"),
    "head-dim-over-256": (dict(dtype="bfloat16", head_dim=512, device="cuda"), "The head dim must be <= 256"),
    "window-without-causal": (dict(dtype="bfloat16", window=8, causal=False, device="cuda"), "right window"),
}


@pytest.mark.parametrize("rule", list(CUDNN_RULES))
def test_jax_cudnn_refuses_what_jax_refuses_for_cudnn(rule: str) -> None:
    shape, words = CUDNN_RULES[rule]
    reason = default_registry().get("jax-cudnn").unsupported(make_case(**shape))
    assert reason is not None and words in reason, reason


def test_jax_cudnn_takes_what_cudnn_runs() -> None:
    case = make_case(dtype="bfloat16", head_dim=128, causal=True, window=64, heads=4, kv_heads=2, device="cuda")
    assert default_registry().get("jax-cudnn").unsupported(case) is None


@pytest.mark.parametrize("name", ["onnxruntime", "onnxruntime-gqa"])
def test_onnx_runtime_runs_float16_in_its_own_kernel(name: str) -> None:
    """Attention and GroupQueryAttention register float16 on the CPU: right against the reference, and no Cast
    node beside the op in its session's profile."""
    _installed(name)
    record = measure_one(make_case(dtype="float16", causal=True, seq_len=48, kv_seq_len=80, window=7, heads=4,
                                   kv_heads=2), default_registry().get(name))
    assert record.status == "ok", (record.status, record.reason)
    assert not [k for k in record.kernels if k["name"].startswith("Cast")], record.kernels


def test_multi_head_attention_skips_float16_which_onnx_runtime_casts_to_float32(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """MultiHeadAttention's CPU kernel is float32 only: skipped in float16; asked anyway, its session runs the
    float32 kernel between the Cast nodes ORT inserts."""
    import attnbench.backends.onnx_runtime as ort_mod

    _installed("onnxruntime-mha")
    case = make_case(dtype="float16", causal=True, heads=4, kv_heads=2)
    record = measure_one(case, default_registry().get("onnxruntime-mha"))
    assert record.status == "skipped" and "registers float32 only" in record.reason, record.reason
    mha = ort_mod.OrtMultiHeadAttention
    monkeypatch.setattr(mha, "spec", dataclasses.replace(mha.spec, limits=tuple(
        limit for limit in mha.spec.limits if "registers" not in limit.reason)))
    asked = measure_one(case, default_registry().get("onnxruntime-mha"))
    assert asked.status == "ok" and any(k["name"] == "Cast (CPUExecutionProvider)" for k in asked.kernels), asked
