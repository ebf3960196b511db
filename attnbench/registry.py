"""The old import path of the backend registry, kept for plugins written against it:
attnbench.backends.registry."""

from __future__ import annotations

import sys
import warnings

from attnbench.backends import registry as _registry

warnings.warn("attnbench.registry is now attnbench.backends.registry; the old path "
              "will go in a later release",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _registry
