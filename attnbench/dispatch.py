"""The public face of the dispatch table for model code (`from attnbench.dispatch import DispatchTable`): the
table is written by `attnbench recommend --out` and read by attnbench.stats.dispatch, which this path is."""

from __future__ import annotations

import sys

from attnbench.stats import dispatch as _dispatch

sys.modules[__name__] = _dispatch
