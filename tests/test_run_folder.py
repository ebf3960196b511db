"""The run folder (attnbench.records.folder): a new run's env.json, a resumed part's own entry, the facts each part
adds, a damaged env.json left alone; and no module but it writes env.json."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from attnbench.core.errors import AttnbenchError
from attnbench.records.folder import RunFolder

ROOT = Path(__file__).resolve().parent.parent


def written(folder: RunFolder) -> dict:
    return json.loads(folder.env_file.read_text(encoding="utf-8"))


def test_a_new_run_writes_its_env_and_notes_its_facts_at_the_top_level(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "run")
    folder.refuse_existing()
    folder.make()
    folder.write_env({"device": "cpu", "run_id": "abc"})
    folder.note(rounds={"rounds": 2})
    folder.note(pace_probe={"median_ms": 1.0})
    assert list(written(folder)) == ["device", "run_id", "rounds", "pace_probe"]
    assert folder.part is folder.env and not list(folder.directory.glob("*.tmp"))
    run = tmp_path / "run"
    assert (folder.results, folder.traces, folder.report) == (run / "results.jsonl", run / "traces",
                                                             run / "report.html")


def test_a_resumed_part_writes_to_its_own_entry(tmp_path: Path) -> None:
    here = {"device": "cpu", "device_name": "x", "libraries": {"torch": "2"}}
    RunFolder(tmp_path).write_env({**here, "suite_name": "s", "shard": None, "run_id": "abc"})
    folder = RunFolder.resume(tmp_path, here, "s", None, force=False)
    folder.add_part({"timestamp": "t", "measurements": 3})
    folder.note(actual={"measured": 3})
    env = written(folder)
    assert env["resumed"] == [{"timestamp": "t", "measurements": 3, "actual": {"measured": 3}}]
    assert "actual" not in env and folder.part is folder.env["resumed"][-1]
    assert RunFolder.load(tmp_path).part == env["resumed"][-1]


def test_a_resume_elsewhere_is_refused_and_a_damaged_env_is_not_loaded(tmp_path: Path) -> None:
    with pytest.raises(AttnbenchError, match="no env.json there"):
        RunFolder.resume(tmp_path, {}, "s", None, force=False)
    RunFolder(tmp_path).write_env({"device": "cpu", "suite_name": "s"})
    with pytest.raises(AttnbenchError, match="suite 's' there, 't' here"):
        RunFolder.resume(tmp_path, {"device": "cpu"}, "t", None, force=False)
    (tmp_path / "env.json").write_text("{not json")
    assert RunFolder.load(tmp_path) is None and RunFolder.load(tmp_path / "absent") is None


# Calls that write a file, and where each names the file it writes: its first argument, or the path it is called on.
FIRST_ARGUMENT = {"write_json_atomic", "write_text_atomic", "write_records_atomic", "open"}
RECEIVER = {"write_text", "write_bytes"}
EITHER = {"replace", "rename"}  # os.replace(src, dst), Path.replace(dst): the file is on either side


def names_env(node: ast.AST, aliases: set[str]) -> bool:
    """Whether an expression names env.json: ENV_FILE, a string holding "env.json", a folder's env_file, or a
    variable assigned from one of those."""
    return any(isinstance(n, ast.Name) and (n.id == "ENV_FILE" or n.id in aliases)
               or isinstance(n, ast.Attribute) and n.attr in ("ENV_FILE", "env_file")
               or isinstance(n, ast.Constant) and isinstance(n.value, str) and "env.json" in n.value
               for n in ast.walk(node))


def written_files(call: ast.Call) -> list[ast.AST]:
    """The expressions naming what `call` writes; none when it writes nothing (open to read, any other call)."""
    func = call.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    receiver = [func.value] if isinstance(func, ast.Attribute) else []
    if name == "open":
        mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
        writes = isinstance(mode, ast.Constant) and isinstance(mode.value, str) and any(c in mode.value for c in "wax+")
        return call.args[:1] if writes else []
    if name in FIRST_ARGUMENT:
        return call.args[:1]
    if name in RECEIVER:
        return receiver
    return [*receiver, *call.args] if name in EITHER else []


def env_writes(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, source) of each call that writes env.json: named in the call, or through a variable of the module
    assigned from an expression naming it."""
    aliases = {target.id for node in ast.walk(tree) if isinstance(node, ast.Assign) and names_env(node.value, set())
               for target in node.targets if isinstance(target, ast.Name)}
    return [(node.lineno, ast.unparse(node)) for node in ast.walk(tree) if isinstance(node, ast.Call)
            and any(names_env(path, aliases) for path in written_files(node))]


def test_the_scan_finds_each_way_of_writing_env_json_and_passes_reads_and_other_files() -> None:
    source = ('write_json_atomic(directory / ENV_FILE, env)\n'
              'path = directory / ENV_FILE\nwrite_json_atomic(path, env)\n'
              '(out / "env.json").write_text(text)\n'
              'f = open(folder.env_file, "w")\n'
              'os.replace(tmp, out / results.ENV_FILE)\n'
              'env = json.loads((d / ENV_FILE).read_text())\n'
              'f = open(d / ENV_FILE)\n'
              'write_records_atomic(out / RESULTS_FILE, rows)\n'
              'write_text_atomic(script, f"test -f {out}/env.json")\n')
    assert [line for line, _ in env_writes(ast.parse(source))] == [1, 3, 4, 5, 6]


def test_env_json_is_written_only_by_the_run_folder() -> None:
    owner = ROOT / "attnbench" / "records" / "folder.py"
    offenders = [f"{path.relative_to(ROOT)}:{line}: {text}"
                 for path in sorted((ROOT / "attnbench").rglob("*.py")) if path != owner
                 for line, text in env_writes(ast.parse(path.read_text(encoding="utf-8")))]
    assert not offenders, "write env.json through attnbench.records.folder.RunFolder:\n" + "\n".join(offenders)
    assert env_writes(ast.parse(owner.read_text(encoding="utf-8")))  # the scan sees the one writer's write
