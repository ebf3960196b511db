"""Decisions as a user reads them: the dispatch table's JSON, Markdown, a terminal table, the bucket in words."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnbench import __version__
from attnbench.core import axes
from attnbench.core.errors import AttnbenchError
from attnbench.core.kernel_id import KernelId
from attnbench.core.policy import percent
from attnbench.core.units import clipped, fmt_length, fmt_ratio, md_cell
from attnbench.records.record import Status
from attnbench.records.run import Run
from attnbench.records.words import MODE_WORDS, dtype_word
from attnbench.report.groups import quant_words
from attnbench.stats.dispatch import FEATURES, SCHEMA_NAME, SCHEMA_VERSION, Bucket
from attnbench.stats.metric import Metric
from attnbench.stats.recommend import DEFAULT_BACKEND, Call, Decision

if TYPE_CHECKING:
    from rich.table import Table

SCHEMA_FILE = "dispatch.schema.json"
FEATURE_WORDS = axes.features()
SHOWN_EXCLUSIONS = 3  # per row in the tables; the JSON lists every one
NOTE_CHARS = 80  # an exclusion's reason in a table row; longer ones end in "…" (the JSON keeps it whole)


def schema() -> dict[str, Any]:
    """The JSON Schema of a dispatch table, with a bucket field for every feature the axis table declares."""
    data = json.loads(resources.files("attnbench.report").joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))
    bucket = data["$defs"]["bucket"]
    for name in FEATURES:
        bucket["properties"].setdefault(name, {"type": "boolean"})
        if name not in bucket["required"]:
            bucket["required"].append(name)
    return data


def band_words(band: tuple[int, int]) -> str:
    """[4096, 8192] -> '4K–8K' (the upper end excluded)."""
    return f"{fmt_length(band[0])}–{fmt_length(band[1])}"


def bucket_words(bucket: Bucket) -> str:
    """A bucket predicate in words: 'bf16 · causal · window 1024 · 16 heads / 4 KV heads · d=128 · fwd · 4K–8K'."""
    words = [dtype_word(bucket.dtype), "causal" if bucket.causal else "no mask"]
    if bucket.window is not None:
        words.append(f"window {bucket.window}")
    heads, kv = bucket.heads, bucket.kv_heads
    words.append(f"{heads} heads" if heads == kv else f"{heads} heads / {kv} KV heads")
    words.append(f"d={bucket.head_dim}" + (f", d_v={bucket.head_dim_v}" if bucket.head_dim_v != bucket.head_dim
                                           else ""))
    words += [FEATURE_WORDS[f] for f in FEATURES if getattr(bucket, f)]
    words += quant_words(bucket)
    words.append(MODE_WORDS.get(bucket.mode, bucket.mode))
    q, kv_band = bucket.seq_len, bucket.kv_seq_len
    words.append(band_words(q) if q == kv_band else f"q {band_words(q)} / KV {band_words(kv_band)}")
    return " · ".join(words)


def _run_entry(run: Run) -> dict[str, Any]:
    env = run.env
    return {"run_id": run.run_id, "path": str(run.path), "timestamp": run.timestamp, "suite": env.suite_name,
            "git_commit": env.git_commit, "versions": run.env.versions()}


def _row(decision: Decision, runs: dict[str, Run], metric: Metric) -> dict[str, Any]:
    chosen = decision.chosen
    source = runs.get(chosen[0].run_id) if chosen else None
    return {
        "bucket": decision.bucket.to_dict(),
        "cases": list(decision.cases),
        "decision": decision.decision.value,
        "why": decision.why,
        "backend": decision.backend,
        "kernel": label(chosen[0].kernel) if chosen and decision.backend else None,
        "leader": decision.leader,
        "values": [{"case_id": n.case_id, "value": n.value, "interval": [n.low, n.high], "run_id": n.run_id}
                   for n in chosen],
        "tie": list(decision.tie),
        "runner_up": ({"backend": decision.runner_up, "ratio": decision.runner_up_ratio}
                      if decision.runner_up else None),
        "margin": decision.margin,
        "default": {"backend": DEFAULT_BACKEND, "kernel": label(decision.default_kernel),
                    "ratio": decision.default_ratio, "why": decision.default_why},
        "excluded": [{"backend": x.backend, "why": x.reason} for x in decision.excluded],
        "contested_by": [{"backend": c.backend, "why": c.words, "value": c.value} for c in decision.contested],
        "run_ids": decision.run_ids,
        "versions": source.env.versions() if source is not None else {},
    }


def to_json(decisions: list[Decision], runs: list[Run], metric: Metric) -> dict[str, Any]:
    """The dispatch table (docs/recommend.md, attnbench/report/dispatch.schema.json)."""
    by_id = {run.run_id: run for run in runs}
    return {
        "schema": SCHEMA_NAME,
        "schema_version": SCHEMA_VERSION,
        "generated_by": f"attnbench {__version__}",
        "by": metric.name,
        "unit": metric.unit,
        "device": runs[0].device,
        "gpu": runs[0].device_name,
        "runs": [_run_entry(run) for run in runs],
        "rows": [_row(d, by_id, metric) for d in decisions],
    }


def write_new(path: Path, text: str) -> None:
    """Write a file that must not exist yet; a kill at any moment leaves it whole or absent."""
    import os
    import tempfile

    if path.exists():
        raise AttnbenchError(f"{path}: already exists; choose another name (nothing was written)")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                file.write(text)
                file.flush()
                os.fsync(file.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise
            except OSError:  # a filesystem without hard links: rename, having checked the name is free
                if path.exists():
                    raise FileExistsError(path) from None
                os.replace(tmp, path)
                return
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except FileExistsError:
        raise AttnbenchError(f"{path}: already exists; choose another name (nothing was written)") from None
    except OSError as exc:
        raise AttnbenchError(f"{path}: cannot be written ({exc.strerror})") from None


def ratio_text(value: float | None) -> str:
    """A ratio, with more decimals the nearer it is to 1: '1.0003×', '1.004×', '3.50×'."""
    if value is None:
        return "—"
    if 0.99 < value < 1.01:
        return f"{value:.4f}×"
    return f"{value:.3f}×" if 0.9 < value < 1.1 else fmt_ratio(value)


def value_text(decision: Decision, metric: Metric) -> str:
    """The leader's figure: 'flex 0.436 ms [0.436, 0.436]', or its range over several cases."""
    numbers = decision.numbers.get(decision.leader or "", [])
    if not numbers:
        return "—"
    if len(numbers) == 1:
        n = numbers[0]
        return f"{decision.leader} {n.value:.3g} {metric.unit} [{n.low:.3g}, {n.high:.3g}]"
    low, high = min(n.value for n in numbers), max(n.value for n in numbers)
    return f"{decision.leader} {low:.3g}–{high:.3g} {metric.unit} ({len(numbers)} cases)"


