"""flex compiles once per distinct graph: flex-dynamic shares one compile across sequence lengths, flex (static,
one kernel per shape) cannot; compile time is setup, never a sample."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnbench.backends.registry import default_registry
from tests.conftest import make_case, measure_one


def shape(seq: int, **overrides: object):  # type: ignore[no-untyped-def]
    # A shape no other test compiles, so this process's compile caches start empty for it.
    return make_case(seq_len=seq, heads=3, kv_heads=3, head_dim=16, causal=True, window=40, **overrides)


def test_two_cases_differing_only_in_sequence_length_share_one_flex_dynamic_compile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))  # nothing on disk to load
    backend = default_registry().get("flex-dynamic")
    first, second = (measure_one(shape(seq), backend) for seq in (256, 384))
    assert first.status == second.status == "ok", (first.reason, second.reason)
    assert "dynamic=True" in first.kernel
    assert first.extra["graphs_traced"] == 1 and first.extra["kernels_compiled"] >= 1
    assert second.extra["graphs_traced"] == 0 and second.extra["kernels_compiled"] == 0  # the same compiled graph
    assert second.extra["compile_s"] < first.extra["compile_s"] / 5
    for record in (first, second):  # the compile is setup: no sample is anywhere near its length
        assert max(record.times_ms) < record.extra["compile_s"] * 1e3 or record is second


def test_static_flex_compiles_each_length_and_reuses_only_the_same_shape(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """dynamic=False specialises on the lengths (and on their divisibility by the 128-token block): a new
    length is a new kernel; the same shape again (here: another case object) is Dynamo's cached graph."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    backend = default_registry().get("flex")
    records = [measure_one(shape(seq, dtype="float32"), backend) for seq in (256, 384, 256)]
    assert [r.status for r in records] == ["ok"] * 3
    assert "dynamic=False" in records[0].kernel
    assert [r.extra["graphs_traced"] for r in records] == [1, 1, 0]
    assert records[1].extra["kernels_compiled"] >= 1 and records[2].extra["kernels_compiled"] == 0


def test_a_refused_cpu_backward_leaves_later_flex_cases_compiled() -> None:
    """FlexAttention refuses backward on a CPU. Refused inside torch.compile, Dynamo would skip flex_attention for
    the rest of the process, and later cases would run eager under a record saying compiled: the refusal is
    asked of torch before compiling."""
    backend = default_registry().get("flex")
    refused = measure_one(make_case(seq_len=64, heads=5, kv_heads=5, head_dim=16, causal=True, mode="fwd_bwd"), backend)
    assert refused.status == "skipped" and "does not support backward on CPU" in refused.reason
    later = measure_one(make_case(seq_len=256, heads=5, kv_heads=5, head_dim=16, causal=True), backend)
    assert later.status == "ok" and later.extra["graphs_traced"] == 1  # traced and compiled, not skipped to eager
