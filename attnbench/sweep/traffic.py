"""Serving traffic in: batches of (queries, keys) requests, each batch weighted. Three sources, each read as
its project writes it (docs/traffic.md cites the files): flashinfer-bench workload files, vLLM batch-spec
strings, and FlashAttention's length distributions. Pure data; anything unreadable is a one-line
SuiteError."""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from attnbench.core.axes import MAX_BATCH, MAX_SEQ
from attnbench.core.errors import SuiteError

Request = tuple[int, int]  # (new tokens, whole sequence with cache)


@dataclass(frozen=True)
class Batch:
    """Its requests, how often the traffic holds it, and where it came from."""

    requests: tuple[Request, ...]
    weight: float
    source: str

    @property
    def tokens(self) -> int:
        """Query tokens: what a server counts as processed."""
        return sum(q for q, _ in self.requests)


def merged(batches: list[Batch]) -> list[Batch]:
    """Identical batches as one, weights added, in first-seen order."""
    held: dict[tuple[Request, ...], Batch] = {}
    for batch in batches:
        seen = held.get(batch.requests)
        held[batch.requests] = batch if seen is None else Batch(seen.requests, seen.weight + batch.weight,
                                                                seen.source)
    return list(held.values())


VLLM_SEGMENT = re.compile(r"^(\d+)?q(\d+)(k?)(?:s(\d+)(k?))?$")


def parse_vllm(spec: str) -> tuple[Request, ...]:
    """E.g. "2q2k_32q1s1k": two 2048-token prefills and 32 decodes over 1024 keys (`k` is ×1024)."""
    requests: list[Request] = []
    for segment in spec.split("_"):
        match = VLLM_SEGMENT.match(segment)
        if match is None:
            raise SuiteError(f"vLLM batch spec {spec!r}: segment {segment!r} is not "
                             "(<count>)q<len>(k)(s<len>(k)); allowed: e.g. q2k, 8q1s1k, 2q2k_32q1s1k")
        count = int(match.group(1) or 1)
        q = int(match.group(2)) * (1024 if match.group(3) else 1)
        k = q if match.group(4) is None else int(match.group(4)) * (1024 if match.group(5) else 1)
        if not 1 <= count <= MAX_BATCH or k > MAX_SEQ:
            raise SuiteError(f"vLLM batch spec {spec!r}: segment {segment!r} holds {count} requests of {k} "
                             f"tokens; allowed: 1 to {MAX_BATCH} requests of up to {MAX_SEQ} tokens")
        if k < q:
            raise SuiteError(f"vLLM batch spec {spec!r}: segment {segment!r} has {q} queries in a sequence "
                             f"of {k} tokens; allowed: s at least q (the sequence holds its new tokens)")
        requests.extend([(q, k)] * count)
    return tuple(requests)


PATTERNS = ("constant", "uniform", "wide", "longtail", "bimodal", "skew", "skew_shuffled")
STREAM_LENGTHS, STREAM_DECODE, STREAM_ZERO = 1, 2, 3  # separate draws, as FA seeds them


def generate(pattern: str, batch: int, seq_len: int, decode_fraction: float = 0.0, zero_fraction: float = 0.0,
             seed: int = 0) -> tuple[Request, ...]:
    """Lengths drawn by benchmark_varlen_sched.py's rules from numpy's seeded generator (other draws than
    torch's); then decode_fraction made decodes and zero_fraction empty. A prefill's keys are its queries."""
    import numpy as np

    draw = LENGTHS.get(pattern)
    if draw is None:
        raise SuiteError(f"generate: {pattern!r} is not a length distribution; "
                         f"allowed: {', '.join(PATTERNS)}")
    lens = draw(np.random.default_rng([seed, STREAM_LENGTHS]), batch, seq_len)
    queries, keys = [int(n) for n in lens], [int(n) for n in lens]
    for i in _picked(batch, decode_fraction, [seed, STREAM_DECODE]):
        queries[i] = 1
    for i in _picked(batch, zero_fraction, [seed, STREAM_ZERO]):
        queries[i] = keys[i] = 0
    return tuple(zip(queries, keys, strict=False))


def _constant(rng: Any, batch: int, seq_len: int) -> list[int]:
    return [seq_len] * batch


