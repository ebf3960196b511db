"""The JSONL store records are appended to, and the loaders that read it back."""

from __future__ import annotations

import dataclasses
import functools
import gzip
import json
import os
import sys
import types
import typing
import zlib
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from attnbench.core.errors import ResultsError
from attnbench.records.carries import rule_problem
from attnbench.records.files import (  # noqa: F401 - re-exported
    count_lines,
    read_json_object,
    write_json_atomic,
    write_text_atomic,
)
from attnbench.records.record import (  # noqa: F401 - re-exported
    DRAWN_FIELDS,
    KEY_FIELDS,
    SCHEMA_VERSION,
    SIZE_FIELDS,
    STATUSES,
    WORKLOAD_DEFAULTS,
    Record,
    Status,
    apart,
    key_of,
    upgrade,
)

if TYPE_CHECKING:
    import pandas as pd

RESULTS_FILE = "results.jsonl"
# A committed run's results, gzip-compressed: read wherever results.jsonl is absent, never written or resumed
# (docs/results.md "Compressed runs").
COMPRESSED_RESULTS_FILE = RESULTS_FILE + ".gz"
ENV_FILE = "env.json"


class ResultsWriter:
    """Appends records to results.jsonl, each fsynced; a record the disk has no room for is cut back off."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)  # unbuffered

    def append(self, record: Record) -> None:
        problem = rule_problem(record)
        if problem:
            raise ResultsError(f"{self.path}: not written, the record of {record.backend} on {record.case_id}: "
                               f"{problem}")
        data = record_line(record.to_dict()).encode("utf-8")
        size = os.fstat(self._fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
            os.fsync(self._fd)
        except OSError as exc:
            os.ftruncate(self._fd, size)  # never half a record
            raise ResultsError(f"{self.path}: cannot write a record ({exc.strerror}); the {count_lines(self.path)} "
                               f"records before it are kept; make room and continue with --resume "
                               f"{self.path.parent}") from None

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def record_line(record: dict[str, Any]) -> str:
    return json.dumps(record, allow_nan=False) + "\n"


def refuse_existing(directory: Path, hint: str = "") -> None:
    """Refuse a directory holding a results file: earlier results are never written over."""
    held = stored_results(directory)
    if held is not None:
        raise ResultsError(f"{directory}: already holds {held.name}; choose another --out so earlier "
                           f"results are kept{hint}")


def write_records_atomic(path: Path, records: list[dict[str, Any]]) -> None:
    write_text_atomic(path, "".join(record_line(record) for record in records))


def replace_records(path: Path, records: list[Record]) -> None:
    """Rewrite the results file atomically with `records` in place of the last line of each measurement."""
    updated = {key_of(data): record_line(data) for data in (r.to_dict() for r in records)}
    lines = path.read_text(encoding="utf-8", errors="surrogateescape").splitlines(keepends=True)
    last: dict[tuple, int] = {}  # a key's last line is this run's
    for i, line in enumerate(lines):
        try:
            key = key_of(json.loads(line))
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
        if key in updated:
            last[key] = i
    for key, i in last.items():
        lines[i] = updated[key]
    write_text_atomic(path, "".join(lines), errors="surrogateescape",
                      failure="it holds the records of the last round written, each whole (not the later rounds' "
                              "samples)")


def stored_results(directory: Path) -> Path | None:
    """The results file a run directory holds: results.jsonl where there is one (a live run writes it), else a
    committed run's results.jsonl.gz; None when neither."""
    for name in (RESULTS_FILE, COMPRESSED_RESULTS_FILE):
        if (Path(directory) / name).is_file():
            return Path(directory) / name
    return None


def is_compressed(path: Path) -> bool:
    """Whether a results file is gzip-compressed (read-only evidence), by its name."""
    return Path(path).name.endswith(".gz")


def results_path(path: Path) -> Path:
    """The results file of a run directory (stored_results), or `path` itself when it names a file."""
    path = Path(path)
    if path.is_dir():
        path = stored_results(path) or path / RESULTS_FILE
    if not path.is_file():
        raise ResultsError(f"{path}: no attnbench results here (expected a directory holding {RESULTS_FILE} or "
                           f"{COMPRESSED_RESULTS_FILE}, or the file)")
    return path


def open_results(path: Path) -> IO[bytes]:
    """A results file's lines as bytes, uncompressed where it is gzip."""
    return gzip.open(path, "rb") if is_compressed(path) else open(path, "rb")


def stored_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON object of each line of a run's results file as stored (no check, no upgrade): for scripts and tests
    that read a file's own words."""
    file = results_path(path)
    with open_results(file) as lines:
        return [json.loads(line) for line in lines if line.strip()]


