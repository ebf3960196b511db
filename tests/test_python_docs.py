"""docs/python.md's snippets run as written, in order, in one namespace (what a notebook would do)."""
from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

PAGE = Path(__file__).parent.parent / "docs" / "python.md"


def blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", PAGE.read_text(encoding="utf-8"), flags=re.S | re.M)


@pytest.mark.slow
def test_every_python_snippet_on_the_page_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the page's mkdtemp() lands in the test's folder
    found = blocks()
    assert len(found) == 3, "docs/python.md should hold its three snippets (run, load, choose)"
    namespace: dict[str, object] = {}
    for i, code in enumerate(found, start=1):
        exec(compile(code, f"docs/python.md block {i}", "exec"), namespace)  # noqa: S102
    assert len(namespace["df"]) > 0
