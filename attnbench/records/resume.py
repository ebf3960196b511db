"""Resuming a run: the measurements a results directory holds, and whether it may be continued here."""

from __future__ import annotations

import os
from pathlib import Path

from attnbench.core.errors import AttnbenchError
from attnbench.records.env import RunEnv, load_env
from attnbench.records.results import ENV_FILE, is_compressed, load_records, stored_results

# Libraries whose version changes the numbers.
PINNED_LIBRARIES = ("torch", "flash-attn", "xformers", "triton")


def read_run_env(directory: Path) -> RunEnv:
    return load_env(directory / ENV_FILE, f"--resume {directory}",
                    f"no {ENV_FILE} there; not an attnbench run directory",
                    f"{ENV_FILE} is not an attnbench environment record")


def refuse_compressed(directory: Path) -> None:
    """A run whose results are compressed is committed evidence: read, never continued."""
    held = stored_results(directory)
    if held is not None and is_compressed(held):
        raise AttnbenchError(f"--resume {directory}: its results are compressed ({held.name}), a committed run kept "
                             f"read-only; to continue it, decompress them beside it first (gunzip -k {held})")


def env_differences(recorded: RunEnv, here: RunEnv) -> list[str]:
    """What differs, among what changes the numbers, between the run's machine and this one."""
    diffs = []
    for name in ("device", "device_name"):
        if recorded.stated(name) != here.stated(name):
            diffs.append(f"{name} {recorded.stated(name)!r} there, {here.stated(name)!r} here")
    old, new = recorded.libraries or {}, here.libraries or {}
    for library in PINNED_LIBRARIES:
        if old.get(library) != new.get(library):
            diffs.append(f"{library} {old.get(library) or 'absent'} there, {new.get(library) or 'absent'} here")
    return diffs


def check_compatible(directory: Path, recorded: RunEnv, here: RunEnv, suite_name: str, shard: str | None,
                     force: bool) -> None:
    """Refuse measurements from another machine, library set, suite or shard in one run (unless forced)."""
    if recorded.shard != shard:
        was = f"shard {recorded.shard}" if recorded.shard else "not sharded"
        asked = f"--shard {shard}" if shard else "no --shard"
        raise AttnbenchError(f"--resume {directory}: that run was {was}, this one has {asked}; "
                             f"resume with the run's own --shard")
    if force:
        return
    diffs = env_differences(recorded, here)
    if recorded.suite_name not in (None, suite_name):
        diffs.insert(0, f"suite {recorded.suite_name!r} there, {suite_name!r} here")
    if diffs:
        raise AttnbenchError(f"--resume {directory}: the run was recorded elsewhere ({'; '.join(diffs)}); "
                             f"its numbers would not be comparable. Add --force to resume anyway")


def done_keys(directory: Path, writing: bool = False) -> set[tuple]:
    """Keys of the measurements already recorded in `directory`."""
    if stored_results(directory) is None:
        return set()
    return {record.key for record in load_records(directory, writing)}


def drop_cut_line(path: Path) -> bool:
    """Remove a last line cut off by a crash."""
    if not path.is_file():
        return False
    with open(path, "rb+") as file:
        file.seek(0, os.SEEK_END)
        size = file.tell()
        if size == 0:
            return False
        file.seek(-1, os.SEEK_END)
        if file.read(1) == b"\n":
            return False
        data = path.read_bytes()
        file.truncate(data.rfind(b"\n") + 1)
        return True
