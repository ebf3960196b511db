"""The report's answer per group (report.lead) on known truths: edits of the committed H200 gpu-check run."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from attnbench.records.env import read_env
from attnbench.records.record import Record
from attnbench.records.results import load_records
from attnbench.records.run import run_of
from attnbench.report.groups import group_records
from attnbench.report.lead import GroupLead, group_leads
from attnbench.stats.metric import TIME
from attnbench.stats.pooling import pool

H200 = Path(__file__).parent.parent / "reports" / "NVIDIA-H200-20261204-c671d98" / "check"
MHA_FWD = "bf16 · causal · 16 heads · d=128 · fwd"
GQA_FWD = "bf16 · causal · 16 heads / 4 KV heads · d=128 · fwd"


def leads(records: list[Record]) -> dict[str, GroupLead]:
    pooled = pool([run_of(H200, records, read_env(H200))], TIME)
    return {lead.group.title(): lead for lead in group_leads(group_records(records), pooled)}


def slower(record: Record, factor: float) -> Record:
    return dataclasses.replace(record, time_ms=record.time_ms * factor, ci_low_ms=record.ci_low_ms * factor,
                               ci_high_ms=record.ci_high_ms * factor)


def in_group(record: Record, title: str) -> bool:
    return group_records([record])[0].title() == title


def test_the_h200_run_never_calls_jax_cudnn_fastest_and_names_the_overlap() -> None:
    found = leads(load_records(H200))
    assert len(found) == 8 and all(lead.lines for lead in found.values())
    assert "jax-cudnn" not in {w for lead in found.values() for w in lead.winners}
    assert any("jax-cudnn at 4K" in u and "implausible" in u for u in found[MHA_FWD].unranked)
    mha = found[MHA_FWD].lines
    assert [line.kind for line in mha] == ["tie", "none"]  # cudnn and sdpa's intervals overlap at 4K; 16K errored
    assert mha[1].text == "16K: no backend has a clean number (error ×9)"
    assert found[GQA_FWD].winners == ["cudnn"]


def test_a_planted_slower_rival_leaves_one_fastest_with_its_margin() -> None:
    records = [slower(r, 1.25) if r.backend in ("sdpa", "sdpa-cudnn") and r.seq_len == 4096 and r.time_ms
               and in_group(r, MHA_FWD) else r for r in load_records(H200)]
    line = leads(records)[MHA_FWD].lines[0]
    assert line.kind == "winner" and line.backend == "cudnn", line.text
    ratio = float(line.text.split("runner-up ")[1].split()[1].rstrip("×"))
    assert 1.2 < ratio < 1.3, line.text  # sdpa's 1.01× times the planted 1.25


def test_an_unrepeatable_leader_is_not_ranked() -> None:
    records = [dataclasses.replace(r, repeatable=False) if r.backend == "cudnn" and in_group(r, GQA_FWD) else r
               for r in load_records(H200)]
    lead = leads(records)[GQA_FWD]
    assert "cudnn" not in lead.winners and lead.winners, lead.lines
    assert any(u.startswith("cudnn at 4K") and "not repeatable" in u for u in lead.unranked), lead.unranked
