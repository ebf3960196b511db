"""What two runs' env.json say differs: the machine and the software. compare and compare --against history say it
first."""

from __future__ import annotations

from typing import Any

# What env.json says of the machine: two runs that differ here are not one machine's numbers.
MACHINE_KEYS = ("device", "device_name", "cpu", "cpu_count")
# Software and its settings (kernel libraries' versions come from `libraries`): a difference is judged raw.
SOFTWARE_KEYS = ("attnbench", "git_commit", "python", "torch", "torch_threads", "cuda", "cudnn", "driver")


def env_differences(base_env: dict[str, Any], new_env: dict[str, Any], keys: tuple[str, ...],
                    libraries: bool = False) -> list[str]:
    """'key: A vs B' for each of `keys` (and, with `libraries`, each kernel library's version) that both runs'
    env.json state and disagree on; a fact one side does not state is unknown, never a difference."""
    found = [f"{key}: {base_env.get(key)} vs {new_env.get(key)}" for key in keys
             if base_env.get(key) is not None and new_env.get(key) is not None and base_env[key] != new_env[key]]
    base_libs, new_libs = base_env.get("libraries"), new_env.get("libraries")
    if libraries and isinstance(base_libs, dict) and isinstance(new_libs, dict):
        found += [f"{name}: {base_libs.get(name)} vs {new_libs.get(name)}"
                  for name in sorted(set(base_libs) | set(new_libs))
                  if name not in keys and base_libs.get(name) != new_libs.get(name)]
    return found


def machine_differences(base_env: dict[str, Any], new_env: dict[str, Any]) -> list[str]:
    """Where two runs' machines differ."""
    return env_differences(base_env, new_env, MACHINE_KEYS)


def software_differences(base_env: dict[str, Any], new_env: dict[str, Any]) -> list[str]:
    """Where two runs' software and its settings differ."""
    return env_differences(base_env, new_env, SOFTWARE_KEYS, libraries=True)
