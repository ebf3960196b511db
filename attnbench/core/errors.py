"""The errors a user sees: caught once by the CLI, printed as one line, exit 2."""

from __future__ import annotations


class AttnbenchError(Exception):
    """A problem with what the user asked for."""


class SuiteError(AttnbenchError):
    """A suite file that cannot be read or does not follow the schema."""


class RegistryError(AttnbenchError):
    """An unknown backend, a duplicate registration, or a plugin that does not load."""


class ResultsError(AttnbenchError):
    """A missing results file or directory, or not attnbench's."""


def did_you_mean(word: str, choices: list[str]) -> str:
    """' (did you mean 'x'?)' for a near miss, else ''."""
    import difflib

    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
