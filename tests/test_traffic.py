"""attnbench.sweep.traffic: each source read on its own project's documented examples, and refused when damaged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnbench.core.errors import SuiteError
from attnbench.sweep import traffic
from attnbench.sweep.traffic import generate, parse_vllm, read_flashinfer, read_safetensors, write_safetensors

EXAMPLES = Path(__file__).resolve().parent.parent / "attnbench" / "suites" / "traffic" / "flashinfer" / "workloads"


# ---- vLLM: benchmarks/attention_benchmarks/batch_spec.py's docstring and test_batch_spec.py ------------------------
@pytest.mark.parametrize("spec, expected", [
    ("q2k", [(2048, 2048)]),
    ("q1s1k", [(1, 1024)]),
    ("8q1s1k", [(1, 1024)] * 8),
    ("q4s1k", [(4, 1024)]),
    ("q1ks2k", [(1024, 2048)]),
    ("2q1k_32q1s1k", [(1024, 1024)] * 2 + [(1, 1024)] * 32),
    ("16q4s1k", [(4, 1024)] * 16),
    ("8q8s2k", [(8, 2048)] * 8),
])
def test_vllm_documented_specs_give_their_requests(spec: str, expected: list) -> None:
    assert list(parse_vllm(spec)) == expected


def test_vllm_production_mix_specs_parse_with_their_counts() -> None:
    """configs/standard_attention_production_mix.yaml's heterogeneous batch: 1 + 7 + 3 + 2 requests."""
    requests = parse_vllm("q257_7q1s1057_3q4s2051_2q129s4093")
    assert len(requests) == 13
    assert requests[0] == (257, 257) and requests[1:8] == ((1, 1057),) * 7
    assert sum(q for q, _ in requests) == 257 + 7 + 12 + 258
    assert len(parse_vllm("4q2k_8q4s1k_64q1s2k")) == 76  # test_batch_spec.py's complex mix


@pytest.mark.parametrize("spec, words", [
    ("invalid", "segment 'invalid' is not"),
    ("q2k_", "segment '' is not"),
    ("2q2k_32q1kv1k", "segment '32q1kv1k'"),  # the grammar's older kv spelling: batch_spec.py reads s only
    ("0q1k", "holds 0 requests"),
    ("99999999q1s1k", "allowed: 1 to 65536 requests"),
    ("q2ks1k", "2048 queries in a sequence of 1024"),
])
def test_vllm_damaged_specs_are_one_line(spec: str, words: str) -> None:
    with pytest.raises(SuiteError, match=words) as info:
        parse_vllm(spec)
    assert "\n" not in str(info.value)


# ---- FlashAttention: benchmarks/benchmark_varlen_sched.py's _make_seqlens and _override_random_subset -------------
def test_fixed_patterns_match_flashattentions_definitions() -> None:
    assert [q for q, _ in generate("bimodal", 4, 1024)] == [1024, 128, 1024, 128]
    assert [q for q, _ in generate("skew", 5, 100)] == [1, 25, 50, 75, 100]
    assert generate("constant", 3, 77) == ((77, 77),) * 3
    assert sorted(q for q, _ in generate("skew_shuffled", 5, 100, seed=3)) == [1, 25, 50, 75, 100]


def test_longtail_has_one_long_request_in_eight_and_the_rest_short() -> None:
    lens = [q for q, _ in generate("longtail", 64, 4096, seed=7)]
    assert lens.count(4096) == 8
    assert all(256 <= n < 512 for n in lens if n != 4096)
    assert generate("longtail", 64, 4096, seed=7) == generate("longtail", 64, 4096, seed=7)  # seeded
    assert generate("longtail", 64, 4096, seed=7) != generate("longtail", 64, 4096, seed=8)


def test_decode_and_zero_fractions_pick_their_share_and_keep_what_fa_keeps() -> None:
    plain = generate("uniform", 16, 1000, seed=2)
    mixed = generate("uniform", 16, 1000, decode_fraction=0.5, zero_fraction=0.125, seed=2)
    decodes = [i for i, (q, k) in enumerate(mixed) if q == 1]
    empty = [i for i, r in enumerate(mixed) if r == (0, 0)]
    assert len(empty) == 2  # round(0.125 x 16); an empty pick may land on a decode
    assert len(decodes) + len([i for i in empty if plain[i][0] != 0]) >= 8 - 2
    assert all(mixed[i][1] == plain[i][1] for i in decodes)  # a decode keeps its whole sequence as keys
    assert all(500 <= k <= 1000 for q, k in mixed if q)


def test_unknown_pattern_is_refused_with_the_allowed_ones() -> None:
    with pytest.raises(SuiteError, match="allowed: constant, uniform, wide, longtail"):
        generate("zipf", 4, 100)


