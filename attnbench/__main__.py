"""`python -m attnbench` runs the command line."""

from attnbench.cli.main import main

if __name__ == "__main__":  # not when something imports this module (multiprocessing spawn does)
    main()