def load_records(path: Path, writing: bool = False) -> list[Record]:
    """Every record of a results file or directory; a bad line is skipped and counted on stderr, a file without one
    record refused, and so is one breaking its status's rule (carries.py). `writing`: an unfinished last line is
    left out quietly."""
    file = results_path(path)
    records: list[dict[str, Any]] = []
    numbers: list[int] = []
    bad: list[tuple[int, str]] = []
    try:
        with open_results(file) as lines:
            for number, raw in enumerate(lines, start=1):
                if not raw.strip():
                    continue
                record = parse_line(raw)
                if isinstance(record, str):
                    if not (writing and not raw.endswith(b"\n")):
                        bad.append((number, record))
                else:
                    records.append(record)
                    numbers.append(number)
    except (OSError, EOFError, zlib.error) as exc:  # gzip's: not gzip, cut short, corrupt
        raise ResultsError(f"{file}: cannot be read ({exc or type(exc).__name__})") from None
    if bad and not records:
        more = f" (and {len(bad) - 1} more bad line(s))" if len(bad) > 1 else ""
        raise ResultsError(f"{file}:{bad[0][0]}: {bad[0][1]}{more}; no line of it is an attnbench record")
    if bad:
        print(skipped_line(file, bad), file=sys.stderr, flush=True)
    read = upgrade(records)
    for number, record in zip(numbers, read, strict=True):
        problem = rule_problem(record)
        if problem:
            raise ResultsError(f"{file}:{number}: {problem}")
    return read


def skipped_line(file: Path, bad: list[tuple[int, str]], shown: int = 10) -> str:
    numbers = ", ".join(str(number) for number, _ in bad[:shown])
    rest = f" and {len(bad) - shown} more" if len(bad) > shown else ""
    return (f"skipped {len(bad)} bad line(s) of {file} (line{'s' if len(bad) > 1 else ''} {numbers}{rest}): "
            f"{bad[0][1]}")


def parse_record(raw: bytes) -> Record | str:
    line = parse_line(raw)
    return line if isinstance(line, str) else upgrade([line])[0]


def parse_line(raw: bytes) -> dict[str, Any] | str:
    """One line of results.jsonl as a record's checked JSON object, or why it is not one."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 text (byte {exc.start})"
    try:
        record = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        cut = text.lstrip().startswith("{") and not text.rstrip().endswith("}")
        return "a record cut off mid-write" if cut else f"not a JSON record ({exc.msg})"
    except (ValueError, RecursionError) as exc:  # NaN or Infinity, or nesting past Python's stack
        return f"not a JSON record ({exc})"
    if not isinstance(record, dict) or "schema_version" not in record or "backend" not in record:
        return "not an attnbench record (no schema_version/backend)"
    version = record["schema_version"]
    if not _is_int(version) or version < 0:
        return f"schema_version {version!r} is not a version number"
    if version > SCHEMA_VERSION:
        return (f"schema_version {version} is newer than this attnbench understands ({SCHEMA_VERSION}); "
                "upgrade attnbench")
    return field_problem(record) or record


def field_problem(record: dict[str, Any]) -> str | None:
    for name, (kind, required) in _record_fields().items():
        if name not in record:
            if required:
                return f"field {name} is missing"
        elif not _is_of(record[name], kind):
            return f"field {name}: {json.dumps(record[name])[:40]} is not {_type_words(kind)}"
    unknown = sorted(set(record) - set(_record_fields()))
    if unknown:  # another writer's line
        return f"field {unknown[0][:40]} is not a field of a record"
    for name in SIZE_FIELDS:
        if record[name] < 1:
            return f"field {name}: {record[name]} is not a size (1 or more)"
    if record["status"] not in STATUSES:
        return f"status {record['status']!r} is not one of {', '.join(STATUSES)}"
    if record["status"] != "ok" and not record.get("reason"):
        return f"status {record['status']} without a reason"
    return None


@functools.cache
def _record_fields() -> dict[str, tuple[Any, bool]]:
    hints = typing.get_type_hints(Record)
    return {f.name: (hints[f.name], f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
            for f in dataclasses.fields(Record)}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_of(value: Any, kind: Any) -> bool:
    """Whether a JSON value fits a Record field's type (an optional count may be a float)."""
    args = typing.get_args(kind)
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return any(_is_of(value, arg) if arg is not int else _is_of(value, float) for arg in args)
    if kind is type(None):
        return value is None
    if kind is Status:  # any word: field_problem names one that is not a status
        return isinstance(value, str)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return _is_int(value)
    if typing.get_origin(kind) is list:
        return isinstance(value, list) and all(_is_of(item, args[0]) for item in value)
    if typing.get_origin(kind) is dict:
        return isinstance(value, dict)
    return kind is Any or isinstance(value, kind)


def _type_words(kind: Any) -> str:
    return str(kind).replace("typing.", "").replace("<class '", "").replace("'>", "")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def load_results(path: Path) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame.from_records([r.to_dict() for r in load_records(path)])
