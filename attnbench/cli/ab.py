"""`attnbench ab`: a paired A/B of two Python environments in one run (attnbench.run.ab). Declared like every
other command (attnbench.cli.main): a thin call into the package, user errors one line and exit 2."""

from __future__ import annotations

import os
import time
from datetime import datetime
from pathlib import Path

import typer

from attnbench.cli import options as opts
from attnbench.cli.app import StopFlag, app, err, out, user_errors
from attnbench.core.errors import AttnbenchError
from attnbench.stats.ab import DEFAULT_THRESHOLD, min_pairs

DEFAULT_ROUNDS = 6


@app.command()
@user_errors
def ab(
    suite: Path = typer.Argument(..., help="Suite YAML file (or a packaged suite's name)."),
    python_a: str = typer.Option(..., "--a", metavar="PYTHON", help="Environment A's Python (the baseline)."),
    python_b: str = typer.Option(..., "--b", metavar="PYTHON",
                                 help="Environment B's Python (the candidate)."),
    a_env: list[str] = typer.Option([], "--a-env", metavar="NAME=VALUE",
                                    help="A variable for A's worker only."),
    b_env: list[str] = typer.Option([], "--b-env", metavar="NAME=VALUE",
                                    help="A variable for B's worker only."),
    rounds: int = typer.Option(DEFAULT_ROUNDS, "--rounds", min=1, metavar="N",
                               help=f"Paired rounds per measurement (at least {min_pairs()} for a 95% "
                                    "verdict); each side's round gets budget_ms / N."),
    threshold: float = typer.Option(DEFAULT_THRESHOLD, "--threshold", min=0.0, metavar="FRACTION",
                                    help="The smallest B/A change called a regression or an improvement."),
    out_dir: Path | None = typer.Option(None, "--out",
                                        help="Output directory (default reports/ab-<suite>-<time>)."),
    backend: opts.Backends = None,
    device: str | None = typer.Option(None, help="auto, cpu or cuda (default: the suite's device)."),
    plugin: opts.Plugins = None,
) -> None:
    """Measure a suite in two Python environments, rounds interleaved (A B B A); judge B against A, paired.
    Exit 1 when B is slower beyond --threshold and the noise (or broke a measurement A ran), else 0."""
    from attnbench.report.ab_text import result_dict, write_summary
    from attnbench.run import ab as paired
    from attnbench.run import session
    from attnbench.stats.ab import pair_up

    plugin = plugin or []
    backend = backend or []
    if rounds < min_pairs():
        raise AttnbenchError(f"--rounds {rounds}: a paired verdict at 95% needs at "
                             f"least {min_pairs()} rounds")
    envs = (paired.parse_env(a_env, "--a-env"), paired.parse_env(b_env, "--b-env"))
    plan = session.plan(suite, opts.run_options(
        backend=backend, device=device, plugin=plugin, isolate=True, timeout=None, oom_pruning=True,
        peak_tflops=None, peak_bandwidth=None, timer="auto", deterministic=False))
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    directory = out_dir or Path("reports") / f"ab-{plan.suite.name}-{stamp}"
    start = time.time()
    load = {"start": round(os.getloadavg()[0], 2)}

    def say(line: str) -> None:
        err.print(line, markup=False)

    run = paired.make_ab(plan, (python_a, python_b), envs, rounds, directory, say)
    for side in run.sides:
        probe = side.facts["probe"]
        say(f"{side.label}: {side.python}: torch {probe['torch']}, attnbench {probe['attnbench']}")
    stop = StopFlag()
    with stop.installed():
        records = paired.run_ab(run, stop.is_set)
    load["end"] = round(os.getloadavg()[0], 2)
    result = pair_up(records["A"], records["B"], threshold)
    summary = {**paired.describe(run), "wall_s": round(time.time() - start, 1), "load": load,
               "exit_code": int(result.regressed), "result": result_dict(result)}
    write_summary(directory, summary)
    for group in summary["result"]["backends"] + [summary["result"]["overall"] or {}]:
        if group:
            out.print(f"{group['name']:>16}: {group['words']}", markup=False)
    err.print(f"A/B: {directory / 'ab.md'} ({directory / 'a'}, {directory / 'b'})", markup=False)
    if run.stopped:
        err.print(f"stopped: the verdicts above are of the rounds made before it ({directory})", markup=False)
        raise typer.Exit(130)
    if summary["result"]["regressions"]:
        err.print(f"B regressed: {', '.join(summary['result']['regressions'])}", markup=False)
        raise typer.Exit(1)
