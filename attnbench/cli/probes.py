"""What `list` and `doctor` ask each built-in backend and torch, kept per installation so they answer without
importing every kernel library again (seconds on a small machine). The answers sit in `<cache
dir>/probes.json` under a fingerprint of what they depend on: attnbench's backend sources, the interpreter,
the directories on `sys.path` (but the first) and `PATH`, the environment variables the libraries read, and
the usable CPUs; a change or `--fresh` asks again. Only the CPU's answers are kept; a run never reads this
file. """

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attnbench.backends.base import Backend

FILE = "probes.json"
_ENV_NAMES = ("PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CC", "CXX", "PYTHONPATH",
              "OMP_NUM_THREADS", "MKL_NUM_THREADS")  # the last two set torch's threads
_ENV_PREFIXES = ("XFORMERS", "JAX_", "XLA_", "ORT_", "OV_", "TORCH", "ONNX")


def fingerprint(device: str) -> str:
    """A digest of everything a built-in backend's answer on `device` depends on
    (see the module's docstring)."""
    import attnbench
    import attnbench.backends as package

    def stamp(path: str) -> str:
        try:
            st = os.stat(path)
        except OSError:
            return f"{path}:-"
        return f"{path}:{st.st_mtime_ns}:{st.st_size}"

    sources = sorted(Path(package.__path__[0]).glob("*.py"))
    parts = [attnbench.__version__, device, os.path.realpath(sys.executable), sys.version,
             *map(stamp, map(str, sources)), *map(stamp, sys.path[1:]),
             *map(stamp, os.environ.get("PATH", "").split(os.pathsep))]
    parts += sorted(f"{k}={v}" for k, v in os.environ.items() if k in _ENV_NAMES
                    or k.startswith(_ENV_PREFIXES))
    if hasattr(os, "sched_getaffinity"):
        parts.append(f"cpus={len(os.sched_getaffinity(0))}")
    else:
        parts.append(f"cpus={os.cpu_count()}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


class Probes:
    """Each built-in backend's availability on `device` and its conformance, from the store when its
    fingerprint still holds, else asked now (and stored by `save`). A plugin's backend is always asked."""

    def __init__(self, device: str, cache_dir: Path | None = None, fresh: bool = False) -> None:
        self.device = device
        self.path = cache_dir / FILE if cache_dir is not None and device == "cpu" else None
        self._print = fingerprint(device) if self.path is not None else ""
        stored = {} if fresh or self.path is None else _read(self.path)
        keep = stored.get("fingerprint") == self._print
        self.answers: dict[str, dict[str, Any]] = stored.get("backends", {}) if keep else {}
        self.torch: dict[str, Any] | None = stored.get("torch") if keep else None
        self.asked_at: str | None = stored.get("asked_at") if keep else None
        self.reused = False  # whether any answer came from the store
        self._changed = False
        self._builtin: set[str] | None = None

    def builtin(self, backend: Backend) -> bool:
        """Whether `backend` is one of attnbench's own (a module the registry discovers), whose source the
        fingerprint covers; a plugin's, or a test backend's (attnbench.backends.testing, told how to fail), is
        not."""
        if self._builtin is None:
            from attnbench.backends.registry import builtin_modules

            self._builtin = set(builtin_modules())
        return type(backend).__module__ in self._builtin

    def _entry(self, backend: Backend, key: str, ask: Any) -> Any:
        builtin = self.builtin(backend)
        entry = self.answers.setdefault(backend.name, {}) if builtin else {}
        if key in entry:
            self.reused = True
            return entry[key]
        entry[key] = ask()
        self._changed = self._changed or builtin
        return entry[key]

    def availability(self, backend: Backend) -> str | None:
        """Why `backend` cannot run on the device (Backend.availability); None when it can."""
        return self._entry(backend, "availability", lambda: backend.availability(self.device))

    def conformance(self, backend: Backend) -> dict[str, Any]:
        """attnbench.backends.conformance's verdict on `backend`'s calls, as Conformance.to_dict()."""
        from attnbench.backends.conformance import check_backend

        return self._entry(backend, "conformance", lambda: check_backend(backend).to_dict())

    def torch_facts(self) -> dict[str, Any]:
        """attnbench.run.env.torch_facts(): what the environment takes from torch, which costs its import."""
        if self.torch is not None:
            self.reused = True
            return self.torch
        from attnbench.run.env import torch_facts

        self.torch = torch_facts()
        self._changed = self._changed or self.path is not None
        return self.torch

    def first_call(self) -> str | None:
        """The line that says every answer is about to be asked (seconds of imports) and kept; None when some
        are stored, or when none would be (a GPU's)."""
        if self.answers or self.path is None:
            return None
        return ("asking every backend's library once (imports: seconds); the answers "
                "are kept for the next call")

    def note(self) -> str | None:
        """The line that says some answers were reused, and how to ask again; None when all were asked now."""
        if not self.reused:
            return None
        return (f"backend probes: reused from {self.asked_at} for this installation ({self.path}); "
                "--fresh asks again")

    def save(self) -> None:
        """Store the answers (atomically: a reader never sees half a file;
        of two writers the last one stays)."""
        if self.path is None or not self._changed:
            return
        if self.asked_at is None:
            self.asked_at = time.strftime("%Y-%m-%d %H:%M:%S")
        data = {"fingerprint": self._print, "asked_at": self.asked_at, "backends": self.answers,
                "torch": self.torch}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".probes-")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f)
            os.replace(tmp, self.path)
        except OSError:  # a read-only cache only costs the next invocation the imports
            return


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
