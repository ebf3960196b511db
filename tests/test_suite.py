"""Suite files: what they expand to, and every way they are refused before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnbench.core import workload
from attnbench.core.errors import SuiteError
from attnbench.sweep.suite import load_suite

BASE = """\
name: t
sweep:
  seq_len: [128, 256]
  heads: [8]
  kv_heads: [heads, 2, 1]
  head_dim: [64]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(text)
    return path


def refused(tmp_path: Path, text: str) -> str:
    with pytest.raises(SuiteError) as info:
        load_suite(write(tmp_path, text))
    message = str(info.value)
    assert "\n" not in message, "a refusal is one line"
    return message


def test_grid_crosses_every_axis(tmp_path: Path) -> None:
    suite = load_suite(write(tmp_path, BASE + "  causal: [true, false]\n  mode: [fwd, fwd_bwd]\n"))
    cases = suite.cases("cpu")
    assert len(cases) == 2 * 3 * 2 * 2
    assert {c.kv_heads for c in cases} == {8, 2, 1}  # 'heads' means MHA
    assert all(c.kv_seq_len == c.seq_len for c in cases)  # kv_seq_len defaults to seq_len
    assert {c.device for c in cases} == {"cpu"}


def test_cpu_block_replaces_sweep_values_on_cpu_only(tmp_path: Path) -> None:
    suite = load_suite(write(tmp_path, BASE + "  dtype: [bfloat16]\ncpu:\n  seq_len: [64]\n  dtype: [float32]\n"))
    assert {(c.seq_len, c.dtype) for c in suite.cases("cpu")} == {(64, "float32")}
    assert {(c.seq_len, c.dtype) for c in suite.cases("cuda")} == {(128, "bfloat16"), (256, "bfloat16")}


def test_decode_axes(tmp_path: Path) -> None:
    text = "name: d\nsweep:\n  seq_len: 1\n  kv_seq_len: [1024, 4096]\n  heads: 8\n  head_dim: 64\n  causal: true\n"
    cases = load_suite(write(tmp_path, text)).cases("cpu")
    assert [(c.seq_len, c.kv_seq_len) for c in cases] == [(1, 1024), (1, 4096)]


def test_misspelt_key_names_it_with_did_you_mean(tmp_path: Path) -> None:
    message = refused(tmp_path, BASE.replace("seq_len:", "seq_lenn:"))
    assert "sweep.seq_lenn: unknown key (did you mean 'seq_len'?)" in message
    assert str(tmp_path / "suite.yaml") in message


def test_every_problem_is_shown_not_counted(tmp_path: Path) -> None:
    """Three mistakes in one file: the refusal names all three (a user fixes them in one pass), never a bare count."""
    message = refused(tmp_path, BASE.replace("seq_len:", "seq_lenn:").replace("head_dim: [64]", "head_dim: [z]")
                      + "backend: [naive]\n")
    assert "sweep.seq_lenn: unknown key (did you mean 'seq_len'?)" in message
    assert "backend: unknown key (did you mean 'backends'?)" in message
    assert "sweep.head_dim[0]: 'z'" in message
    assert "more problem" not in message


def test_unknown_top_level_key(tmp_path: Path) -> None:
    message = refused(tmp_path, BASE + "backend: [naive]\n")
    assert "backend: unknown key (did you mean 'backends'?)" in message


def test_wrong_type_names_field_and_value(tmp_path: Path) -> None:
    message = refused(tmp_path, BASE.replace("head_dim: [64]", "head_dim: [sixty-four]"))
    assert "sweep.head_dim[0]" in message and "sixty-four" in message


@pytest.mark.parametrize("field, bad", [("seq_len", "[0]"), ("heads", "[-8]"), ("head_dim", "[0]"),
                                        ("seq_len", "[1000000000]")])
