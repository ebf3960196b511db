"""Merging shard directories into one run: one results.jsonl, one env.json, refusing anything ambiguous."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnbench.core.errors import ResultsError
from attnbench.records.env import RunEnv, read_env
from attnbench.records.folder import RunFolder
from attnbench.records.results import Record, load_records


@dataclass(frozen=True)
class Merged:
    directory: Path
    records: int
    sources: int


def merge_runs(sources: list[Path], out: Path) -> Merged:
    """Combine the records of `sources` into `out`, writing nothing unless every check passes: refused are a key
    held by two sources (overlapping shards), mixed schema versions, and differently named devices."""
    if not sources:
        raise ResultsError("merge: name at least one run directory")
    folder = RunFolder(out)
    folder.refuse_existing()
    owners: dict[tuple, Path] = {}
    versions: dict[int, Path] = {}
    devices: dict[Any, Path] = {}
    merged: list[Record] = []
    envs: list[tuple[Path, RunEnv]] = []
    for source in sources:
        records = load_records(source)
        env = read_env(source)
        envs.append((source, env))
        names = {env.device_name} if env else {r.device_name for r in records}
        for name in names:
            devices.setdefault(name, source)
        for record in records:
            versions.setdefault(record.schema_version, source)
            key = record.key
            if key in owners:
                raise ResultsError(f"merge: {owners[key]} and {source} both hold {record.backend} on "
                                   f"{record.case_id or key}; the shards overlap")
            owners[key] = source
        merged.extend(records)
    if not merged:
        raise ResultsError(f"merge: {', '.join(map(str, sources))} hold no records; nothing to merge")
    if len(versions) > 1:
        listed = ", ".join(f"{v} ({p})" for v, p in sorted(versions.items()))
        raise ResultsError(f"merge: mixed schema versions {listed}; merge runs of one attnbench version")
    if len(devices) > 1:
        listed = ", ".join(f"{name!r} ({p})" for name, p in devices.items())
        raise ResultsError(f"merge: runs on different devices: {listed}; their numbers do not belong in one report")
    try:
        folder.make()
        env = dict(envs[0][1].raw)
        env["merged_from"] = [{"directory": str(p), "run_id": e.run_id, "shard": e.shard,
                               "roofs": e.roofs} for p, e in envs]  # each shard's, its records' roofs
        # env.json first, each renamed into place whole: a results file is there only with its env.json, and a
        # killed merge leaves a directory the same merge may fill again.
        folder.write_env(env)
        folder.write_records(merged)
    except OSError as exc:
        raise ResultsError(f"{out}: cannot write the merged run ({exc.strerror})") from None
    return Merged(out, len(merged), len(sources))

