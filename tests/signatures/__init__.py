"""Recorded signatures of the libraries attnbench calls, copied from their sources (see each file's header).

Each file defines functions with exactly the installed library's parameter list, bodies removed, so the
tests can hold attnbench's declared calls against libraries that do not install on a CPU machine.
"""