def test_sizes_out_of_range(tmp_path: Path, field: str, bad: str) -> None:
    text = BASE.replace(f"  {field}: ", f"  {field}: {bad} #")
    message = refused(tmp_path, text)
    assert f"sweep.{field}" in message and "out of range" in message


def test_kv_heads_must_divide_heads_and_names_the_combination(tmp_path: Path) -> None:
    message = refused(tmp_path, BASE.replace("[heads, 2, 1]", "[heads, 3]"))
    assert "kv_heads" in message and "heads=8, kv_heads=3" in message


def test_unknown_dtype_with_did_you_mean(tmp_path: Path) -> None:
    message = refused(tmp_path, BASE + "  dtype: [bfloat61]\n")
    assert "sweep.dtype[0]: 'bfloat61' is not allowed (did you mean 'bfloat16'?)" in message
    assert "allowed: float32, float16, bfloat16" in message


def test_causal_with_fewer_keys_than_queries_runs_its_first_queries_on_no_key(tmp_path: Path) -> None:
    """FlashAttention runs seqlen_q > seqlen_k bottom-right: the first seqlen_q - seqlen_k queries see no key and
    output zeros (docs/conventions.md); the suite accepts it and counts only the rows that see keys."""
    cases = load_suite(write(tmp_path, BASE + "  kv_seq_len: [64]\n  causal: [true]\n")).cases("cpu")
    assert {(c.seq_len, c.kv_seq_len) for c in cases} == {(128, 64), (256, 64)}
    case = next(c for c in cases if c.seq_len == 128)
    assert workload.visible_total(case) == 64 * 65 // 2  # queries 64..127 see keys 0..i-64


@pytest.mark.parametrize("text, expected", [
    ("", "empty"),
    ("name: t\nsweep: {seq_len: [1}\n", "line 2: invalid YAML"),
    ("- a\n- b\n", "expected a mapping"),
    ("name: t\n", "sweep: required field is missing"),
])
def test_unreadable_files(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in refused(tmp_path, text)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match="no such suite file"):
        load_suite(tmp_path / "absent.yaml")
    with pytest.raises(SuiteError, match="is a directory"):
        load_suite(tmp_path)


def test_misspelt_packaged_suite_name_gets_did_you_mean() -> None:
    with pytest.raises(SuiteError) as info:
        load_suite("qiuck")
    assert "qiuck: no such suite file (did you mean 'quick'?)" in str(info.value)


def test_packaged_suites_describe_themselves_in_whole_sentences_true_of_their_cases() -> None:
    """`attnbench suites` shows each file's first sentence: complete, citing only files the repository has, and
    claiming only the head layouts its cases hold (MHA: kv_heads == heads, GQA: between, MQA: one K/V head)."""
    import re

    from attnbench.sweep.suite import packaged_suites

    root = Path(__file__).parent.parent
    for name, path in packaged_suites().items():
        suite = load_suite(path)
        text = suite.description
        assert text.endswith(".") and "#" not in text, (name, text)
        for cited in re.findall(r"[\w./-]+\.(?:md|sh|yaml|py)\b", text):
            assert (root / cited).exists() or (root / "suites" / cited).exists(), (name, cited)
        cases = suite.cases("cpu") + suite.cases("cuda")
        layouts = {"MHA": any(c.kv_heads == c.heads for c in cases), "MQA": any(c.kv_heads == 1 for c in cases),
                   "GQA": any(1 < c.kv_heads < c.heads for c in cases)}
        for layout, held in layouts.items():
            assert held or layout not in text, (name, layout, text)


def test_shipped_suites_are_valid() -> None:
    root = Path(__file__).parent.parent / "suites"
    for path in root.glob("*.yaml"):
        suite = load_suite(path)
        assert suite.cases("cpu") and suite.cases("cuda"), path


