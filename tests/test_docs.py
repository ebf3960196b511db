"""The manual under docs/ and the README that points to it: the generated CLI page matches the CLI, the README
stays one screen, and its links land on files that exist. (`mkdocs build --strict`, in `make test`, checks the
links between the pages.)"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_LIMIT_BYTES = 5_000
LONGEST_LINE = 200


def load_cli_reference():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "scripts" / "cli_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_what_the_cli_prints_now() -> None:
    reference = load_cli_reference()
    assert reference.PAGE.read_text(encoding="utf-8") == reference.render(), (
        f"docs/cli.md is stale: a command's options or help changed. Regenerate it with "
        f"`{reference.REGENERATE}` (from the repository root, in the project's environment) and commit it.")


def test_cli_reference_has_every_command_and_no_terminal_escapes() -> None:
    reference = load_cli_reference()
    text = reference.render()
    assert "\x1b" not in text and "╭" not in text  # plain text: no colours, no Rich panels
    names = reference.command_names()
    assert {"run", "report", "compare", "submit", "status", "merge", "doctor"} <= set(names)
    for name in names:
        assert f"$ attnbench {name} --help\nUsage: attnbench {name} " in text
    assert reference.render() == text  # deterministic: the same twice, whatever the terminal


@pytest.mark.slow
def test_check_mode_fails_on_a_stale_page_and_names_the_command(tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    reference = load_cli_reference()
    stale = tmp_path / "cli.md"
    stale.write_text(reference.render().replace("--dry-run", "--dryrun"), encoding="utf-8")
    monkeypatch.setattr(reference, "PAGE", stale)
    monkeypatch.setattr(reference, "ROOT", tmp_path)
    assert reference.main(["--check"]) == 1
    assert "python scripts/cli_reference.py" in capsys.readouterr().err
    assert reference.main([]) == 0 and reference.main(["--check"]) == 0


def test_readme_is_one_screen_of_short_lines() -> None:
    data = README.read_bytes()
    assert len(data) <= README_LIMIT_BYTES, (
        f"README.md is {len(data)} bytes, over {README_LIMIT_BYTES}: move the detail into a page under docs/")
    long_lines = [n for n, line in enumerate(data.decode("utf-8").splitlines(), 1) if len(line) > LONGEST_LINE]
    assert long_lines == [], f"README.md lines over {LONGEST_LINE} characters: {long_lines}"


def test_readme_links_land_on_files_that_exist() -> None:
    text = README.read_text(encoding="utf-8")
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text)]
    local = [t for t in targets if t and not re.match(r"[a-z]+:", t)]
    assert any(t.startswith("docs/") for t in local), "the README should point to the manual"
    assert [t for t in local if not (ROOT / t).exists()] == []


def test_every_file_of_a_committed_run_the_manual_names_is_in_the_tree() -> None:
    """A path the manual or the README names inside a committed run's folder under reports/ (the records a figure
    comes from, a log, a calibration) is there; a pattern (`<suite>`, `*`, `…`, `$VAR`) names no one file."""
    runs = {p.name for p in (ROOT / "reports").iterdir() if p.is_dir()}
    missing = []
    for page in [README, *sorted((ROOT / "docs").rglob("*.md"))]:
        for cited in re.findall(r"reports/[\w.*<>…$/-]+", page.read_text(encoding="utf-8")):
            path = cited.rstrip(".,;:")
            if re.fullmatch(r"reports/[\w./-]+", path) and path.split("/")[1] in runs and not (ROOT / path).exists():
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert missing == [], "not in the tree (reports/README.md says what a committed run keeps)"


def test_every_page_is_in_the_manuals_navigation() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    listed = set(re.findall(r":\s*([\w./-]+\.md)\s*$", config, flags=re.MULTILINE))
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert pages - listed == set(), "pages missing from mkdocs.yml's nav"
    assert listed - pages == set(), "mkdocs.yml's nav lists pages that do not exist"
