"""A SIGKILL at a random moment of `history add`, `merge`, `report` and `recommend` leaves each output whole or
absent (written under a temporary name, then renamed or linked into place), and the command can be run again."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnbench.history.store import Store
from attnbench.records.results import load_records

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "tests" / "data" / "cpu-run"
TRIALS = 4


def command(*args: object) -> list[str]:
    return [sys.executable, "-m", "attnbench", *map(str, args)]


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}


def full_run(args: list[str]) -> float:
    """Run a command to its end; how long it took."""
    start = time.perf_counter()
    subprocess.run(args, check=True, capture_output=True, env=environment())
    return time.perf_counter() - start


def children(pid: int) -> set[int]:
    """The processes whose parent is `pid` (Linux's /proc)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended while we looked
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def killed(args: list[str], after: float) -> None:
    """Start a command and SIGKILL it `after` seconds in (or let it finish if it is done by then); every process it
    had started (a report's chart workers) must end too, within 10 s, rather than linger blocked for good."""
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment())
    time.sleep(after)
    started = children(process.pid)
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in started if alive(pid)], f"{args[3]}: its processes outlived its SIGKILL"


def moments(duration: float, seed: int) -> list[float]:
    """TRIALS moments spread over a command's run: its start-up, its reading and its writing."""
    rng = random.Random(seed)
    return [rng.uniform(0.1, 1.1) * duration for _ in range(TRIALS)]


def outputs(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` but temporary ones, by relative path."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.name.endswith(".tmp")}


def whole_or_absent(found: dict[str, bytes], complete: dict[str, bytes]) -> None:
    assert set(found) <= set(complete), set(found) - set(complete)
    for name, data in found.items():
        assert data == complete[name], f"{name}: cut short ({len(data)} of {len(complete[name])} bytes)"


def shards(tmp_path: Path) -> list[Path]:
    records = load_records(RUN)
    folders = []
    for i, part in enumerate((records[::2], records[1::2])):
        folder = tmp_path / f"shard{i}"
        folder.mkdir()
        shutil.copy(RUN / "env.json", folder / "env.json")
        (folder / "results.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in part))
        folders.append(folder)
    return folders


@pytest.mark.slow
def test_merge_killed_anywhere_leaves_the_merged_run_whole_or_absent(tmp_path: Path) -> None:
    sources = shards(tmp_path)
    duration = full_run(command("merge", *sources, "--out", tmp_path / "complete"))
    complete = outputs(tmp_path / "complete")
    for i, after in enumerate(moments(duration, 1)):
        out = tmp_path / f"killed{i}"
        killed(command("merge", *sources, "--out", out), after)
        found = outputs(out) if out.exists() else {}
        whole_or_absent(found, complete)
        assert "results.jsonl" not in found or "env.json" in found  # a results file never lacks its env.json
        if "results.jsonl" not in found:  # the same merge again completes it
            subprocess.run(command("merge", *sources, "--out", out), check=True, capture_output=True,
                           env=environment())
            assert outputs(out) == complete


@pytest.mark.slow
def test_report_killed_anywhere_leaves_each_file_whole_or_absent(tmp_path: Path) -> None:
    duration = full_run(command("report", RUN, "--out", tmp_path / "complete"))
    complete = outputs(tmp_path / "complete")
    assert {"report.html", "summary.md"} <= set(complete)
    for i, after in enumerate(moments(duration, 2)):
        out = tmp_path / f"killed{i}"
        killed(command("report", RUN, "--out", out), after)
        whole_or_absent(outputs(out) if out.exists() else {}, complete)


@pytest.mark.slow
def test_recommend_killed_anywhere_leaves_its_table_whole_or_absent(tmp_path: Path) -> None:
    run = ROOT / "reports" / "NVIDIA-H200-20261130-012712" / "run"
    json_out, md_out = tmp_path / "complete.json", tmp_path / "complete.md"
    duration = full_run(command("recommend", run, "--out", json_out, "--md", md_out))
    complete = {"table.json": json_out.read_bytes(), "table.md": md_out.read_bytes()}
    for i, after in enumerate(moments(duration, 3)):
        out = tmp_path / f"killed{i}"
        out.mkdir()
        killed(command("recommend", run, "--out", out / "table.json", "--md", out / "table.md"), after)
        found = outputs(out)
        whole_or_absent(found, complete)
        if "table.json" not in found:  # nothing half-written blocks the same command again
            subprocess.run(command("recommend", run, "--out", out / "table.json"), check=True, capture_output=True,
                           env=environment())
            assert (out / "table.json").read_bytes() == complete["table.json"]


@pytest.mark.slow
def test_history_add_killed_anywhere_leaves_the_run_held_whole_or_not_at_all(tmp_path: Path) -> None:
    runs = [ROOT / "reports" / "NVIDIA-H200-first-run" / "run", ROOT / "reports" / "cpu-AMD-EPYC-2core-long"]
    pairs = {load_records(r)[0].run_id: len({(x.case_id, x.backend) for x in load_records(r)}) for r in runs}
    duration = full_run(command("history", "add", *runs, "--db", tmp_path / "complete.sqlite"))
    for i, after in enumerate(moments(duration, 4)):
        db = tmp_path / f"killed{i}.sqlite"
        killed(command("history", "add", *runs, "--db", db), after)
        if not db.exists():
            continue
        with Store(db, create=False) as store:  # opens: no damage, the schema whole
            assert store.check()[1] in (0, *pairs.values(), sum(pairs.values()))
            for run in store.runs():
                assert len(store.records(run.run_id)) == pairs[run.run_id]
        subprocess.run(command("history", "add", *runs, "--db", db), check=True, capture_output=True, env=environment())
        with Store(db, create=False) as store:
            assert store.check() == (2, sum(pairs.values()))


@pytest.mark.parametrize("name", ["table.json"])
def test_a_name_taken_meanwhile_is_refused_not_overwritten(tmp_path: Path, name: str) -> None:
    from attnbench.core.errors import AttnbenchError
    from attnbench.report.dispatch_table import write_new

    (tmp_path / name).write_text("earlier")
    with pytest.raises(AttnbenchError, match="already exists"):
        write_new(tmp_path / name, "later")
    assert (tmp_path / name).read_text() == "earlier"
    assert [p.name for p in tmp_path.iterdir()] == [name]  # no temporary file left behind
