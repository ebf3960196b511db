"""Render every committed run's summary, report text, comparisons, recommendations, A/Bs and history into a folder,
and diff it against another such folder, paths aside: a refactoring must leave every output unchanged.

    python scripts/same_outputs.py OUT_DIR [--against BASELINE_DIR]

The HTML report is rendered without drawing its charts (each chart's name and title stay; its PNG is empty).
Exit 0 when --against finds no difference, 1 otherwise."""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402

REPORTS = Path("reports")  # relative, from ROOT: two checkouts name their runs alike
VERDICTS = REPORTS / "cpu-AMD-EPYC-2core-verdicts"


def text_of(renderable: object) -> str:
    console = Console(width=240, record=True, file=open(os.devnull, "w"), color_system=None)  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


def runs() -> list[Path]:
    return sorted(path.parent for path in REPORTS.rglob("results.jsonl.gz"))


def name_of(run: Path) -> str:
    return str(run.relative_to(REPORTS)).replace("/", "__")


def render_all(out: Path) -> None:
    import attnbench.report.render as render
    from attnbench.core.errors import AttnbenchError
    from attnbench.records.results import load_records
    from attnbench.report.ab_text import result_dict, to_html, to_markdown
    from attnbench.report.compare_table import comparison_markdown, comparison_table, machine_warning
    from attnbench.stats.ab import pair_up
    from attnbench.stats.compare import compare_runs

    render._pngs = lambda tasks: [b"" for _ in tasks]
    for run in runs():
        render.render_report(run, out / "report" / name_of(run), ["md", "html"])
    for batch in ("compare-1", "compare-2", "compare-3"):
        for md in sorted((VERDICTS / batch / "compare").glob("*-vs-*.md")):
            base, new = md.stem.split("-vs-")
            result = compare_runs(VERDICTS / batch / base, VERDICTS / batch / new, 0.10, relative=True)
            (out / "compare").mkdir(parents=True, exist_ok=True)
            (out / "compare" / f"{batch}__{md.stem}.md").write_text(comparison_markdown(result))
            (out / "compare" / f"{batch}__{md.stem}.txt").write_text(
                f"exit {result.exit_code}\n{machine_warning(result)}\n" + text_of(comparison_table(result)))
    for pair in (("cpu-Intel-Xeon-2core-quick", "ab-quick-torch/a"), ("ab-quick-torch/a", "ab-quick-torch/b"),
                 ("cpu-Intel-Xeon-2core-quick", "cpu-AMD-EPYC-2core-verdicts/compare-3/I0"),
                 ("NVIDIA-H200-20261204-fijit/cold", "NVIDIA-H200-20261204-fijit/warm")):
        try:
            result = compare_runs(REPORTS / pair[0], REPORTS / pair[1], 0.10, relative=True)
            text = (f"exit {result.exit_code}\n{machine_warning(result)}\n" + comparison_markdown(result)
                    + text_of(comparison_table(result)))
        except AttnbenchError as error:
            text = f"error: {error}\n"
        (out / "compare" / f"{name_of(REPORTS / pair[0])}-vs-{name_of(REPORTS / pair[1])}.txt").write_text(text)
    recommend_all(out)
    for ab in sorted(REPORTS.glob("ab-*")):
        result = pair_up(load_records(ab / "a"), load_records(ab / "b"),
                         json.loads((ab / "ab.json").read_text())["result"]["threshold"])
        (out / "ab").mkdir(parents=True, exist_ok=True)
        (out / "ab" / f"{ab.name}.json").write_text(json.dumps(result_dict(result), indent=1, sort_keys=True))
        summary = {**json.loads((ab / "ab.json").read_text()), "result": result_dict(result)}
        (out / "ab" / f"{ab.name}.md").write_text(to_markdown(summary) + to_html(summary))
    history_all(out)


def recommend_all(out: Path) -> None:
    import attnbench.report.dispatch_table as table
    from attnbench.core.errors import AttnbenchError
    from attnbench.report.mix import to_markdown
    from attnbench.stats.mix import mix_of_runs
    from attnbench.stats.recommend import recommend_runs

    (out / "recommend").mkdir(parents=True, exist_ok=True)
    sets = [[run] for run in runs()] + [sorted((VERDICTS / "compare-3").glob("I*")),
                                        sorted((VERDICTS / "calibration-2").glob("*[0-9]"))]
    for paths in sets:
        name = name_of(paths[0]) + (f"+{len(paths) - 1}" if len(paths) > 1 else "")
        for by in ("time", "energy"):
            try:
                result = recommend_runs(paths, by)
            except AttnbenchError as error:
                text = f"error: {error}\n"
            else:
                text = (table.to_markdown(result.decisions, result.runs, result.metric)
                        + json.dumps(table.to_json(result.decisions, result.runs, result.metric), indent=1)
                        + text_of(table.terminal_table(result.decisions, result.runs, result.metric)))
                if paths[0].name == "cpu-AMD-EPYC-2core-mix" and by == "time":
                    text += to_markdown(mix_of_runs(paths, "mix", result.decisions))
            (out / "recommend" / f"{name}-{by}.txt").write_text(text)


def history_all(out: Path) -> None:
    from attnbench.history.store import Store, add_runs
    from attnbench.history.trend import trend_table, trends

    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "history.db"
        picked = sorted((VERDICTS / "compare-3").glob("I*"))[:4] + [REPORTS / "cpu-Intel-Xeon-2core-quick"]
        added = add_runs(picked, db)
        lines = [f"{a.run.run_id} {a.added} {a.records}" for a in added]
        with Store(db, create=False) as store:
            found = trends(store)
            lines.append(text_of(trend_table([t for t in found if t.timed], "history")))
        (out / "history.txt").write_text("\n".join(lines))


def diff(new: Path, old: Path) -> int:
    """Every file that differs, paths aside."""
    bad = 0
    names = sorted({p.relative_to(new) for p in new.rglob("*") if p.is_file()}
                   | {p.relative_to(old) for p in old.rglob("*") if p.is_file()})
    for name in names:
        a, b = old / name, new / name
        if not (a.is_file() and b.is_file()):
            print(f"only in {'new' if b.is_file() else 'baseline'}: {name}")
            bad += 1
            continue
        x, y = (p.read_text().replace(str(old), "OUT").replace(str(new), "OUT") for p in (a, b))
        if x != y:
            bad += 1
            print(f"differs: {name}")
            sys.stdout.writelines(list(difflib.unified_diff(x.splitlines(True), y.splitlines(True)))[:40])
    print(f"{len(names)} files, {bad} differ")
    return 1 if bad else 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--against", type=Path)
    args = parser.parse_args()
    out, against = args.out.resolve(), args.against.resolve() if args.against else None
    os.chdir(ROOT)
    render_all(out)
    if against is not None:
        sys.exit(diff(out, against))


if __name__ == "__main__":
    main()
