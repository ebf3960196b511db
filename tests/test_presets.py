"""The model presets in suites/models/: each validates, holds its model's published shapes on a GPU (and one GPU's
share under tensor parallelism), sweeps prefill 8K-128K and paged, ragged decode, and has a CPU block small
enough for a 2-core machine."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.sweep.suite import load_suite, packaged_suites

# name: (heads, kv_heads, head_dim, head_dim_v, window, softcap, largest tp); decode shapes where they differ
MODELS = {
    "llama-3.1-8b": (32, 8, 128, None, None, None, 8),
    "llama-3.1-70b": (64, 8, 128, None, None, None, 8),
    "llama-3.1-405b": (128, 8, 128, None, None, None, 8),
    "mistral-7b-v0.1": (32, 8, 128, None, 4096, None, 8),
    "gemma-2-9b": (16, 8, 256, None, 4096, 50.0, 8),
    "qwen2.5-7b": (28, 4, 128, None, None, None, 4),
    "deepseek-v3": (128, 128, 192, 128, None, None, 8),
}
DECODE = {"deepseek-v3": (128, 1, 576, 512)}  # absorbed MLA: one latent KV head


@pytest.mark.slow
def test_every_model_preset_is_packaged_and_listed() -> None:
    assert {name for name in packaged_suites() if name.startswith("models/")} == {f"models/{m}" for m in MODELS}
    listed = CliRunner().invoke(app, ["suites"])
    assert listed.exit_code == 0 and "models/llama-3.1-8b" in listed.output
    by_name = CliRunner().invoke(app, ["validate", "models/gemma-2-9b", "--device", "cpu"])
    assert by_name.exit_code == 0 and "16 cases on cpu" in by_name.output


@pytest.mark.parametrize("model", sorted(MODELS))
def test_a_preset_holds_its_models_shapes(model: str) -> None:
    heads, kv, d, dv, window, softcap, tp = MODELS[model]
    suite = load_suite(packaged_suites()[f"models/{model}"])
    gpu = suite.cases("cuda")
    prefill = [c for c in gpu if c.seq_len > 1]
    decode = [c for c in gpu if c.seq_len == 1]
    assert {c.seq_len for c in prefill} == {8192, 16384, 32768, 65536, 131072}
    assert {c.kv_seq_len for c in decode} == {8192, 32768, 131072} and {c.batch for c in decode} == {1, 64}
    assert all(c.page_size for c in decode) and all(c.kv_lengths == "random" for c in decode)
    assert {c.dtype for c in gpu} == {"bfloat16"} and {c.tp or 1 for c in gpu} == {1, tp}
    assert any(c.documents for c in prefill) and {c.mode for c in prefill} == {"fwd", "fwd_bwd"}
    whole = [c for c in prefill if not c.tp]
    assert {(c.heads, c.kv_heads, c.head_dim, c.v_dim) for c in whole} == {(heads, kv, d, dv or d)}
    share = [c for c in prefill if c.tp]
    assert {(c.heads, c.kv_heads) for c in share} == {(heads // tp, max(1, kv // tp))}
    dh, dkv, dd, ddv = DECODE.get(model, (heads, kv, d, dv or d))
    assert {(c.heads, c.kv_heads, c.head_dim, c.v_dim) for c in decode if not c.tp} == {(dh, dkv, dd, ddv)}
    assert all(c.kv_shared == (model in DECODE) for c in decode) and not any(c.kv_shared for c in prefill)
    assert {c.window for c in gpu} == ({None, window} if window else {None})
    assert {c.softcap for c in gpu} == {softcap}
    cpu = suite.cases("cpu")
    assert 0 < len(cpu) <= 16 and max(c.kv_seq_len for c in cpu) <= 1024 and max(c.batch for c in cpu) <= 4
    assert {c.heads for c in cpu if not c.tp} == {heads, dh}  # the model's heads stay
