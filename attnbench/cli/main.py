"""The command line: each command is a thin call into the package. User errors: one line, exit 2."""

from __future__ import annotations

import sys
import time
from datetime import datetime
from pathlib import Path

import typer

from attnbench.cli import options as opts
from attnbench.cli.app import StopFlag, app, err, out, user_errors
from attnbench.cli.app import state as state  # tests reset --debug
from attnbench.core import policy
from attnbench.core.errors import AttnbenchError


@app.command()
@user_errors
def validate(
    suite: Path = typer.Argument(..., help="Suite YAML file."),
    device: str | None = typer.Option(None, help="Count cases for this device: cpu or cuda (default: both)."),
    plugin: opts.Plugins = None,
) -> None:
    """Check a suite file against the schema and print how many cases it expands to."""
    from attnbench.backends.registry import default_registry
    from attnbench.sweep.suite import load_suite

    plugin = plugin or []
    loaded = load_suite(suite)
    default_registry(plugin).chosen(None, loaded)
    for dev in [device] if device else ["cuda", "cpu"]:
        cases = loaded.cases(dev)
        out.print(f"{suite}: valid; {len(cases)} cases on {dev}")


@app.command("list")
@user_errors
def list_backends(
    device: str = typer.Option("auto", help="Device to judge availability on: auto, cpu or cuda."),
    plugin: opts.Plugins = None,
    fresh: opts.FreshProbes = False,
) -> None:
    """Every registered backend, whether it can run here (and why not), and its library's version."""
    from rich.table import Table

    from attnbench.backends.registry import default_registry
    from attnbench.cli.probes import Probes
    from attnbench.run.compile_cache import default_dir
    from attnbench.run.env import resolve_device

    plugin = plugin or []
    dev = resolve_device(device)
    probes = Probes(dev, default_dir(), fresh)
    if probes.first_call():
        err.print(probes.first_call(), markup=False)
    table = Table(title=f"attnbench backends on {dev}", title_justify="left")
    for column in ("backend", "available", "library", "what it is / why not"):
        table.add_column(column, overflow="fold")
    registry = default_registry(plugin)
    for name in registry.names():
        backend = registry.get(name)
        reason = probes.availability(backend)
        version = backend.version()
        library = f"{backend.library} {version}" if version else f"{backend.library} (not installed)"
        table.add_row(name, "[red]no[/]" if reason else "[green]yes[/]", library, reason or backend.summary)
    probes.save()
    out.print(table)
    if probes.note():
        out.print(probes.note(), markup=False)