# ---- workload axes ----------------------------------------------------------------------------------
def test_absent_workload_axes_leave_every_case_as_it_was(tmp_path: Path) -> None:
    cases = load_suite(write(tmp_path, BASE + "  causal: [true, false]\n")).cases("cpu")
    assert all(not c.workload_axes and c.tp is None for c in cases)
    assert cases[0].case_id == "cpu-fp32-b1-s128-h8-kv8-d64-causal-fwd"


def test_workload_axes_cross_and_also_blocks_add_their_own_cross(tmp_path: Path) -> None:
    text = BASE + """\
  causal: true
  documents: [4, [100, 28]]
  doc_lengths: [equal, random]
  seq_len: 128
also:
  - seq_len: 4
    kv_seq_len: 64
    batch: 3
    heads: 8
    head_dim: 64
    kv_lengths: random
    page_size: [16]
    softcap: 50
    alibi: true
    head_dim_v: [64, 32]
"""
    suite = load_suite(write(tmp_path, text.replace("  documents: [4, [100, 28]]\n  doc_lengths: [equal, random]\n",
                                                    "  documents: [4, [100, 28]]\n")))
    cases = suite.cases("cpu")
    packed = [c for c in cases if c.documents]
    assert {c.doc_lens for c in packed} == {(32, 32, 32, 32), (100, 28)}
    ragged = [c for c in cases if c.kv_lens]
    assert len(ragged) == 2 and {c.head_dim_v for c in ragged} == {None, 32}  # 64 is head_dim: the plain case
    assert all(c.page_size == 16 and c.softcap == 50.0 and c.alibi and len(c.kv_lens) == 3 for c in ragged)
    message = refused(tmp_path, text)
    assert "sweep.doc_lengths: random draws the lengths, but documents [100, 28] gives them" in message


def test_tp_makes_the_case_one_gpus_share(tmp_path: Path) -> None:
    text = "name: t\nsweep: {seq_len: 64, heads: 32, kv_heads: 8, head_dim: 64, tp: [1, 8, 16]}\n"
    shares = [(c.heads, c.kv_heads, c.tp) for c in load_suite(write(tmp_path, text)).cases("cpu")]
    assert shares == [(32, 8, None), (4, 1, 8), (2, 1, 16)]


@pytest.mark.parametrize("axes, expected", [
    ("documents: 4\n  kv_seq_len: 64", "sweep.documents: 4 documents with kv_seq_len 64 < seq_len 128: a count "
                                        "shares out a cached prefix"),
    ("documents: [[100, 20]]", "sweep.documents: lengths [100, 20] sum to 120 queries, not seq_len 128"),
    ("documents: [[[100, 120], 28]]\n  kv_seq_len: 130", "sweep.documents: the documents' keys [120, 28] sum to "
                                                         "148, not kv_seq_len 130"),
    ("documents: [[[100, 120, 5], 28]]", "sweep.documents: [100, 120, 5] is not a document; allowed: a length, or "
                                         "a [queries, keys] pair"),
    ("documents: [[[100, -1], 28]]", "sweep.documents: -1 is out of range; allowed: 0 to"),
    ("documents: 4\n  kv_seq_len: 256\n  kv_lengths: random", "sweep.kv_lengths: random with packed documents"),
    ("kv_lengths: [[4, 16]]\n  batch: 3", "sweep.kv_lengths: 2 cache lengths [4, 16] for batch 3; allowed: one "
                                          "length per request"),
    ("kv_lengths: [[4, 300]]\n  batch: 2\n  kv_seq_len: 256", "sweep.kv_lengths: cache length 300 > kv_seq_len 256"),
    ("kv_lengths: [[0, 0]]\n  batch: 2", "sweep.kv_lengths: no query sees any key (seq_len 128, kv_seq_len 128, "
                                         "cache lengths [0, 0])"),
    ("documents: [[[128, 0]]]\n  kv_seq_len: 1\n  causal: true", "sweep.documents: the documents' keys [0] sum "
                                                                 "to 0, not kv_seq_len 1"),
    ("documents: [[[120, 0], [8, 1]]]\n  kv_seq_len: 1\n  window: 0", None),
    ("documents: 200", "sweep.documents: 200 documents cannot fit in seq_len 128"),
    ("documents: 0", "sweep.documents: 0 is out of range; allowed: 1 to"),
    ("page_size: 0", "sweep.page_size: 0 is out of range; allowed: 1 to"),
    ("page_size: -16", "sweep.page_size: -16 is out of range"),
    ("softcap: 0", "sweep.softcap: 0 is out of range; allowed: a positive number"),
    ("tp: 3", "sweep.tp: 3 does not divide heads 8"),
    ("kv_lengths: random", "sweep.kv_lengths: random needs kv_seq_len > seq_len"),
    ("doc_lengths: uneven", "sweep.doc_lengths[0]: 'uneven' is not allowed; allowed: equal, random"),
])
def test_workload_refusals_name_the_axis(tmp_path: Path, axes: str, expected: str | None) -> None:
    text = f"name: t\nsweep:\n  seq_len: 128\n  heads: 8\n  head_dim: 64\n  {axes}\n"
    if expected is None:  # the control: accepted
        assert load_suite(write(tmp_path, text)).cases("cpu")
    else:
        assert expected in refused(tmp_path, text)


