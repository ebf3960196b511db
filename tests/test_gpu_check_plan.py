"""scripts/gpu-check.sh's plan, made on the CPU (--dry-run): the carry calls the manifest needs, the carried site's
packages found as the GPU machine's processes will find them (a package reached only through a .pth file included),
and each step with its forecast and limit, within the lent machine's 12 minutes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def fake_site(site: Path) -> None:
    """pydantic and cutlass as the carried site lays them out: cutlass only through its package's .pth file."""
    (site / "pydantic").mkdir(parents=True)
    (site / "pydantic" / "__init__.py").write_text("")
    (site / "pydantic-2.0.dist-info").mkdir()
    dsl = site / "nvidia_cutlass_dsl"
    (dsl / "dsl_packages" / "cutlass").mkdir(parents=True)
    (dsl / "__init__.py").write_text("")
    (dsl / "dsl_packages" / "cutlass" / "__init__.py").write_text("")
    (site / "nvidia_cutlass_dsl_packages.pth").write_text(
        "import sys, os, nvidia_cutlass_dsl; sys.path.insert(0, os.path.join(nvidia_cutlass_dsl.__path__[0], "
        "'dsl_packages'))\n")


@pytest.mark.slow
def test_the_dry_run_plans_the_calls_the_site_and_each_step_within_twelve_minutes(tmp_path: Path) -> None:
    fake_site(tmp_path / "site")
    env = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_SITE": str(tmp_path / "site"),
           "GPU_SUITES": "quick", "PYTHONPATH": ""}
    result = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check.sh"), "--dry-run"], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search(r"found\s+cutlass\s+flash-attn-4's CuTe DSL \(through its \.pth\)", out)
    assert re.search(r"MISSING\s+flashinfer", out)
    quick = re.search(r"quick: forecast (\d+) s \(x1\.25\), runs within (\d+) s", out)
    assert quick and 0 < int(quick[1]) <= int(quick[2]) <= 570
    minutes = re.search(r"about (\d+) min of the 12 the plan allows", out)
    assert minutes and int(minutes[1]) <= 12
