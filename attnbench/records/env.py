"""A run's env.json, typed: its one loader (read_env, RunEnv.from_dict: upgrades go there)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from attnbench.core.errors import ResultsError
from attnbench.records.files import read_json_object
from attnbench.records.results import ENV_FILE, results_path

# The env.json fields read and their JSON types (each may be null).
ENV_TYPES: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(("run_id", "timestamp", "device", "device_name", "suite_name", "suite_file", "suite_text",
                     "git_commit", "torch", "cuda", "driver", "cpu", "platform", "python", "attnbench", "timer",
                     "shard"), (str,)),
    "cudnn": (int, str), "peak_tflops": (int, float), "peak_bandwidth_gbs": (int, float),
    **dict.fromkeys(("libraries", "prediction", "actual"), (dict,)),
    **dict.fromkeys(("gpus", "gpu_state", "merged_from", "resumed", "plugins"), (list,)),
}
# env.json's top-level versions; the other libraries come from its `libraries`.
VERSION_KEYS = ("torch", "cuda", "cudnn", "driver")
# Two runs that differ here are not one machine's numbers.
MACHINE_KEYS = ("device", "device_name", "cpu", "cpu_count")
# Software and its settings (and `libraries`): a difference is judged raw.
SOFTWARE_KEYS = ("attnbench", "git_commit", "python", "torch", "torch_threads", "cuda", "cudnn", "driver")


@dataclass(frozen=True)
class RunEnv:
    """None where env.json states nothing; `raw`, the object as stored."""

    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    run_id: str | None = None
    timestamp: str | None = None
    device: str | None = None
    device_name: str | None = None
    suite_name: str | None = None
    suite_file: str | None = None
    git_commit: str | None = None
    attnbench: str | None = None
    python: str | None = None
    platform: str | None = None
    torch: str | None = None
    torch_threads: int | None = None
    cuda: str | None = None
    cudnn: int | str | None = None
    driver: str | None = None
    cpu: str | None = None
    cpu_count: int | None = None
    shard: str | None = None
    libraries: dict[str, str | None] | None = None
    gpus: list[dict[str, Any]] | None = None
    gpu_state: list[dict[str, Any]] | None = None
    roofs: dict[str, Any] | None = None
    peak_tflops: float | None = None
    peak_bandwidth_gbs: float | None = None
    pace_probe: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RunEnv:
        return cls(raw, **{f.name: raw.get(f.name) for f in fields(cls) if f.name != "raw"})

    def __bool__(self) -> bool:
        return bool(self.raw)

    def stated(self, key: str) -> Any:
        return getattr(self, key)

    def versions(self) -> dict[str, Any]:
        """torch, CUDA, cuDNN, the driver, then every library installed."""
        versions = {key: self.stated(key) for key in VERSION_KEYS if self.stated(key) is not None}
        for name, version in sorted((self.libraries or {}).items()):
            if version is not None and name not in versions:
                versions[name] = version
        return versions

    def software(self) -> dict[str, Any]:
        """What a run's timings depend on besides the machine."""
        return {"attnbench": self.attnbench, **self.versions()} if self.attnbench else self.versions()


def read_env(path: Path) -> RunEnv:
    """The env.json beside a results file; empty when there is none."""
    env_file = results_path(path).parent / ENV_FILE
    if not env_file.is_file():
        return RunEnv()
    return load_env(env_file, str(env_file), "missing", "not an attnbench environment record (not a JSON object)")


def load_env(env_file: Path, label: str, missing: str, wrong: str) -> RunEnv:
    """One user error, led by `label`, when missing, unreadable or mistyped."""
    env = read_json_object(env_file, label, missing, wrong)
    for name, kind in ENV_TYPES.items():
        value = env.get(name)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool) and bool not in kind
                                  or name == "libraries" and not all(isinstance(v, (str, type(None)))
                                                                     for v in value.values())):
            raise ResultsError(f"{label}: field {name}: {json.dumps(value, default=str)[:40]} is not "
                               f"{' or '.join(k.__name__ for k in kind)}; not an attnbench environment record")
    return RunEnv.from_dict(env)


def env_differences(base: RunEnv, new: RunEnv, keys: tuple[str, ...], libraries: bool = False) -> list[str]:
    """'key: A vs B' for each of `keys` (and with `libraries` each library) both runs state and disagree on."""
    found = [f"{key}: {base.stated(key)} vs {new.stated(key)}" for key in keys
             if base.stated(key) is not None and new.stated(key) is not None and base.stated(key) != new.stated(key)]
    base_libs, new_libs = base.libraries, new.libraries
    if libraries and isinstance(base_libs, dict) and isinstance(new_libs, dict):
        found += [f"{name}: {base_libs.get(name)} vs {new_libs.get(name)}"
                  for name in sorted(set(base_libs) | set(new_libs))
                  if name not in keys and base_libs.get(name) != new_libs.get(name)]
    return found


def machine_differences(base: RunEnv, new: RunEnv) -> list[str]:
    """Where two runs' machines differ."""
    return env_differences(base, new, MACHINE_KEYS)


def software_differences(base: RunEnv, new: RunEnv) -> list[str]:
    """Where two runs' software and its settings differ."""
    return env_differences(base, new, SOFTWARE_KEYS, libraries=True)
