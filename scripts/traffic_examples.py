"""Write the example flashinfer-bench traces under attnbench/suites/traffic/flashinfer (suites/mix.yaml reads them).

They follow flashinfer-trace's layout and format (flashinfer-ai/flashinfer-bench: flashinfer_bench/data/workload.py,
trace.py; flashinfer_trace/definitions/gqa_ragged/*.json, gqa_paged/*.json; flashinfer_trace/workloads/*/*.jsonl):
definitions/{op_type}/{name}.json, workloads/{op_type}/{name}.jsonl with one workload per line, and each workload's
indptr tensors in blob/workloads/{op_type}/{name}/{name}_{uuid}.safetensors. The lengths are attnbench's own draws
(FlashAttention's long-tail distribution, seeded), not captured from a server: the files show the format, and the
same reader takes a real trace. Run from the repository root: .venv/bin/python scripts/traffic_examples.py
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from attnbench.sweep.traffic import generate, write_safetensors

ROOT = Path(__file__).resolve().parent.parent / "attnbench" / "suites" / "traffic" / "flashinfer"
GEOMETRY = {"num_qo_heads": 32, "num_kv_heads": 8, "head_dim": 128}  # Llama 3.1 8B at TP 1
NAMESPACE = uuid.UUID("7a1d0c2e-5f3b-4c8e-9d4a-2b6f1e0c3a57")  # fixed: the files are the same on every run


def definition(name: str, op_type: str, stage: str, axes: dict, inputs: dict) -> dict:
    consts = {k: {"type": "const", "value": v} for k, v in GEOMETRY.items()}
    return {"name": name, "op_type": op_type,
            "description": "Written by attnbench's scripts/traffic_examples.py in flashinfer-bench's format; lengths "
                           "drawn, not captured.",
            "tags": [f"stage:{stage}"], "axes": {**axes, **consts},
            "inputs": {"q": {"shape": ["total_q", "num_qo_heads", "head_dim"], "dtype": "bfloat16"}, **inputs}}


def indptr(lengths: list[int]) -> list[int]:
    ends = [0]
    for n in lengths:
        ends.append(ends[-1] + n)
    return ends


def line(name: str, op_type: str, axes: dict, tensors: dict[str, list[int]], key: str) -> str:
    """One workload line, its indptr tensors written to their blob."""
    uid = uuid.uuid5(NAMESPACE, f"{name}-{key}")
    blob = Path("blob") / "workloads" / op_type / name / f"{name}_{uid.hex}.safetensors"
    (ROOT / blob).parent.mkdir(parents=True, exist_ok=True)
    write_safetensors(ROOT / blob, tensors)
    inputs: dict = {"q": {"type": "random"}}
    for tensor in tensors:
        inputs[tensor] = {"type": "safetensors", "path": f"./{blob.as_posix()}", "tensor_key": tensor}
    inputs["sm_scale"] = {"type": "scalar", "value": 128 ** -0.5}
    work = {"uuid": str(uid), "axes": axes, "inputs": inputs}
    return json.dumps({"definition": name, "solution": None, "workload": work, "evaluation": None})


def write(op_type: str, name: str, stage: str, axes: dict, inputs: dict, lines: list[str]) -> None:
    for folder, text in (("definitions", json.dumps(definition(name, op_type, stage, axes, inputs), indent=2)),
                         ("workloads", "\n".join(lines))):
        path = ROOT / folder / op_type / f"{name}.{'json' if folder == 'definitions' else 'jsonl'}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")


def prefill() -> None:
    """Ragged prefills: batches of 1-16 requests, long-tail lengths up to 4K."""
    name, lines = "gqa_ragged_prefill_causal_h32_kv8_d128", []
    for seed, batch in enumerate((1, 2, 4, 8, 16, 4)):
        lens = [q for q, _ in generate("longtail", batch, 4096, seed=seed)]
        ptr = indptr(lens)
        axes = {"len_indptr": len(ptr), "total_q": ptr[-1], "total_kv": ptr[-1]}
        lines.append(line(name, "gqa_ragged", axes, {"qo_indptr": ptr, "kv_indptr": ptr}, f"{seed}"))
    var = {k: {"type": "var"} for k in ("total_q", "total_kv", "len_indptr")}
    ints = {k: {"shape": ["len_indptr"], "dtype": "int32"} for k in ("qo_indptr", "kv_indptr")}
    write("gqa_ragged", name, "prefill", var, ints, lines)


def decode() -> None:
    """Paged decodes, pages of one token: batches of 1-32 requests over long-tail caches up to 4K."""
    name, lines = "gqa_paged_decode_h32_kv8_d128_ps1", []
    for seed, batch in enumerate((1, 1, 8, 16, 32, 8)):
        lens = [k for _, k in generate("longtail", batch, 4096, seed=100 + seed)]
        ptr = indptr(lens)
        axes = {"batch_size": batch, "num_pages": ptr[-1] + 16, "len_indptr": len(ptr), "num_kv_indices": ptr[-1]}
        indices = list(range(ptr[-1]))
        lines.append(line(name, "gqa_paged", axes, {"kv_indptr": ptr, "kv_indices": indices}, f"{seed}"))
    var = {k: {"type": "var"} for k in ("batch_size", "num_pages", "len_indptr", "num_kv_indices")}
    ints = {"kv_indptr": {"shape": ["len_indptr"], "dtype": "int32"},
            "kv_indices": {"shape": ["num_kv_indices"], "dtype": "int32"}}
    write("gqa_paged", name, "decode", {**var, "page_size": {"type": "const", "value": 1}}, ints, lines)


if __name__ == "__main__":
    prefill()
    decode()
    print(f"wrote {ROOT}")
