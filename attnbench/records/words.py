"""A case in words, as reports and comparisons name it."""

from __future__ import annotations

from typing import Any

from attnbench.core import axes
from attnbench.core.case import DTYPE_SHORT
from attnbench.records.record import Record
from attnbench.records.shape import CaseShape

MODE_WORDS = {"fwd": "fwd", "bwd": "bwd", "fwd_bwd": "fwd+bwd"}
DTYPE_WORDS = {**DTYPE_SHORT, "float64": "fp64"}


def dtype_word(dtype: Any) -> str:
    return DTYPE_WORDS.get(str(dtype), str(dtype))


def shape_words(shape: CaseShape | Record) -> list[str]:
    """The fixed case fields of a group (or a record's), as words."""
    words = [dtype_word(shape.dtype), "causal" if shape.causal else "no mask"]
    if shape.window is not None:
        words.append(f"window {shape.window}")
    heads, kv_heads = shape.heads, shape.kv_heads
    words.append(f"{heads} heads" if heads == kv_heads else f"{heads} heads / {kv_heads} KV heads")
    words.append(f"d={shape.head_dim}")
    words.append(MODE_WORDS.get(str(shape.mode), str(shape.mode)))
    if int(shape.batch or 1) > 1:
        words.append(f"batch {shape.batch}")
    words += workload_words(shape)
    if shape.device not in (None, "cuda"):
        words.append(str(shape.device))
    return words


def workload_words(shape: Any, short: bool = False) -> list[str]:
    """The workload axes a group or record sets, in words ("8 documents (random)") or short ("doc8rand")."""
    return axes.words_of(shape, short)


def case_words(record: Record) -> str:
    words = shape_words(record)
    if record.seq_len == record.kv_seq_len:
        words.append(f"seq {record.seq_len}")
    else:
        words.append(f"q {record.seq_len} / kv {record.kv_seq_len}")
    return " · ".join(words)