def runner_text(decision: Decision) -> str:
    """'sdpa-flash 1.27× (apart by 1.22×)', or the runner-up inside the tie."""
    if decision.runner_up is None:
        return "—"
    text = f"{decision.runner_up} {ratio_text(decision.runner_up_ratio)}"
    if decision.margin is not None and decision.runner_up not in decision.tie:
        text += f" (apart by {ratio_text(decision.margin)})"
    return text


def sdpa_choice(kernel: KernelId | None) -> str:
    """The kernel sdpa dispatched to ('CUDNN_ATTENTION'), or ''."""
    return kernel.choice or "" if kernel else ""


def label(kernel: KernelId | None) -> str | None:
    return kernel.label if kernel else None


def default_text(decision: Decision) -> str:
    """'1.00× (CUDNN_ATTENTION)', or why sdpa cannot be compared."""
    chose = sdpa_choice(decision.default_kernel)
    if decision.default_ratio is not None:
        return ratio_text(decision.default_ratio) + (f" ({chose})" if chose else "")
    return f"— ({decision.default_why or 'not measured'})"


def note_text(decision: Decision, metric: Metric) -> str:
    """The tie set, what contested the bucket, and the notable exclusions (not plain skips)."""
    notes = [decision.why] if decision.decision == Call.NONE and decision.why else []
    if decision.across_runs:
        notes.append(f"numbers from {len(decision.run_ids)} runs: each compared with ±{percent(decision.noise)} "
                     "run-to-run noise")
    if decision.decision == Call.TIE:
        notes.append("tie: " + ", ".join(decision.tie))
    for c in decision.contested:
        notes.append(f"{c.backend} {c.value:.3g} {metric.unit} is {c.why}: not judged")
    notable = [x for x in decision.excluded
               if x.cause != Status.SKIPPED and x.backend not in {c.backend for c in decision.contested}]
    for x in notable[:SHOWN_EXCLUSIONS]:
        notes.append(f"{x.backend}: {clipped(x.reason, NOTE_CHARS)}")
    if len(notable) > SHOWN_EXCLUSIONS:
        notes.append(f"{len(notable) - SHOWN_EXCLUSIONS} more excluded (see the JSON)")
    return "; ".join(notes)


