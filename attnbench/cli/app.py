"""The command line's one Typer app and what every command module shares: the consoles, the user-error wrapper
(one line, exit 2), the Ctrl-C stop flag, --version and --debug. attnbench.cli.main and attnbench.cli.decide
add their commands to it."""

from __future__ import annotations

import contextlib
import functools
import signal
import sys
import unicodedata
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from attnbench import __version__
from attnbench.core.errors import AttnbenchError

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
LINE_BREAKING = ("Cc", "Zl", "Zp")  # control characters and line and paragraph separators
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
            # the message is text, not markup: "[queries, keys]" in it must print as written one line,
            # whatever the input put in it: a control character or line separator (in a suite key, say) is
            # shown escaped
            text = "".join(c.encode("unicode_escape").decode("ascii")
                           if unicodedata.category(c) in LINE_BREAKING
                           else c for c in str(exc))
            err.print(f"[bold red]error:[/] {escape(text)}", markup=True, highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def _version(value: bool) -> None:
    if value:
        out.print(f"attnbench {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Show the version."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for user errors."),
) -> None:
    state["debug"] = debug


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

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopFlag]:
        """Its handlers in place for a `with` block; the previous ones back after it."""
        previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
