"""Adding a backend touches its own file and nothing else: a backend written here, with its adapter and its cost
model, is forecast, run, reported and compared through the plugin option, with no edit anywhere in attnbench."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.backends.base import CAPABILITY_FIELDS, Backend, Cost, KernelCost, Prepared
from attnbench.core import workload
from attnbench.core.case import Case
from attnbench.run.calibration import Machine
from attnbench.run.forecast import forecast
from attnbench.timing.timers import TimingSettings
from attnbench.verify.inputs import naive_attention
from tests.helpers import make_case

PLUGIN = "tests.test_new_backend:QueryBlocks"


class QueryBlocks(Backend):
    """Attention a block of 16 queries at a time in plain PyTorch ops: a backend as a plugin author writes one."""

    name = "query-blocks"
    summary = "attention 16 queries at a time (a plugin written in a test)"
    cost = Cost(cpu=KernelCost(pairs="dense", efficiency_fwd=0.05, efficiency_bwd=0.05, score_passes_fwd=2.0,
                               score_passes_bwd=2.0, calls=4),
                cuda=KernelCost(pairs="dense", efficiency_fwd=0.05, efficiency_bwd=0.05, score_passes_fwd=2.0,
                                score_passes_bwd=2.0, calls=4))

    def prepare(self, case: Case, q, k, v) -> Prepared:  # type: ignore[no-untyped-def]
        import torch

        mask = workload.mask(case, device=q.device)
        group = case.heads // case.kv_heads

        def call(q, k, v):  # type: ignore[no-untyped-def]
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            blocks = [naive_attention(q[:, :, i:i + 16], k, v, None if mask is None else mask[i:i + 16])
                      for i in range(0, case.seq_len, 16)]
            return torch.cat(blocks, dim=2)

        return Prepared((q, k, v), call, kernel="query-blocks (test plugin)")


SUITE = """name: plugged
device: cpu
backends: [sdpa, query-blocks]
timing: {warmup_ms: 0, budget_ms: 5, min_samples: 3, max_samples: 5}
sweep: {batch: [1], seq_len: [64, 128], heads: [4], kv_heads: [2], head_dim: [16], dtype: [float32],
        causal: [true], mode: [fwd, fwd_bwd]}
"""


def test_the_forecast_prices_a_new_backend_by_the_cost_model_it_declares() -> None:
    machine = Machine("cpu", "test CPU", {"float32": 0.1, "float64": 0.05}, 20.0, 0.003, "given")
    case = make_case(seq_len=2048, causal=True)
    settings = TimingSettings(warmup_ms=0, budget_ms=100, min_samples=3)
    declared = forecast([(case, QueryBlocks())], settings, machine, report=False)
    faster = dataclasses.replace(QueryBlocks.cost, cpu=dataclasses.replace(QueryBlocks.cost.cpu, efficiency_fwd=0.5))
    quicker = type("Quicker", (QueryBlocks,), {"cost": faster})()
    assert declared.tasks[0].runs and declared.by_backend()["query-blocks"] > 0
    assert forecast([(case, quicker)], settings, machine, report=False).total_s < declared.total_s


@pytest.mark.parametrize("field", CAPABILITY_FIELDS)
def test_a_plugin_that_sets_a_capability_outside_capabilities_fails_at_its_class(field: str) -> None:
    """An old-style plugin's `workload_axes = ...` would be read by nothing: its class statement raises instead."""
    with pytest.raises(TypeError, match=rf"OldStyle sets {field}: declare {field} in capabilities = "
                                        r"Capabilities\(\.\.\.\) \(docs/backends\.md#plugins\)$"):
        type("OldStyle", (QueryBlocks,), {"name": "old-style", field: frozenset()})


@pytest.mark.slow
@pytest.mark.serial  # compares two real runs' timings: other tests' load on the same cores would move them
def test_a_new_backend_is_run_reported_and_compared_with_no_edit_elsewhere(tmp_path: Path) -> None:
    from attnbench.cli.main import app

    suite = tmp_path / "plugged.yaml"
    suite.write_text(SUITE)
    planned = CliRunner().invoke(app, ["run", str(suite), "--plugin", PLUGIN, "--dry-run", "--cache-dir",
                                       str(tmp_path / "cache")])
    assert planned.exit_code == 0, planned.output
    assert "query-blocks" in planned.output  # a row of the forecast's table
    runs = []
    for name in ("base", "new"):
        out = tmp_path / name
        result = CliRunner().invoke(app, ["run", str(suite), "--plugin", PLUGIN, "--out", str(out), "--cache-dir",
                                          str(tmp_path / "cache")])
        assert result.exit_code == 0, result.output
        runs.append(out)
    records = [json.loads(line) for line in (runs[0] / "results.jsonl").read_text().splitlines()]
    mine = [r for r in records if r["backend"] == "query-blocks"]
    assert len(mine) == 4 and {r["status"] for r in mine} == {"ok"}
    assert all(r["kernel"] == "query-blocks (test plugin)" for r in mine)
    html = (runs[0] / "report.html").read_text()
    assert "query-blocks" in html
    assert "query-blocks" in (runs[0] / "summary.md").read_text()
    compared = CliRunner().invoke(app, ["compare", str(runs[0]), str(runs[1]), "--threshold", "1000%"])
    assert compared.exit_code == 0, compared.output
    assert "query-blocks" in compared.output
