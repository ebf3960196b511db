"""JAX, ONNX Runtime and OpenVINO, the real runtimes on this CPU: ok against the float64 reference on each mapped
axis, skipped by name where the runtime cannot express a case, and a mismatch for each plausible wrong mapping."""

from __future__ import annotations

import pytest

from attnbench.backends.registry import default_registry
from tests.conftest import make_case, measure_one

RUNTIMES = ("jax", "onnxruntime", "onnxruntime-mha", "onnxruntime-gqa", "openvino")
CASES = {
    "causal-gqa": dict(causal=True, heads=4, kv_heads=2),
    "full-gqa": dict(causal=False, heads=4, kv_heads=2),
    "kv-longer-causal": dict(causal=True, seq_len=48, kv_seq_len=80, heads=4, kv_heads=2),
    "window-causal": dict(causal=True, window=7, heads=4, kv_heads=2),
    "window-two-sided": dict(causal=False, window=5, heads=4, kv_heads=1),
}
# What each runtime cannot express, and the words of its reason.
SKIPS = {("onnxruntime-gqa", "full-gqa"): "always causal", ("onnxruntime-gqa", "window-two-sided"): "always causal"}


def _installed(name: str) -> None:
    module = {"jax": "jax", "openvino": "openvino"}.get(name, "onnxruntime")
    pytest.importorskip(module)


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
    declared = backend.attention_kernels("cpu", "fwd")
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


@pytest.mark.parametrize("name", list(PLANTED))
def test_a_runtime_that_lacks_its_declared_kernel_is_wrong_kernel(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(name)
    backend = default_registry().get(name)
    declared, ran = PLANTED[name]
    monkeypatch.setattr(type(backend), "attention_kernels", lambda self, device, mode: (declared,))
    record = measure_one(make_case(causal=True, heads=4, kv_heads=2), backend)
    assert record.status == "wrong_kernel", (record.status, record.reason)
    assert f"none of {name}'s declared kernels ran" in record.reason and ran in record.reason, record.reason


@pytest.mark.parametrize("name", ["onnxruntime", "onnxruntime-mha", "openvino"])
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
    """The runtime's own causal flag used as if it were the conventions' (docs/conventions.md) when Sq != Sk (the top-left bug)."""
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
