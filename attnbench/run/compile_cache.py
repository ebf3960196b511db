"""Where torch.compile keeps what it compiled between runs, a directory the user can see and clear: inductor's cache,
FlashInfer's JIT workspace (FLASHINFER_WORKSPACE_BASE, read at its import: flashinfer/jit/env.py), `compiled.json`
(the graphs compiled there per torch version, for the forecast) and `calibration.json`."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

from attnbench.core.errors import AttnbenchError, ResultsError
from attnbench.records.files import write_text_atomic

INDUCTOR_ENV = "TORCHINDUCTOR_CACHE_DIR"
FLASHINFER_ENV = "FLASHINFER_WORKSPACE_BASE"
LEDGER = "compiled.json"


def default_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "attnbench"


def use(directory: Path | None) -> Path:
    """Make `directory` (default: default_dir()) the compile cache of this process and every worker it starts; a
    FLASHINFER_WORKSPACE_BASE the user set is kept unless --cache-dir is given."""
    chosen = Path(directory) if directory is not None else default_dir()
    try:
        (chosen / "inductor").mkdir(parents=True, exist_ok=True)
        (chosen / "flashinfer").mkdir(exist_ok=True)
    except OSError as exc:
        raise AttnbenchError(f"--cache-dir {chosen}: cannot be created ({exc.strerror})") from None
    os.environ[INDUCTOR_ENV] = str((chosen / "inductor").resolve())
    if directory is not None or FLASHINFER_ENV not in os.environ:
        os.environ[FLASHINFER_ENV] = str((chosen / "flashinfer").resolve())
    return chosen


def compiled(directory: Path | None, torch_version: str) -> set[str]:
    """The compile keys (Backend.compile_key) already compiled into `directory` by this torch."""
    if directory is None:
        return set()
    try:
        data = json.loads((directory / LEDGER).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return set()
    return set(data.get(torch_version, [])) if isinstance(data, dict) else set()


def note_compiled(directory: Path | None, torch_version: str, keys: Iterable[str]) -> None:
    """Add `keys` to the ledger; a read-only cache only costs a less accurate forecast."""
    if directory is None:
        return
    new = set(keys)
    if not new:
        return
    path = directory / LEDGER
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, json.JSONDecodeError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    data[torch_version] = sorted(set(data.get(torch_version, [])) | new)
    with contextlib.suppress(ResultsError):  # a cache that cannot be written only costs the next run a compile
        write_text_atomic(path, json.dumps(data, indent=1))
