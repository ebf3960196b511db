"""The command line: each command is a thin call into the package. User errors: one line, exit 2."""

from __future__ import annotations

import functools
import signal
import sys
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, List, Optional, TypeVar

import typer
from rich.console import Console

from attnbench import __version__
from attnbench.errors import AttnbenchError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Benchmark attention implementations on long sequences: correctness, latency, memory.",
)
# Plain lines never wrap; tables get a wide page when the output is a log file rather than a terminal.
out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False, soft_wrap=True, width=None if sys.stderr.isatty() else 160)
F = TypeVar("F", bound=Callable[..., Any])
state = {"debug": False}


def user_errors(fn: F) -> F:
    """Turn an AttnbenchError into one line on stderr and exit code 2 (a traceback only with --debug)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except AttnbenchError as exc:
            if state["debug"]:
                raise
            err.print(f"[bold red]error:[/] {exc}", markup=True, highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def _version(value: bool) -> None:
    if value:
        out.print(f"attnbench {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for user errors."),
) -> None:
    state["debug"] = debug


@app.command()
@user_errors
def validate(
    suite: Path = typer.Argument(..., help="Suite YAML file."),
    device: Optional[str] = typer.Option(None, help="Count cases for this device: cpu or cuda (default: both)."),
    plugin: List[str] = typer.Option([], "--plugin", help="Extra backend, as module:attr."),
) -> None:
    """Check a suite file against the schema and print how many cases it expands to."""
    from attnbench.registry import default_registry
    from attnbench.session import check_backends
    from attnbench.suite import load_suite

    loaded = load_suite(suite)
    check_backends(loaded, default_registry(plugin), None)
    for dev in [device] if device else ["cuda", "cpu"]:
        cases = loaded.cases(dev)
        out.print(f"{suite}: valid; {len(cases)} cases on {dev}")


@app.command("list")
@user_errors
def list_backends(
    device: str = typer.Option("auto", help="Device to judge availability on: auto, cpu or cuda."),
    plugin: List[str] = typer.Option([], "--plugin", help="Extra backend, as module:attr."),
) -> None:
    """Every registered backend, whether it can run here (and why not), and its library's version."""
    from rich.table import Table

    from attnbench.env import resolve_device
    from attnbench.registry import default_registry

    dev = resolve_device(device)
    table = Table(title=f"attnbench backends on {dev}", title_justify="left")
    for column in ("backend", "available", "library", "what it is / why not"):
        table.add_column(column, overflow="fold")
    registry = default_registry(plugin)
    for name in registry.names():
        backend = registry.get(name)
        reason = backend.availability(dev)
        version = backend.version()
        library = f"{backend.library} {version}" if version else f"{backend.library} (not installed)"
        table.add_row(name, "[red]no[/]" if reason else "[green]yes[/]", library, reason or backend.summary)
    out.print(table)


@app.command()
@user_errors
def run(
    suite: Path = typer.Argument(..., help="Suite YAML file."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Output directory (default reports/<suite>-<time>)."),
    backend: List[str] = typer.Option([], "--backend", help="Run only these backends (repeatable)."),
    device: Optional[str] = typer.Option(None, help="auto, cpu or cuda (default: the suite's device)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the cases and their memory estimates; run nothing."),
    plugin: List[str] = typer.Option([], "--plugin", help="Extra backend, as module:attr."),
) -> None:
    """Run a suite: check, time and measure every backend on every case; write results.jsonl and env.json."""
    from attnbench import session

    plan = session.plan(suite, backend or None, device, plugin)
    if dry_run:
        session.print_dry_run(plan, out)
        return
    directory = out_dir or Path("reports") / f"{plan.suite.name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    stop = StopFlag()
    with stop.installed():
        outcome = session.execute(plan, directory, out, err, stop.is_set)
    if outcome.mismatches:
        err.print(f"[bold red]{outcome.mismatches} measurement(s) did not match the reference[/]")
    if outcome.stopped:
        err.print(f"stopped after {outcome.measured} of {outcome.planned} measurements; "
                  f"the results so far are in {directory}")
        raise typer.Exit(130)
    if outcome.mismatches:
        raise typer.Exit(1)


class StopFlag:
    """Ctrl-C (SIGINT) or SIGTERM asks the run to stop after the current measurement; twice aborts."""

    def __init__(self) -> None:
        self._set = False

    def is_set(self) -> bool:
        return self._set

    def _handle(self, signum: int, frame: object) -> None:
        if self._set:
            raise KeyboardInterrupt
        self._set = True
        err.print("\nstopping after the current measurement (press Ctrl-C again to abort now)")

    def installed(self) -> Any:
        import contextlib

        @contextlib.contextmanager
        def scope() -> Any:
            previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield self
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

        return scope()


def main() -> None:
    """Console-script entry point."""
    sys.exit(app())