HEADER = ("bucket", "decision", "call", "fastest clean", "runner-up", f"{DEFAULT_BACKEND} (default) cost", "notes")


def table_rows(decisions: list[Decision], metric: Metric) -> list[tuple[str, ...]]:
    return [(bucket_words(d.bucket), d.decision, d.backend or "—", value_text(d, metric), runner_text(d),
             default_text(d), note_text(d, metric)) for d in decisions]


def header(metric: Metric) -> tuple[str, ...]:
    what = "median ms [interval]" if metric.name == "time" else "mJ per call [resolution]"
    return tuple(h if h != "fastest clean" else f"fastest clean: {what}" for h in HEADER)


def title(runs: list[Run], metric: Metric) -> str:
    """'NVIDIA H200 · 4 runs · ranked by time'."""
    count = f"{len(runs)} run{'s' if len(runs) != 1 else ''}"
    return f"{runs[0].device_name or runs[0].device} · {count} · ranked by {metric.name}"


def to_markdown(decisions: list[Decision], runs: list[Run], metric: Metric) -> str:
    lines = [f"## Recommendation: {md_cell(title(runs, metric))}", "",
             "Per bucket of shapes: the fastest backend whose latest record is `ok`, measured untroubled (a "
             "backward's gradients checked), with its interval apart from every other candidate's (else a tie; two "
             "numbers from different runs each with the device's run-to-run noise); `unsettled` when a troubled "
             f"timing may be faster; the cost of `{DEFAULT_BACKEND}` (PyTorch's own choice) against the backend to "
             "call. "
             "Runs: " + ", ".join(f"`{run.run_id}` ({md_cell(run.timestamp)})" for run in runs) + ".", "",
             "| " + " | ".join(header(metric)) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(md_cell(cell) for cell in row) + " |" for row in table_rows(decisions, metric)]
    return "\n".join(lines) + "\n"


def terminal_table(decisions: list[Decision], runs: list[Run], metric: Metric) -> Table:
    """A rich Table for the terminal (run strings kept literal)."""
    from rich.table import Table
    from rich.text import Text

    styles = {Call.WINNER: "green", Call.TIE: "cyan", Call.UNSETTLED: "yellow", Call.NONE: "red"}
    table = Table(title=Text(title(runs, metric)), title_justify="left")
    for column in header(metric):
        table.add_column(Text(column), overflow="fold")  # Text: '[interval]' is not Rich markup
    for decision, row in zip(decisions, table_rows(decisions, metric), strict=False):
        table.add_row(Text(row[0]), Text(row[1], style=styles[decision.decision]), Text(row[2], style="bold"),
                      *(Text(c) for c in row[3:]))
    return table


def html_section(decisions: list[Decision], runs: list[Run], metric: Metric) -> dict[str, Any]:
    return {"title": title(runs, metric), "header": header(metric),
            "rows": [{"decision": d.decision, "cells": row}
                     for d, row in zip(decisions, table_rows(decisions, metric), strict=False)]}
