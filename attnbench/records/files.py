"""Whole files written safely and JSON objects read back as one user error."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from attnbench.core.errors import AttnbenchError, ResultsError


def read_json_object(path: Path, label: str, missing: str, wrong: str) -> dict[str, Any]:
    """The JSON object in `path`; one user error, led by `label`, when missing, unreadable or not an object."""
    if not path.is_file():
        raise AttnbenchError(f"{label}: {missing}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise AttnbenchError(f"{label}: {path.name} cannot be read ({exc})") from None
    if not isinstance(data, dict):
        raise AttnbenchError(f"{label}: {wrong}")
    return data


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, default=str) + "\n")


def write_text_atomic(path: Path, text: str, errors: str = "strict", failure: str = "") -> None:
    """Write text under a temporary name, fsync it and rename it into place: a kill or a full disk leaves the file
    as it was. A failure is one ResultsError, `failure` its words after the path."""
    write_bytes_atomic(path, text.encode("utf-8", errors), failure)


def write_bytes_atomic(path: Path, data: bytes, failure: str = "") -> None:
    """`write_text_atomic` for bytes: the one place a file is replaced whole."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        words = failure or "it is left as it was"
        raise ResultsError(f"{path}: cannot be written ({exc.strerror}); {words}") from None


def count_lines(path: Path) -> int:
    with open(path, "rb") as file:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: file.read(1 << 20), b""))