# ---- flashinfer-bench: flashinfer_trace/workloads/ and definitions/ -------------------------------------------------
# The first line of flashinfer-ai/flashinfer-bench's flashinfer_trace/workloads/gqa_ragged/
# gqa_ragged_prefill_causal_h32_kv4_d128.jsonl (commit 488b310c), as the dataset stores it.
RAGGED = ('{"definition": "gqa_ragged_prefill_causal_h32_kv4_d128","solution": null,"workload": {"uuid": '
          '"ebf7188b-4b31-4746-b57b-fa25b53f5e3e","axes": {"len_indptr": 2,"total_q": 6,"total_kv": 6},"inputs": '
          '{"q": {"type": "random"},"k": {"type": "random"},"v": {"type": "random"},"qo_indptr": {"type": '
          '"safetensors","path": "./blob/workloads/gqa_ragged/gqa_ragged_prefill_causal_h32_kv4_d128/'
          'gqa_ragged_prefill_causal_h32_kv4_d128_ea71541de7204f1eb20bde1415795cc9.safetensors","tensor_key": '
          '"qo_indptr"},"kv_indptr": {"type": "safetensors","path": "./blob/workloads/gqa_ragged/'
          'gqa_ragged_prefill_causal_h32_kv4_d128/gqa_ragged_prefill_causal_h32_kv4_d128_'
          'ea71541de7204f1eb20bde1415795cc9.safetensors","tensor_key": "kv_indptr"},"sm_scale": {"type": "scalar",'
          '"value": 0.0883883461356163}}},"evaluation": null}')
# The first line of flashinfer_trace/workloads/gqa_paged/gqa_paged_decode_h32_kv4_d128_ps1.jsonl (commit f63b477d).
DECODE = ('{"definition": "gqa_paged_decode_h32_kv4_d128_ps1","solution": null,"workload": {"uuid": '
          '"0c2489b2-f878-428b-b1bd-d0c6d4c39338","axes": {"batch_size": 1,"num_pages": 8,"len_indptr": 2,'
          '"num_kv_indices": 7},"inputs": {"q": {"type": "random"},"k_cache": {"type": "random"},"v_cache": {"type": '
          '"random"},"kv_indptr": {"type": "safetensors","path": "./blob/workloads/gqa_paged/'
          'gqa_paged_decode_h32_kv4_d128_ps1/gqa_paged_decode_h32_kv4_d128_ps1_a000801975bf4961bf7ff41476b20ed1.'
          'safetensors","tensor_key": "kv_indptr"},"kv_indices": {"type": "safetensors","path": "./blob/workloads/'
          'gqa_paged/gqa_paged_decode_h32_kv4_d128_ps1/gqa_paged_decode_h32_kv4_d128_ps1_'
          'a000801975bf4961bf7ff41476b20ed1.safetensors","tensor_key": "kv_indices"},"sm_scale": {"type": "scalar",'
          '"value": 0.0883883461356163}}},"evaluation": null}')


def dataset(root: Path, line: str, tensors: dict[str, list[int]], consts: dict[str, int]) -> Path:
    """A flashinfer-trace layout around one workload line: its definition's constants and its blob."""
    entry = json.loads(line)
    name = entry["definition"]
    op_type = "gqa_ragged" if name.startswith("gqa_ragged") else "gqa_paged"
    blob = next(v["path"] for v in entry["workload"]["inputs"].values() if v["type"] == "safetensors")
    (root / blob).parent.mkdir(parents=True, exist_ok=True)
    write_safetensors(root / blob, tensors)
    axes = {k: {"type": "const", "value": v} for k, v in consts.items()}
    definition = {"name": name, "op_type": op_type, "axes": axes, "inputs": {"q": {"dtype": "bfloat16"}}}
    (root / "definitions" / op_type).mkdir(parents=True, exist_ok=True)
    (root / "definitions" / op_type / f"{name}.json").write_text(json.dumps(definition))
    path = root / "workloads" / op_type / f"{name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(line + "\n")
    return path


GEOMETRY = {"num_qo_heads": 32, "num_kv_heads": 4, "head_dim": 128}


def test_flashinfer_ragged_prefill_line_reads_its_lengths_from_the_blob(tmp_path: Path) -> None:
    path = dataset(tmp_path, RAGGED, {"qo_indptr": [0, 6], "kv_indptr": [0, 6]}, GEOMETRY)
    other = RAGGED.replace("ebf7188b-4b31-4746-b57b-fa25b53f5e3e", "another-uuid")
    path.write_text("\n".join([RAGGED, other, other.replace("another", "a-third")]) + "\n")
    definition, batches = read_flashinfer(path)
    assert (definition.heads, definition.kv_heads, definition.head_dim, definition.causal) == (32, 4, 128, True)
    assert not definition.decode and definition.page_size is None
    # three workloads with the same lengths: one batch of weight 3; a uuid seen again (a trace file lists a workload
    # once per solution evaluated on it) counts once
    assert [(b.requests, b.weight) for b in batches] == [(((6, 6),), 3.0)]
    path.write_text("\n".join([RAGGED, RAGGED, other]) + "\n")
    assert [(b.requests, b.weight) for b in read_flashinfer(path)[1]] == [(((6, 6),), 2.0)]


