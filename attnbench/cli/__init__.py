"""The command line: the typer app and its commands, thin calls over the rest."""