def test_tp_replicates_kv_heads_only_when_the_gpus_divide_evenly(tmp_path: Path) -> None:
    replicated = "name: t\nsweep: {seq_len: 64, heads: 8, kv_heads: 2, head_dim: 64, tp: 4}\n"
    assert [(c.heads, c.kv_heads) for c in load_suite(write(tmp_path, replicated)).cases("cpu")] == [(2, 1)]
    uneven = "name: t\nsweep: {seq_len: 64, heads: 6, kv_heads: 3, head_dim: 64, tp: 2}\n"
    assert "sweep.tp: 2 GPUs cannot share 3 KV heads" in refused(tmp_path, uneven)


def test_fewer_keys_than_queries_is_refused_only_where_no_query_sees_a_key(tmp_path: Path) -> None:
    two_sided = "name: t\nsweep: {seq_len: 64, kv_seq_len: 7, window: 300, heads: 2, head_dim: 8}\n"
    (case,) = load_suite(write(tmp_path, two_sided)).cases("cpu")
    assert workload.visible_total(case) == 64 * 7  # every query sees every key
    # window 50: queries 0..6 (at key positions -57..-51) see none and output zeros, as FlashAttention's (50, 50)
    (narrow,) = load_suite(write(tmp_path, two_sided.replace("window: 300", "window: 50"))).cases("cpu")
    lo, hi = workload.key_ranges(narrow)
    assert [int(q) for q in (hi < lo).nonzero()[1]] == list(range(7))
    nothing = "name: t\nsweep: {seq_len: 4, kv_seq_len: 8, batch: 2, kv_lengths: [[0, 0]], heads: 2, head_dim: 8}\n"
    assert "sweep.kv_lengths: no query sees any key" in refused(tmp_path, nothing)


@pytest.mark.parametrize("key", ["window", "documents", "page_size", "softcap", "head_dim_v", "tp", "kv_heads"])
def test_a_bare_null_in_the_cpu_block_never_crashes(tmp_path: Path, key: str) -> None:
    """`cpu: {window: null}` reached the validators as None and raised a TypeError (a traceback, not one line)."""
    suite = load_suite(write(tmp_path, f"name: t\nsweep: {{seq_len: 64, heads: 2, head_dim: 8, window: 4}}\n"
                                       f"cpu:\n  {key}: null\n"))
    (case,) = suite.cases("cpu")
    assert case.window == (None if key == "window" else 4)  # a nullable axis: null is the one value [null]


