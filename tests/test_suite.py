"""Suite files: what they expand to, and every way they are refused before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnbench.errors import SuiteError
from attnbench.suite import load_suite

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


def test_causal_with_fewer_keys_than_queries_is_refused(tmp_path: Path) -> None:
    message = refused(tmp_path, BASE + "  kv_seq_len: [64]\n  causal: [true]\n")
    assert "kv_seq_len" in message and "seq_len" in message


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


def test_shipped_suites_are_valid() -> None:
    root = Path(__file__).parent.parent / "suites"
    for path in root.glob("*.yaml"):
        suite = load_suite(path)
        assert suite.cases("cpu") and suite.cases("cuda"), path