def _uniform(rng: Any, batch: int, seq_len: int) -> list[int]:
    return rng.integers(max(1, seq_len // 2), seq_len + 1, size=batch).tolist()


def _wide(rng: Any, batch: int, seq_len: int) -> list[int]:
    return rng.integers(1, seq_len + 1, size=batch).tolist()


def _longtail(rng: Any, batch: int, seq_len: int) -> list[int]:
    """Most 1/16..1/8 of seq_len, one in eight all of it."""
    lens = rng.integers(max(1, seq_len // 16), max(2, seq_len // 8), size=batch).tolist()
    for i in rng.permutation(batch)[:max(1, batch // 8)].tolist():
        lens[i] = seq_len
    return lens


def _bimodal(rng: Any, batch: int, seq_len: int) -> list[int]:
    return [seq_len if i % 2 == 0 else max(1, seq_len // 8) for i in range(batch)]


def _skew(rng: Any, batch: int, seq_len: int) -> list[int]:
    return [max(1, int(seq_len * i / max(1, batch - 1))) for i in range(batch)]


def _skew_shuffled(rng: Any, batch: int, seq_len: int) -> list[int]:
    lens = _skew(rng, batch, seq_len)
    return [lens[i] for i in rng.permutation(batch).tolist()]


LENGTHS = {"constant": _constant, "uniform": _uniform, "wide": _wide, "longtail": _longtail,
           "bimodal": _bimodal, "skew": _skew, "skew_shuffled": _skew_shuffled}
assert tuple(LENGTHS) == PATTERNS


def _picked(batch: int, fraction: float, seed: list[int]) -> list[int]:
    """FlashAttention's _override_random_subset."""
    import numpy as np

    count = int(round(fraction * batch))
    return np.random.default_rng(seed).permutation(batch)[:count].tolist() if count > 0 else []


# Definitions read (flashinfer_trace/definitions/gqa_*): name prefix -> (decode, paged)
FLASHINFER_KINDS = {"gqa_ragged_prefill": (False, False), "gqa_paged_prefill": (False, True),
                    "gqa_paged_decode": (True, True)}
SAFETENSORS_INTS = {"I32": "i", "I64": "q", "U32": "I", "U8": "B", "I16": "h"}


@dataclass(frozen=True)
class Definition:
    """The geometry one workload file's batches share."""

    name: str
    heads: int
    kv_heads: int
    head_dim: int
    page_size: int | None
    causal: bool
    dtype: str
    decode: bool


def read_safetensors(path: Path) -> dict[str, list[int]]:
    """Integer tensors, flattened, per the format's spec: 8-byte header size, JSON header, bytes."""
    try:
        data = path.read_bytes()
        size = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + size])
    except (OSError, ValueError) as exc:
        raise SuiteError(f"{path}: cannot be read as a safetensors file ({exc})") from None
    tensors: dict[str, list[int]] = {}
    for key, meta in header.items():
        if key == "__metadata__" or not isinstance(meta, dict) or meta.get("dtype") not in SAFETENSORS_INTS:
            continue
        start, end = meta["data_offsets"]
        code = SAFETENSORS_INTS[meta["dtype"]]
        chunk = data[8 + size + start:8 + size + end]
        count = len(chunk) // struct.calcsize(code)
        if end > len(data) - 8 - size or len(chunk) % struct.calcsize(code):
            raise SuiteError(f"{path}: tensor {key!r} runs past the end of the file (cut short?)")
        tensors[key] = list(struct.unpack(f"<{count}{code}", chunk))
    return tensors


def write_safetensors(path: Path, tensors: dict[str, list[int]]) -> None:
    """Integer vectors as int32, as flashinfer-bench stores its indptr blobs."""
    header: dict[str, Any] = {}
    body = b""
    for key, values in tensors.items():
        chunk = struct.pack(f"<{len(values)}i", *values)
        header[key] = {"dtype": "I32", "shape": [len(values)],
                       "data_offsets": [len(body), len(body) + len(chunk)]}
        body += chunk
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # padded to 8 bytes, as the reference writer does
    path.write_bytes(len(text).to_bytes(8, "little") + text + body)


def flashinfer_root(path: Path) -> Path:
    """Root of a file under workloads/{op_type}/ (blob paths and definitions are relative to it)."""
    return path.parents[2] if len(path.parents) > 2 and path.parents[1].name == "workloads" else path.parent


def read_definition(path: Path, name: str) -> Definition:
    """definitions/{op_type}/{name}.json under the file's root."""
    kind = next((k for k in FLASHINFER_KINDS if name.startswith(k + "_")), None)
    if kind is None:
        raise SuiteError(f"{path}: definition {name!r}: attnbench reads "
                         f"{', '.join(FLASHINFER_KINDS)} workloads")
    where = flashinfer_root(path) / "definitions" / path.parent.name / f"{name}.json"
    try:
        data = json.loads(where.read_text(encoding="utf-8"))
        consts = {k: v["value"] for k, v in data["axes"].items() if v.get("type") == "const"}
        dtype = str(data["inputs"]["q"]["dtype"])
        heads, kv_heads = int(consts["num_qo_heads"]), int(consts["num_kv_heads"])
        head_dim = int(consts["head_dim"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SuiteError(f"{where}: the definition of {name} cannot be read "
                         f"({type(exc).__name__}: {exc})") from None
    decode, paged = FLASHINFER_KINDS[kind]
    page_size = int(consts.get("page_size", 1)) if paged else None
    return Definition(name, heads, kv_heads, head_dim, page_size, "causal" in name.split("_"), dtype, decode)


def read_flashinfer(path: Path) -> tuple[Definition, list[Batch]]:
    """One batch per workload uuid, identical batches merged."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteError(f"{path}: cannot be read ({exc})") from None
    definition: Definition | None = None
    batches, seen = [], set()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}: line {number}"
        try:
            entry = json.loads(line)
            name, work = str(entry["definition"]), entry["workload"]
            uuid, axes, inputs = str(work["uuid"]), dict(work["axes"]), dict(work["inputs"])
        except (ValueError, KeyError, TypeError) as exc:
            raise SuiteError(f"{where}: not a flashinfer-bench workload "
                             f"({type(exc).__name__}: {exc})") from None
        if uuid in seen:  # a trace holds a workload once per solution
            continue
        seen.add(uuid)
        if definition is None:
            definition = read_definition(path, name)
        elif name != definition.name:
            raise SuiteError(f"{where}: definition {name!r} in a file of {definition.name!r}; allowed: one "
                             "definition per file, as flashinfer-trace stores them")
        batches.append(Batch(_requests(where, definition, axes, inputs, flashinfer_root(path)), 1.0,
                             f"{definition.name} {uuid}"))
    if definition is None:
        raise SuiteError(f"{path}: holds no workload")
    return definition, merged(batches)


def _requests(where: str, definition: Definition, axes: dict[str, Any], inputs: dict[str, Any],
              root: Path) -> tuple[Request, ...]:
    """From its indptr blobs, checked against its own axes."""
    names = ["kv_indptr"] + ([] if definition.decode else ["qo_indptr"])
    if definition.page_size not in (None, 1):
        names.append("kv_last_page_len")
    tensors: dict[str, list[int]] = {}
    for name in names:
        spec = inputs.get(name)
        if not isinstance(spec, dict) or spec.get("type") != "safetensors":
            raise SuiteError(f"{where}: input {name} is {spec!r}, not a safetensors tensor: the lengths of "
                             "its requests were not recorded")
        blob = root / str(spec.get("path"))
        tensors[name] = read_safetensors(blob).get(str(spec.get("tensor_key")), [])
        if not tensors[name]:
            raise SuiteError(f"{where}: {blob} holds no integer tensor {spec.get('tensor_key')!r}")
    kv = _lengths(where, tensors["kv_indptr"], "kv_indptr")
    if definition.page_size not in (None, 1):
        last = tensors["kv_last_page_len"]
        if len(last) != len(kv) or any(not 0 < n <= definition.page_size for p, n in zip(kv, last,
                                                                                         strict=False) if p):
            raise SuiteError(f"{where}: kv_last_page_len {last} does not fit {len(kv)} requests of pages of "
                             f"{definition.page_size}")
        kv = [(p - 1) * definition.page_size + n if p else 0 for p, n in zip(kv, last, strict=False)]
    queries = [1] * len(kv) if definition.decode else _lengths(where, tensors["qo_indptr"], "qo_indptr")
    if len(queries) != len(kv):
        raise SuiteError(f"{where}: qo_indptr holds {len(queries)} requests, kv_indptr {len(kv)}")
    expected = {"len_indptr": len(kv) + 1, "batch_size": len(kv), "total_q": sum(queries)}
    for axis, value in expected.items():
        if axis in axes and int(axes[axis]) != value and not (axis == "total_q" and definition.decode):
            raise SuiteError(f"{where}: axis {axis} is {axes[axis]}, but the blob's indptr gives {value}")
    return tuple(zip(queries, kv, strict=False))


def _lengths(where: str, indptr: list[int], name: str) -> list[int]:
    """Refused unless it starts at 0 and never falls."""
    if len(indptr) < 2 or indptr[0] != 0 or any(b < a for a, b in pairwise(indptr)):
        raise SuiteError(f"{where}: {name} {indptr[:8]}{'…' if len(indptr) > 8 else ''} is not an indptr (0, "
                         "then non-decreasing ends)")
    return [b - a for a, b in pairwise(indptr)]