def test_a_blocks_own_cpu_block_applies_after_the_suites(tmp_path: Path) -> None:
    """A prefill block and a decode block need different CPU sizes: each block's `cpu:` replaces values in that
    block only, after the top-level `cpu:` (which replaces values in every block)."""
    text = ("name: b\nsweep:\n  seq_len: [8192]\n  heads: 8\n  head_dim: 64\n  causal: true\n"
            "  cpu:\n    seq_len: [256]\n"
            "also:\n  - seq_len: 1\n    kv_seq_len: [65536]\n    heads: 8\n    head_dim: 64\n    causal: true\n"
            "    cpu:\n      kv_seq_len: [512]\ncpu:\n  dtype: [float32]\n")
    suite = load_suite(write(tmp_path, text))
    assert {(c.seq_len, c.kv_seq_len, c.dtype) for c in suite.cases("cpu")} == {(256, 256, "float32"),
                                                                                 (1, 512, "float32")}
    assert {(c.seq_len, c.kv_seq_len) for c in suite.cases("cuda")} == {(8192, 8192), (1, 65536)}
    message = refused(tmp_path, text.replace("    cpu:\n      kv_seq_len", "    cpu:\n      kv_seq_lenn"))
    assert "also[0].cpu.kv_seq_lenn: unknown key (did you mean 'kv_seq_len'?)" in message


def test_kv_shared_needs_a_smaller_v_head(tmp_path: Path) -> None:
    text = ("name: k\nsweep:\n  seq_len: 1\n  kv_seq_len: 64\n  heads: 4\n  kv_heads: 1\n  head_dim: 64\n"
            "  kv_shared: true\n")
    message = refused(tmp_path, text)
    assert "kv_shared: V is K's first head_dim_v channels, so it needs a head_dim_v below head_dim" in message
    cases = load_suite(write(tmp_path, text + "  head_dim_v: 48\n")).cases("cpu")
    assert [(c.head_dim, c.v_dim, c.kv_shared) for c in cases] == [(64, 48, True)]


def test_the_cpu_block_timing_replaces_only_the_fields_it_sets_and_only_on_a_cpu(tmp_path: Path) -> None:
    """A 4 s CPU call and a 1 ms GPU call need different `min_samples`: `cpu: {timing: ...}` replaces the fields it
    names on a CPU, keeps the rest of the suite's timing, and changes nothing on CUDA."""
    text = BASE + "timing: {warmup_ms: 100, budget_ms: 500, min_samples: 3}\ncpu:\n  timing: {min_samples: 1}\n"
    suite = load_suite(write(tmp_path, text))
    on_cpu, on_cuda = suite.timing("cpu"), suite.timing("cuda")
    assert (on_cpu.min_samples, on_cpu.warmup_ms, on_cpu.budget_ms) == (1, 100, 500)
    assert (on_cuda.min_samples, on_cuda.warmup_ms, on_cuda.budget_ms) == (3, 100, 500)
    assert len(suite.cases("cpu")) == len(suite.cases("cuda"))  # timing is no axis: it crosses into nothing
    message = refused(tmp_path, text.replace("{min_samples: 1}", "{min_sample: 1}"))
    assert "cpu.timing.min_sample: unknown key (did you mean 'min_samples'?)" in message
    assert "cpu.timing.min_samples" in refused(tmp_path, text.replace("{min_samples: 1}", "{min_samples: 0}"))
    # a block's own cpu: is axes only: one timing per device and run
    assert "sweep.cpu.timing: unknown key" in refused(tmp_path, BASE + "  cpu:\n    timing: {min_samples: 1}\n")


def test_the_run_takes_the_cpu_timing(tmp_path: Path) -> None:
    from attnbench.run.session import settings_of

    suite = load_suite(write(tmp_path, BASE + "timing: {min_samples: 4, precision: 0.02}\n"
                                              "cpu:\n  timing: {min_samples: 1}\n"))
    assert (settings_of(suite, "cpu").min_samples, settings_of(suite, "cpu").precision) == (1, 0.02)
    assert settings_of(suite, "cuda").min_samples == 4
