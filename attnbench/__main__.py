"""`python -m attnbench` runs the command line."""

from attnbench.cli import main

main()