@app.command()
@user_errors
def doctor(
    device: str = typer.Option("auto", help="Device to check: auto, cpu or cuda."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON for tools."),
    fresh: opts.FreshProbes = False,
) -> None:
    """What this machine can run: devices, versions, every backend's reason and fix.
    Exit 1 if the default suite can't."""
    import json

    from attnbench.cli.doctor import diagnose, format_text
    from attnbench.cli.probes import Probes
    from attnbench.run.compile_cache import default_dir
    from attnbench.run.env import resolve_device

    dev = resolve_device(device)
    probes = Probes(dev, default_dir(), fresh)
    if probes.first_call():
        err.print(probes.first_call(), markup=False)
    diagnosis = diagnose(dev, probes)
    if as_json:
        out.print_json(json.dumps(diagnosis.to_dict(), default=str))
    else:
        for line in format_text(diagnosis):
            out.print(line, markup=False)
    if not diagnosis.healthy:
        raise typer.Exit(1)


@app.command("suites")
@user_errors
def list_suites() -> None:
    """The suites shipped with attnbench: `attnbench run NAME` runs one without a checkout."""
    from attnbench.sweep.suite import load_suite, packaged_suites

    suites = packaged_suites()
    width = max(map(len, suites), default=10)
    for name, path in suites.items():
        suite = load_suite(path)
        cuda, cpu = len(suite.cases("cuda")), len(suite.cases("cpu"))
        out.print(f"{name:<{width}} {cuda:>5} cases on cuda, {cpu:>3} on cpu  {suite.description}",
                  markup=False)


@app.command()
@user_errors
def init(path: Path = typer.Argument(Path("my-suite.yaml"),
                                     help="Where to write the starter suite.")) -> None:
    """Write a commented starter suite to edit."""
    from attnbench.sweep.suite import STARTER

    if path.exists():
        raise AttnbenchError(f"{path}: already exists; choose another name (nothing was written)")
    try:
        path.write_text(STARTER.read_text(encoding="utf-8"), encoding="utf-8")
    except OSError as exc:
        raise AttnbenchError(f"{path}: cannot be written ({exc.strerror})") from None
    out.print(f"wrote {path}; check it with: attnbench validate {path}", markup=False)


@app.command()
@user_errors
def run(
    suite: Path = typer.Argument(..., help="Suite YAML file."),
    out_dir: Path | None = typer.Option(None, "--out",
                                        help="Output directory (default reports/<suite>-<time>)."),
    backend: opts.Backends = None,
    device: str | None = typer.Option(None, help="auto, cpu or cuda (default: the suite's device)."),
    dry_run: bool = typer.Option(False, "--dry-run",
                                 help="Print the cases and their memory estimates; run nothing."),
    plugin: opts.Plugins = None,
    isolate: opts.Isolate = None,
    timeout: opts.Timeout = None,
    oom_pruning: opts.OomPruning = True,
    resume: Path | None = typer.Option(None, "--resume", metavar="DIR",
                                          help="Finish the run in DIR: only "
                                               "measurements it lacks, appended."),
    force: bool = typer.Option(False, "--force",
                               help="With --resume: continue even on another device or library set."),
    shard: str | None = typer.Option(None, "--shard", metavar="I/N",
                                        help="Run shard I (from 0) of N, balanced by estimated cost."),
    devices: str | None = typer.Option(None, "--devices", metavar="0,1,...",
                                          help="One worker per GPU index, sharing one queue of cases."),
    peak_tflops: opts.PeakTflops = None,
    peak_bandwidth: opts.PeakBandwidth = None,
    timer: opts.Timer = "auto",
    deterministic: opts.Deterministic = False,
    cache_dir: Path | None = typer.Option(None, "--cache-dir", metavar="DIR",
                                             help="torch.compile's caches between runs "
                                                  "(default ~/.cache/attnbench)."),
    estimate_gpu: str | None = typer.Option(None, "--estimate-gpu", metavar="NAME",
                                               help="With --dry-run: estimate the run on this GPU (e.g. "
                                                    "H100) from the datasheet table (with 16 compile workers "
                                                    "unless --compile-workers says)."),
    compile_workers: opts.CompileWorkers = None,
    compile_timeout: opts.CompileTimeout = None,
    trace: opts.Trace = False,
    report: opts.Report = True,
) -> None:
    """Run a suite: check, time and measure every backend on every case; write results.jsonl and env.json."""
    from attnbench.cli import tables
    from attnbench.run import session
    from attnbench.run.devices import parse_devices
    from attnbench.run.options import resume_command
    from attnbench.run.shard import parse_shard
    from attnbench.run.tally import Phases, process_start, reference_line, timed_line, wall_line, wall_phases

    check_run_flags(out_dir, resume, estimate_gpu, dry_run)
    options = opts.run_options(
        backend=backend, device=device, plugin=plugin, isolate=isolate, timeout=timeout,
        oom_pruning=oom_pruning, peak_tflops=peak_tflops, peak_bandwidth=peak_bandwidth, timer=timer,
        deterministic=deterministic, devices=tuple(parse_devices(devices)) if devices is not None else None,
        cache_dir=cache_dir, shard=parse_shard(shard) if shard is not None else None,
        resume=resume is not None, force=force, compile_workers=compile_workers,
        compile_timeout=compile_timeout, trace=trace)
    plan = session.plan(suite, options, estimate_gpu)
    if dry_run:
        tables.print_dry_run(session.dry_run(plan, options, estimate_gpu), out)
        return
    chosen = options.shard
    shard_tag = f"-shard{chosen.index}of{chosen.count}" if chosen else ""
    directory = resume or out_dir or (
        Path("reports") / f"{plan.suite.name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}{shard_tag}")
    stop = StopFlag()
    phases = Phases()
    phases.add("startup", time.time() - process_start())
    with stop.installed():
        outcome = session.execute(plan, directory, err, stop.is_set, options, phases)
    with phases.timing("report"):
        tables.print_summary(outcome.records, out, outcome.unavailable)
        err.print(f"results: {outcome.results}; "
                  f"{reference_line(outcome.tally, time.time() - process_start())}")
        if outcome.measured and report:
            from attnbench.report.render import render_report

            written = render_report(directory)
            err.print(f"report: {directory / 'report.html'} ({len(written)} files)")
    wall_s = time.time() - process_start()
    session.record_actual(directory, outcome, wall_s, phases)
    err.print(wall_line(wall_phases(outcome.tally, phases.seconds, outcome.workers), wall_s), markup=False)
    last = timed_line(outcome.tally, wall_s)
    if outcome.mismatches:
        err.print(f"[bold red]{outcome.mismatches} measurement(s) did not match the reference[/]")
    if outcome.implausible:
        err.print(f"[bold red]{outcome.implausible} measurement(s) timed faster than the GPU can run: their "
                  "timing is broken (status implausible)[/]")
    if outcome.stopped:
        err.print(f"stopped after {outcome.measured} of {outcome.planned} measurements; "
                  f"the results so far are in {directory}")
        err.print(f"to finish the run: {resume_command(suite, directory, options)}", markup=False)
        err.print(last, markup=False)
        raise typer.Exit(130)
    err.print(last, markup=False)
    if outcome.failed:
        raise typer.Exit(1)


def check_run_flags(out_dir: Path | None, resume: Path | None, estimate_gpu: str | None,
                    dry_run: bool) -> None:
    """The rules between `run`'s flags that are not run options (those are RunOptions')."""
    if resume is not None and out_dir is not None and out_dir.resolve() != resume.resolve():
        raise AttnbenchError(f"--out {out_dir} and --resume {resume}: a resumed run writes "
                             "into DIR; give one of them")
    if resume is not None and not resume.is_dir():
        raise AttnbenchError(f"--resume {resume}: no such run directory")
    if estimate_gpu is not None and not dry_run:
        raise AttnbenchError("--estimate-gpu only applies with --dry-run (it predicts a run "
                             "on a GPU that is not here)")


@app.command()
@user_errors
def merge(
    sources: list[Path] = typer.Argument(..., help="Run directories (shards) to combine."),
    out_dir: Path = typer.Option(..., "--out",
                                 help="Directory for the merged results.jsonl, env.json and report."),
) -> None:
    """Combine shard runs into one: refuses overlapping measurements, mixed schema versions or devices."""
    from attnbench.records.merge import merge_runs
    from attnbench.report.render import render_report

    merged = merge_runs(sources, out_dir)
    err.print(f"merged {merged.records} records from {merged.sources} runs into {out_dir / 'results.jsonl'}")
    written = render_report(out_dir)
    err.print(f"report: {out_dir / 'report.html'} ({len(written)} files)")


@app.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@user_errors
def submit(
    ctx: typer.Context,
    suite: Path = typer.Argument(..., help="Suite YAML file (or a packaged suite's name)."),
    shards: int = typer.Option(..., "--shards", metavar="N",
                               help="Number of shards: one SLURM array task each."),
    gpus_per_task: int | None = typer.Option(None, "--gpus-per-task", metavar="G",
                                             help="GPUs for each task."),
    partition: str | None = typer.Option(None, "--partition", metavar="P", help="SLURM partition."),
    time: str | None = typer.Option(None, "--time", metavar="HH:MM:SS", help="Time limit of each task."),
    account: str | None = typer.Option(None, "--account", metavar="A", help="SLURM account to charge."),
    sbatch_arg: list[str] = typer.Option([], "--sbatch-arg", metavar="OPTION",
                                         help="Another sbatch option, e.g. "
                                              "--sbatch-arg=--qos=high (repeatable)."),
    out_dir: Path | None = typer.Option(None, "--out",
                                        help="Directory for the shards, scripts, logs and the "
                                             "merged run (default reports/<suite>-<time>)."),
    dry_run: bool = typer.Option(False, "--dry-run",
                                 help="Print the scripts and the sbatch calls; submit nothing."),
    backend: opts.Backends = None,
    device: str | None = typer.Option(None, help="cpu or cuda for every shard (default: the suite's; for "
                                                 "'auto', cuda when the tasks ask for GPUs)."),
    plugin: opts.Plugins = None,
    isolate: opts.Isolate = None,
    timeout: opts.Timeout = None,
    oom_pruning: opts.OomPruning = True,
    peak_tflops: opts.PeakTflops = None,
    peak_bandwidth: opts.PeakBandwidth = None,
    timer: opts.Timer = "auto",
    deterministic: opts.Deterministic = False,
    compile_workers: opts.CompileWorkers = None,
    compile_timeout: opts.CompileTimeout = None,
) -> None:
    """Run a suite on a SLURM cluster: a job array with one task per shard, then a merge job and its report."""
    from attnbench.cluster import submit as submission
    from attnbench.cluster.sbatch import SlurmOptions

    if ctx.args:  # unknown options are ours to report: one line, exit 2, like every other bad input
        from attnbench.core.errors import did_you_mean

        word = ctx.args[0].split("=", 1)[0]
        kind = "option" if word.startswith("-") else "argument"
        names = [name for param in ctx.command.params for name in (*param.opts, *param.secondary_opts)]
        raise AttnbenchError(f"submit: unknown {kind} {word!r}{did_you_mean(word, names)}; "
                             f"see attnbench submit --help (nothing was submitted)")
    request = submission.Request(
        suite, shards, out_dir, SlurmOptions(partition, time, gpus_per_task, account, tuple(sbatch_arg)),
        opts.run_options(backend=backend, device=device, plugin=plugin, isolate=isolate, timeout=timeout,
                         oom_pruning=oom_pruning, peak_tflops=peak_tflops, peak_bandwidth=peak_bandwidth,
                         timer=timer, deterministic=deterministic, compile_workers=compile_workers,
                         compile_timeout=compile_timeout))
    prepared = submission.prepare(request)
    if dry_run:
        out.print(submission.dry_run_text(prepared), markup=False, end="")
        return
    submission.require_sbatch()
    jobs = submission.submit(prepared)
    for line in submission.submitted_lines(prepared, jobs):
        out.print(line, markup=False)


@app.command()
@user_errors
def status(
    directory: Path = typer.Argument(..., help="The --out directory of attnbench submit."),
    require_complete: bool = typer.Option(False, "--require-complete",
                                          help="Exit 1 unless every shard holds all its measurements "
                                               "(what the merge job checks first)."),
) -> None:
    """How far a submitted run is: measurements done of planned, per shard, and what SLURM says of each task."""
    from attnbench.cluster import status as progress

    manifest = progress.read_manifest(directory)
    states = progress.scheduler_states(progress.job_ids(manifest))
    shards = progress.shard_progress(directory, manifest, states)
    for line in progress.report_lines(directory, manifest, shards, states):
        out.print(line, markup=False)
    unfinished = [p for p in shards if not p.complete]
    if require_complete and unfinished:
        listed = ", ".join(f"{p.index} ({p.done} of {p.planned})" for p in unfinished)
        err.print(f"not merged: shard(s) {listed} lack measurements. Rerun just those shards with: "
                  f"{manifest.get('command')}", markup=False)
        raise typer.Exit(1)


@app.command()
@user_errors
def report(
    source: Path = typer.Argument(..., help="A run directory, or its results.jsonl (or a committed run's "
                                            "results.jsonl.gz)."),
    out_dir: Path | None = typer.Option(None, "--out",
                                        help="Where to write (default: beside the results; for "
                                             "compressed results, their folder's rendered/)."),
    formats: str = typer.Option("html,png,md", "--format", help="Comma-separated: html, png, md."),
    baseline: str | None = typer.Option(None,
                                        help="Backend speed-ups are relative to (default sdpa-math, else "
                                             "naive)."),
    peak_tflops: float | None = typer.Option(None, help="Device peak TFLOP/s for the reference line."),
) -> None:
    """Re-render report.html, charts/*.png and summary.md from stored results; runs nothing."""
    from attnbench.report.render import render_report

    chosen = [f.strip() for f in formats.split(",") if f.strip()]
    for path in render_report(source, out_dir, chosen, baseline, peak_tflops):
        out.print(str(path))


@app.command()
@user_errors
def compare(
    runs: list[Path] = typer.Argument(..., metavar="[BASE] NEW",
                                      help="BASE and NEW run directories (or results.jsonl); NEW alone with "
                                           "--against."),
    against: str | None = typer.Option(None, "--against", metavar="history",
                                          help="Compare NEW with the latest earlier run of its GPU in the "
                                               "history store (attnbench history add)."),
    db: opts.HistoryDb = None,
    threshold: str = typer.Option(policy.percent(policy.CHANGE_THRESHOLD),
                                  help="Smallest change judged (a regression or an improvement), with the "
                                       "two intervals apart; e.g. 10% or 0.1."),
    md: Path | None = typer.Option(None, "--md", help="Also write the comparison as Markdown to this file."),
    absolute: bool = typer.Option(False, "--absolute",
                                  help="Judge the raw ratios, not each against the run's pace (the median "
                                       "ratio, used when both runs come from one machine with the same "
                                       "software and the pace is within that machine's noise)."),
) -> None:
    """NEW/BASE median-time ratios per matching measurement; exit 1 on a regression, a shared slowdown of every
    kernel, or a new failure (or, in a deterministic run, a measurement turned non-repeatable); exit 3 when BASE and
    NEW ran on different machines and nothing broke (a kernel's change cannot be judged there)."""
    from attnbench.report.compare_table import comparison_markdown, comparison_table, machine_warning
    from attnbench.stats.compare import compare_runs

    if against is not None and against != "history":
        raise AttnbenchError(f"--against {against!r}: allowed: history")
    if against is None and len(runs) != 2:
        raise AttnbenchError(f"compare takes BASE and NEW ({len(runs)} given), or NEW "
                             "alone with --against history")
    if against is not None and len(runs) != 1:
        raise AttnbenchError(f"compare --against history takes NEW alone ({len(runs)} given)")
    if db is not None and against is None:
        raise AttnbenchError("--db only applies with --against history")
    if against is None:
        result = compare_runs(runs[0], runs[1], parse_fraction(threshold), relative=not absolute)
    else:
        from attnbench.history.compare import compare_with_history

        result = compare_with_history(runs[0], db, parse_fraction(threshold), relative=not absolute)
        err.print(f"base: {result.base}", markup=False)
    if warning := machine_warning(result):
        err.print(warning, style="bold yellow", markup=False)
    out.print(comparison_table(result))
    if md is not None:
        from attnbench.records.results import write_text_atomic

        write_text_atomic(md, comparison_markdown(result))
    if result.exit_code:
        raise typer.Exit(result.exit_code)


def parse_fraction(text: str) -> float:
    """'5%' or '0.05' -> 0.05; anything else is a user error."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise AttnbenchError(f"--threshold {text!r}: expected a percentage like "
                             "5% or a fraction like 0.05") from None
    if not 0 <= value <= 10:
        raise AttnbenchError(f"--threshold {text!r}: out of range; allowed: 0% to 1000%")
    return value


# recommend and history live in their own module, which adds them to the app: imported last, they come after
# compare in --help.
from attnbench.cli import ab as cli_ab  # noqa: E402,F401 - `ab`, a paired A/B of two environments
from attnbench.cli import decide as cli_decide  # noqa: E402,F401


def main() -> None:
    """Console-script entry point."""
    sys.exit(app())