def test_flashinfer_paged_decode_line_is_one_query_over_its_pages(tmp_path: Path) -> None:
    path = dataset(tmp_path, DECODE, {"kv_indptr": [0, 7], "kv_indices": list(range(7))},
                   {**GEOMETRY, "page_size": 1})
    definition, batches = read_flashinfer(path)
    assert definition.decode and definition.page_size == 1
    assert batches[0].requests == ((1, 7),)


def test_flashinfer_pages_of_64_count_the_last_pages_length(tmp_path: Path) -> None:
    line = DECODE.replace("ps1", "ps64").replace('"batch_size": 1', '"batch_size": 2').replace(
        '"len_indptr": 2', '"len_indptr": 3').replace(
        '"kv_indices": {"type"', '"kv_last_page_len": {"type": "safetensors","path": "./blob/x.safetensors",'
        '"tensor_key": "kv_last_page_len"},"kv_indices": {"type"')
    path = dataset(tmp_path, line, {"kv_indptr": [0, 3, 4]}, {**GEOMETRY, "page_size": 64})
    write_safetensors(tmp_path / "blob" / "x.safetensors", {"kv_last_page_len": [10, 64]})
    assert read_flashinfer(path)[1][0].requests == ((1, 2 * 64 + 10), (1, 64))


def test_the_committed_examples_read_back_as_their_generator_wrote_them() -> None:
    prefill = read_flashinfer(EXAMPLES / "gqa_ragged" / "gqa_ragged_prefill_causal_h32_kv8_d128.jsonl")
    decode = read_flashinfer(EXAMPLES / "gqa_paged" / "gqa_paged_decode_h32_kv8_d128_ps1.jsonl")
    assert [len(b.requests) for b in prefill[1]] == [1, 2, 4, 8, 16, 4]
    assert prefill[1][0].requests == tuple((q, q) for q, _ in generate("longtail", 1, 4096, seed=0))
    assert sum(b.weight for b in decode[1]) == 6 and decode[0].kv_heads == 8
    assert all(q == 1 for b in decode[1] for q, _ in b.requests)


@pytest.mark.parametrize("damage, words", [
    (lambda line: line[:120], "line 1: not a flashinfer-bench workload"),
    (lambda line: line.replace('"len_indptr": 2', '"len_indptr": 5'), "axis len_indptr is 5, but the blob"),
    (lambda line: line.replace('"qo_indptr": {"type": "safetensors"',
                               '"qo_indptr": {"type": "random", "was": "safetensors"'), "input qo_indptr is"),
    (lambda line: line.replace("ea71541de7204f1eb20bde1415795cc9.safetensors\",\"tensor_key\": \"qo_indptr",
                               "gone.safetensors\",\"tensor_key\": \"qo_indptr"), "cannot be read as a safetensors"),
])
def test_flashinfer_damaged_lines_are_one_line(tmp_path: Path, damage: object, words: str) -> None:
    path = dataset(tmp_path, RAGGED, {"qo_indptr": [0, 6], "kv_indptr": [0, 6]}, GEOMETRY)
    path.write_text(damage(RAGGED) + "\n")  # type: ignore[operator]
    with pytest.raises(SuiteError, match=words) as info:
        read_flashinfer(path)
    assert "\n" not in str(info.value)


def test_flashinfer_indptr_that_falls_and_unsupported_definitions_are_refused(tmp_path: Path) -> None:
    path = dataset(tmp_path, RAGGED, {"qo_indptr": [0, 6], "kv_indptr": [0, 9, 6]}, GEOMETRY)
    with pytest.raises(SuiteError, match="kv_indptr .* is not an indptr"):
        read_flashinfer(path)
    other = tmp_path / "workloads" / "rmsnorm" / "rmsnorm_h128.jsonl"
    other.parent.mkdir(parents=True)
    other.write_text(json.dumps({"definition": "rmsnorm_h128", "workload": {"uuid": "u", "axes": {}, "inputs": {}}}))
    with pytest.raises(SuiteError, match="attnbench reads gqa_ragged_prefill, gqa_paged_prefill, gqa_paged_decode"):
        read_flashinfer(other)


def test_safetensors_round_trip_and_a_cut_file(tmp_path: Path) -> None:
    path = tmp_path / "t.safetensors"
    write_safetensors(path, {"a": [0, 5, 9], "b": [-1]})
    assert read_safetensors(path) == {"a": [0, 5, 9], "b": [-1]}
    path.write_bytes(path.read_bytes()[:-6])
    with pytest.raises(SuiteError, match="runs past the end"):
        read_safetensors(path)


def test_merged_adds_the_weights_of_identical_batches() -> None:
    batches = [traffic.Batch(((1, 5),), 1.0, "a"), traffic.Batch(((2, 2),), 2.0, "b"),
               traffic.Batch(((1, 5),), 3.0, "c")]
    assert [(b.requests, b.weight, b.source) for b in traffic.merged(batches)] == [
        (((1, 5),), 4.0, "a"), (((2, 2),), 2.0, "b")]
