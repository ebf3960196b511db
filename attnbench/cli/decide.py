"""The commands that turn runs into decisions and keep them over time: `recommend`, and `history
add|show|plot`. Declared like every other command (attnbench.cli.main): thin calls into the package, user
errors one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from attnbench.cli import options as opts
from attnbench.cli.app import app, err, out, user_errors
from attnbench.core.errors import AttnbenchError


@app.command()
@user_errors
def recommend(
    runs: list[Path] = typer.Argument(...,
                                      help="Run directories (or results.jsonl) of one device; several are "
                                           "pooled."),
    out_file: Path | None = typer.Option(None, "--out", metavar="FILE",
                                            help="Write the dispatch table as JSON (an "
                                                 "existing file is refused)."),
    md: Path | None = typer.Option(None, "--md", metavar="FILE",
                                      help="Also write the table as Markdown (an existing file is refused)."),
    by: str = typer.Option("time", "--by", metavar="time|energy",
                           help="Rank by median time per call, or by energy per call (extra.energy_mj)."),
    mix: Path | None = typer.Option(None, "--mix", metavar="SUITE",
                                       help="Also weigh the suite's mix: traffic: time per request for each "
                                            "backend and for the dispatch, its gain, prefill/decode shares."),
) -> None:
    """Per bucket of shapes, the backend to call: correct, untroubled, told apart from the runner-up; sdpa's cost."""
    import attnbench.report.dispatch_table as table
    from attnbench.stats.recommend import recommend_runs

    targets = [path for path in (out_file, md) if path is not None]
    if len(targets) == 2 and out_file.resolve() == md.resolve():  # type: ignore[union-attr]
        raise AttnbenchError(f"--out and --md both name {out_file}; give each its own file")
    for path in targets:
        if path.exists():
            raise AttnbenchError(f"{path}: already exists; choose another name (nothing was written)")
    result = recommend_runs(runs, by)
    weighed = ""
    if mix is not None:  # weighed before anything is printed: a bad mix is one line, exit 2
        from attnbench.report.mix import to_markdown
        from attnbench.stats.mix import mix_of_runs

        weighed = "\n" + to_markdown(mix_of_runs(runs, mix, result.decisions))
    out.print(table.terminal_table(result.decisions, result.runs, result.metric))
    if weighed:
        out.print(weighed, markup=False)
    if out_file is not None:
        data = table.to_json(result.decisions, result.runs, result.metric)
        table.write_new(out_file, json.dumps(data, indent=2) + "\n")
        err.print(f"dispatch table: {out_file} ({len(data['rows'])} buckets)", markup=False)
    if md is not None:
        table.write_new(md, table.to_markdown(result.decisions, result.runs, result.metric) + weighed)
        err.print(f"markdown: {md}", markup=False)


history_app = typer.Typer(no_args_is_help=True,
                          help="A local store of runs over time: add runs, show and plot "
                               "their trends, compare against them.")
app.add_typer(history_app, name="history")


@history_app.command("add")
@user_errors
def history_add(
    runs: list[Path] = typer.Argument(..., help="Run directories (or results.jsonl) to add."),
    db: opts.HistoryDb = None,
) -> None:
    """Append runs' records and environment to the store; a run already held gets only the records it lacks or holds
    older (a resumed run), and the same records again write nothing."""
    from attnbench.history.store import add_runs, default_path

    for done in add_runs(runs, db):
        run = done.run
        what = f"{run.run_id} ({run.device_name or run.device}, {run.timestamp}) from {run.path}"
        if done.added:
            message = f"added {what}: {done.records} records"
        elif done.records:
            message = f"updated {what}: {done.records} records new or newer"
        else:
            message = f"already held: {what}; nothing added"
        out.print(message, markup=False)
    err.print(f"store: {db or default_path()}", markup=False)


@history_app.command("check")
@user_errors
def history_check(db: opts.HistoryDb = None) -> None:
    """Run SQLite's PRAGMA integrity_check on the store: 'ok' and its size, or one line with what is damaged, exit 2."""
    from attnbench.history.store import Store

    with Store(db, create=False) as store:
        runs, records = store.check()
    out.print(f"{store.path}: ok ({runs} runs, {records} records)", markup=False)


@history_app.command("show")
@user_errors
def history_show(
    backend: opts.HistoryBackends = [],  # noqa: B006 - typer reads the default; it is never mutated
    case: opts.HistoryCases = [],  # noqa: B006
    gpu: opts.HistoryGpus = [],  # noqa: B006
    db: opts.HistoryDb = None,
) -> None:
    """Per (GPU, case, backend), the median and interval of each dated run, with library-version changes marked."""
    from attnbench.history.store import Store
    from attnbench.history.trend import trend_table, trends

    with Store(db, create=False) as store:
        found = trends(store, backend, case, gpu)
        title = f"{store.path}: {len(store.runs())} runs"
    shown = [t for t in found if t.timed]
    if not found:
        raise AttnbenchError(f"no record in {title.split(':')[0]} matches the filters")
    out.print(trend_table(shown, title))
    if len(shown) < len(found):
        err.print(f"{len(found) - len(shown)} (case, backend) pairs never timed in any run "
                  "(skipped or failed): not shown", markup=False)


@history_app.command("plot")
@user_errors
def history_plot(
    backend: opts.HistoryBackends = [],  # noqa: B006 - typer reads the default; it is never mutated
    case: opts.HistoryCases = [],  # noqa: B006
    gpu: opts.HistoryGpus = [],  # noqa: B006
    out_dir: Path = typer.Option(Path("history-plots"), "--out", metavar="DIR",
                                 help="Where the PNGs go (one per GPU, case and "
                                      "backend; same names are redrawn)."),
    db: opts.HistoryDb = None,
) -> None:
    """One PNG per (GPU, case, backend): each run's median with its interval, library-version changes marked."""
    from attnbench.history.store import Store
    from attnbench.history.trend import trends
    from attnbench.report.history_plot import plot_trends

    with Store(db, create=False) as store:
        found = trends(store, backend, case, gpu)
    if not any(t.timed for t in found):
        raise AttnbenchError("no timed record in the store matches the filters; nothing drawn")
    written = plot_trends(found, out_dir)
    out.print(f"wrote {len(written)} PNGs under {out_dir}", markup=False)
